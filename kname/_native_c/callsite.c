/*
 * kname._native's site finding (see launch.h): a launch's site found in kname.callsite's
 * `sites` as callsite.resolve would find it, with the recent table in front (what a cached
 * launch remembers is set here, in remember_launch), the kinds of code read from `kinds` for the
 * walk past library frames, the launch in progress on each thread (launch_caller), and the
 * forgetting that keeps every remembered answer true.
 */
#include "_native_c/callsite.h"

/* Set by the launch wrapper around each launch (launch.h), read by the walk below and by
 * is_launch_caller, which kname.callsite's walk asks. */
_Thread_local Frame *launch_caller INITIAL_EXEC = NULL;

PyObject *switch_names[1];
PyObject *site_names[4];

/* ------------------------------------------------------------------ recent look-ups */

Recent recent[RECENT];
RecentKind recent_kinds[RECENT];

/* Every entry stale at once: their generations no longer read the same (see generation_of). */
static PyObject *
forget_launches(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    forget_all();
    Py_RETURN_NONE;
}

void
empty_recent(void)
{
    memset(recent, 0, sizeof recent);
}

/* ------------------------------------------------------------------ look-ups */

static PyObject *
site_key(PyCodeObject *code, int code_lasti, PyObject *kernel_key)
{
    PyObject *code_id = PyLong_FromVoidPtr(code); /* a site leaves as its code is freed */
    if (code_id == NULL)
        return NULL;
    PyObject *lasti = PyLong_FromLong(code_lasti);
    if (lasti == NULL) {
        Py_DECREF(code_id);
        return NULL;
    }
    PyObject *key = PyTuple_New(3);
    if (key == NULL) {
        Py_DECREF(code_id);
        Py_DECREF(lasti);
        return NULL;
    }
    PyTuple_SET_ITEM(key, 0, code_id);
    PyTuple_SET_ITEM(key, 1, lasti);
    PyTuple_SET_ITEM(key, 2, Py_NewRef(kernel_key));
    return key;
}

/* The classes whose instances, and which themselves, tell of every change (kname._watched's
 * Watched, given by watch_changes_of): a cached launch may remember what it reads of them. */
static PyTypeObject *watched_class;

static int
tells_of_changes(PyObject *obj)
{
    return watched_class != NULL && PyObject_TypeCheck(obj, watched_class);
}

/* The switch's `on` read in place (no Python code runs): 1 on, 0 off or not readable so. */
static int
switch_reads_on(LaunchWrapper *w)
{
    return fit_layout(&w->switch_layout, w->switch_, switch_names, 1)
           && slot_value(&w->switch_layout, w->switch_, 0) == Py_True;
}

/* What a launch of `w` that finds `site` in `entry` will read, remembered there where that launch
 * is the common one: the switch on; the site's counter kname's own, its launch the original (no
 * rename) and its range NVTX's own calls (or none); all read in place, from a switch and a site
 * that tell of their changes. Anything else leaves the entry's counter NULL: that launch takes
 * every step (launch_in_full), as does one whose kernel is not read in place (cached_kernel). */
static int remember_profiled(PyObject *push, PyObject *pop);

static void
remember_launch(LaunchWrapper *w, PyObject *site, Recent *entry)
{
    entry->counter = NULL;
    /* A wrapper the collector has cleared remembers nothing: its clearing emptied the table, and
     * direct_call's short path trusts an entry of it to mean it is whole. */
    if (site == NULL || w->original == NULL || !tells_of_changes(site)
        || !tells_of_changes(w->switch_) || !switch_reads_on(w))
        return;
    if (!fit_layout(&w->site_layout, site, site_names, 4))
        return;
    const Layout *fields = &w->site_layout;
    PyObject *counter = slot_value(fields, site, F_COUNTER);
    PyObject *push = slot_value(fields, site, F_PUSH), *pop = slot_value(fields, site, F_POP);
    if (counter == NULL || !Py_IS_TYPE(counter, &CounterType)
        || slot_value(fields, site, F_LAUNCH) != Py_None)
        return;
    if (push == Py_None && pop == Py_None) {
        entry->attributes = entry->domain = NULL;
        entry->counter = (Counter *)counter;
        return;
    }
#ifdef KNAME_NVTX
    /* A push's own pop closes the push's domain: the pop is known without being read. */
    if (push != NULL && Py_IS_TYPE(push, &NvtxCallType) && ((NvtxCall *)push)->pop != NULL
        && pop == ((NvtxCall *)push)->pop) {
        entry->attributes = &((NvtxCall *)push)->attributes;
        entry->domain = ((NvtxCall *)push)->domain;
        entry->counter = (Counter *)counter;
        return;
    }
#endif
    if (remember_profiled(push, pop)) {
        entry->attributes = &((KnameProfiledCall *)push)->profiled;
        entry->domain = &profiled_range;
        entry->counter = (Counter *)counter;
    }
}

/* ---- kname profile's site calls, run by a cached launch */

char profiled_range; /* its address marks a remembered range as theirs */

/* Whether `push` and `pop` are one site's calls of kname profile whose NVTX calls, if any, are
 * this module's (their range then noted in the push's head, for open_profiled). */
static int
remember_profiled(PyObject *push, PyObject *pop)
{
    KnameProfiledCall *opening = profiled_call(push), *closing = profiled_call(pop);
    if (opening == NULL || closing == NULL || opening->profiled.is_pop || !closing->profiled.is_pop
        || opening->profiled.owner != closing->profiled.owner)
        return 0;
    PyObject *nvtx_push = opening->profiled.nvtx, *nvtx_pop = closing->profiled.nvtx;
    if (nvtx_push == NULL && nvtx_pop == NULL) {
        opening->profiled.nvtx_attributes = NULL;
        return 1;
    }
#ifdef KNAME_NVTX
    if (nvtx_push != NULL && Py_IS_TYPE(nvtx_push, &NvtxCallType)
        && ((NvtxCall *)nvtx_push)->pop != NULL && nvtx_pop == ((NvtxCall *)nvtx_push)->pop) {
        opening->profiled.nvtx_attributes = &((NvtxCall *)nvtx_push)->attributes;
        opening->profiled.nvtx_domain = ((NvtxCall *)nvtx_push)->domain;
        return 1;
    }
#endif
    return 0;
}

/* The push: its NVTX range opened, then its site marked, the call held until the pop (the
 * launch may run Python code that drops the site and its calls). */
void
open_profiled(const void *profiled)
{
    const KnameProfiled *p = profiled;
    Py_INCREF((PyObject *)((const char *)p - offsetof(KnameProfiledCall, profiled)));
#ifdef KNAME_NVTX
    if (p->nvtx_attributes != NULL) {
        nvtxDomainRangePushEx((nvtxDomainHandle_t)p->nvtx_domain,
                              (const nvtxEventAttributes_t *)p->nvtx_attributes);
        kname_ranges_open++; /* the driver hook names no launch inside a kname range */
    }
#endif
    p->mark(p);
}

/* The pop: the mark removed, then the NVTX range closed. */
void
close_profiled(const void *profiled)
{
    const KnameProfiled *p = profiled;
    p->unmark(p);
#ifdef KNAME_NVTX
    if (p->nvtx_attributes != NULL) {
        kname_ranges_open--;
        nvtxDomainRangePop((nvtxDomainHandle_t)p->nvtx_domain);
    }
#endif
    Py_DECREF((PyObject *)((const char *)p - offsetof(KnameProfiledCall, profiled)));
}

COLD PyObject *
lookup_in_dict(LaunchWrapper *w, Frame *frame, PyObject *kernel, PyObject **kernel_id,
               Recent *entry)
{
    uint64_t generation = generation_of(w->sites); /* before the look-up, which may change it */
    if (*kernel_id == NULL && (*kernel_id = PyLong_FromVoidPtr(kernel)) == NULL)
        return NULL;
    PyObject *key = site_key(frame_code(frame), frame_lasti(frame), *kernel_id);
    if (key == NULL)
        return NULL;
    PyObject *site = Py_XNewRef(PyDict_GetItemWithError(w->sites, key));
    Py_DECREF(key);
    if (w->remember && (site != NULL || !PyErr_Occurred())) {
        *entry = (Recent){w, frame_position(frame), kernel, generation, site, NULL, NULL, NULL};
        remember_launch(w, site, entry);
    }
    return site;
}

int
kind_in_dict(PyObject *kinds, int remember, PyCodeObject *code, uint64_t generation,
             RecentKind *entry)
{
    int kind = decided_kind(kinds, code);
    if (remember && kind != -2)
        *entry = (RecentKind){kinds, code, generation, kind};
    return kind;
}

/* The site of a launch whose library-code caller is `frame`, keyed by the first user frame above
 * it, as callsite.resolve finds it when it is cached (depth 1). New reference; Py_None for a
 * launch beneath another kname launch; NULL without an error when resolve() must decide, NULL
 * with one on error. */
static PyObject *
walked_site(LaunchWrapper *w, Frame *frame, PyObject *kernel, PyObject **kernel_id)
{
    Frame *f = frame;
    for (int depth = 0; depth < MAX_WALK && f != NULL; depth++) {
        if (f == launch_caller)
            return Py_NewRef(Py_None);
        int kind = kind_of(w->kinds, w->remember, f);
        if (kind == KIND_USER)
            return lookup(w, f, kernel, kernel_id);
        if (!PASSED_OVER(kind)) /* not decided yet, or an error */
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* ------------------------------------------------------------------ naming a miss in C */

/* What NativeMiss (kname.callsite) is read by, and the names C looks up. */
enum { FIELDS = 7 }; /* naming.FIELDS: kernel, function, path, module, file, line, lib */
enum { M_IN_C, M_PLACES, M_MAKERS, M_PLACE_OF, M_JUDGE, M_FAILED, M_BUILD, M_KERNEL_NAME, M_LIB,
       M_TEMPLATE, M_MAX_LENGTH, M_NAME, M_IPYTHON, M_EMPTY, MISS_NAMES };
static PyObject *miss_names[MISS_NAMES];
static const char *const miss_fields[MISS_NAMES] = {
    [M_IN_C] = "in_c",
    [M_PLACES] = "places",
    [M_MAKERS] = "makers",
    [M_PLACE_OF] = "place_of",
    [M_JUDGE] = "judge",
    [M_FAILED] = "failed",
    [M_BUILD] = "build",
    [M_KERNEL_NAME] = "kernel_name",
    [M_LIB] = "lib",
    [M_TEMPLATE] = "template",
    [M_MAX_LENGTH] = "max_length",
    [M_NAME] = "__name__",
    [M_IPYTHON] = "IPython",
    [M_EMPTY] = "",
};

/* The globals of `frame`, borrowed (the running frame keeps them). */
static PyObject *
frame_globals(Frame *frame)
{
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
    return frame->f_globals;
#else
    PyObject *globals = PyFrame_GetGlobals(frame);
    Py_XDECREF(globals);
    return globals;
#endif
}

/* How a step of the naming in C ended, where it made no site: Python names the launch (no error
 * set), an error of Python code it called (set: it propagates, as from resolve()), or a fault of
 * C's own (set: said once, and Python names every miss from then on). */
typedef enum { NAMED, IN_PYTHON, PYTHON_RAISED, C_FAULT } Outcome;

/* Whether a module of `makers` (NativeMiss.makers) is imported: user code's kind is then a
 * question for Python (kname.callsite._judge). 1, 0, or -1 with an error. */
static int
makers_imported(PyObject *miss, PyObject *modules)
{
    PyObject *makers = PyObject_GetAttr(miss, miss_names[M_MAKERS]);
    if (makers == NULL)
        return -1;
    int found = 0;
    if (!PyTuple_CheckExact(makers)) {
        PyErr_Format(PyExc_TypeError, "NativeMiss.makers is %R, not a tuple", makers);
        found = -1;
    }
    for (Py_ssize_t i = 0; found == 0 && i < PyTuple_GET_SIZE(makers); i++)
        found = PyDict_Contains(modules, PyTuple_GET_ITEM(makers, i));
    Py_DECREF(makers);
    return found;
}

/* The `{path}` C names code of `module`'s `filename` by (new reference): NativeMiss.places, or
 * NativeMiss.place_of() where the file is new. Py_None: Python names it. */
static PyObject *
place_of(PyObject *miss, PyCodeObject *code, PyObject *module, Outcome *outcome)
{
    *outcome = C_FAULT;
    PyObject *places = PyObject_GetAttr(miss, miss_names[M_PLACES]);
    if (places == NULL)
        return NULL;
    PyObject *place = NULL;
    PyObject *key = PyDict_CheckExact(places) ? PyTuple_Pack(2, module, code->co_filename) : NULL;
    if (key == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "NativeMiss.places is %R, not a dict", places);
    if (key != NULL) {
        place = Py_XNewRef(PyDict_GetItemWithError(places, key));
        if (place == NULL && !PyErr_Occurred()) { /* a new file: Python's rules decide */
            *outcome = PYTHON_RAISED;
            place = PyObject_CallMethodObjArgs(miss, miss_names[M_PLACE_OF], code, module, NULL);
        }
        Py_DECREF(key);
    }
    Py_DECREF(places);
    if (place != NULL && place != Py_None && !PyUnicode_CheckExact(place)) {
        *outcome = C_FAULT;
        PyErr_Format(PyExc_TypeError, "a file's place is %R, not a str", place);
        Py_CLEAR(place);
    }
    return place;
}

/* Whether `code` (of `module`, whose kind is `kind`: KIND_USER or -1, not decided) is user code
 * named in C: 1; 0 where Python decides; -1 with an error (`outcome` says whose). */
static int
is_user_code(PyObject *miss, PyCodeObject *code, PyObject *module, PyObject *modules, int kind,
             Outcome *outcome)
{
    *outcome = C_FAULT;
    if (kind == KIND_USER)
        return 1;
    int imported = makers_imported(miss, modules);
    if (imported <= 0)
        return imported < 0 ? -1 : 1; /* no maker imported: a user module's code is USER */
    *outcome = PYTHON_RAISED;
    PyObject *judged = PyObject_CallMethodObjArgs(miss, miss_names[M_JUDGE], code, module, NULL);
    if (judged == NULL)
        return -1;
    int user = PyLong_CheckExact(judged) && PyLong_AsLong(judged) == KIND_USER;
    Py_DECREF(judged);
    return user;
}

/* `{function}` of `code` as naming.function_name gives it, where C can tell (new reference):
 * the qualified name, with no `<` but `<module>`'s. Py_None: Python names it. */
static PyObject *
function_of(PyCodeObject *code)
{
    PyObject *qualname = code->co_qualname;
    if (!PyUnicode_CheckExact(qualname))
        return Py_NewRef(Py_None);
    Py_ssize_t at = PyUnicode_FindChar(qualname, '<', 0, PyUnicode_GET_LENGTH(qualname), 1);
    if (at == -2)
        return NULL;
    if (at >= 0 && PyUnicode_CompareWithASCIIString(qualname, "<module>") != 0)
        return Py_NewRef(Py_None); /* a lambda's, a comprehension's: folded in Python */
    return Py_NewRef(qualname);
}

/* The kernel's name as resolve() takes it (new reference): NativeMiss.kernel_name, or what it
 * gives for `kernel` where it is a function. */
static PyObject *
kernel_name_of(PyObject *miss, PyObject *kernel, Outcome *outcome)
{
    *outcome = C_FAULT;
    PyObject *given = PyObject_GetAttr(miss, miss_names[M_KERNEL_NAME]);
    if (given == NULL || !PyCallable_Check(given))
        return given;
    *outcome = PYTHON_RAISED;
    PyObject *name = PyObject_CallOneArg(given, kernel);
    Py_DECREF(given);
    return name;
}

/* The name naming.display_name makes of one frame's `fields` (naming.FIELDS' order, each a
 * str), rendered by NativeMiss.template as naming._render renders it (new reference). Py_None
 * where Python makes it: another template, or a name to cut (longer than NativeMiss.max_length)
 * or to make valid UTF-8 (not ASCII). */
static PyObject *
rendered_name(PyObject *miss, PyObject *const fields[FIELDS])
{
    PyObject *parts = PyObject_GetAttr(miss, miss_names[M_TEMPLATE]);
    PyObject *longest = parts == NULL ? NULL : PyObject_GetAttr(miss, miss_names[M_MAX_LENGTH]);
    PyObject *name = NULL, *pieces = NULL;
    Py_ssize_t max_length = longest == NULL ? -1 : PyLong_AsSsize_t(longest);
    if (max_length < 0 || !PyTuple_CheckExact(parts)) {
        if (!PyErr_Occurred())
            name = Py_NewRef(Py_None); /* a template Python renders */
        goto done;
    }
    for (int i = 0; i < FIELDS; i++) {
        if (!PyUnicode_CheckExact(fields[i])) {
            name = Py_NewRef(Py_None); /* a kernel's name of another type, a library's */
            goto done;
        }
    }
    Py_ssize_t count = PyTuple_GET_SIZE(parts);
    if ((pieces = PyList_New(count)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        Py_ssize_t field = PyLong_CheckExact(part) ? PyLong_AsSsize_t(part) : -1;
        if (field >= 0 && field < FIELDS)
            part = fields[field];
        else if (!PyUnicode_CheckExact(part)) {
            PyErr_Format(PyExc_TypeError, "NativeMiss.template holds %R", part);
            goto done;
        }
        PyList_SET_ITEM(pieces, i, Py_NewRef(part));
    }
    name = PyUnicode_Join(miss_names[M_EMPTY], pieces);
    if (name != NULL && (!PyUnicode_IS_ASCII(name) || PyUnicode_GET_LENGTH(name) > max_length))
        Py_SETREF(name, Py_NewRef(Py_None));
done:
    Py_XDECREF(pieces);
    Py_XDECREF(longest);
    Py_XDECREF(parts);
    return name;
}

/* NativeMiss.build(code, lasti, kernel, kernel_key, kernel_name, name, function, path, module,
 * file, line): the site of the line `caller` runs, from its facts as naming.frame_facts reads
 * them and its name as naming.display_name makes it (None: not made here). */
static PyObject *
build_site(PyObject *miss, Frame *caller, PyObject *kernel, PyObject *kernel_id,
           PyObject *function, PyObject *path, PyObject *module, Outcome *outcome)
{
    *outcome = C_FAULT;
    PyCodeObject *code = frame_code(caller);
    int lasti = frame_lasti(caller);
    int line = PyCode_Addr2Line(code, lasti); /* frame.f_lineno, None (-1) read as 0 */
    Py_ssize_t length = PyUnicode_GET_LENGTH(path);
    Py_ssize_t slash = PyUnicode_FindChar(path, '/', 0, length, -1);
    if (slash == -2)
        return NULL;
    PyObject *file = slash < 0 ? Py_NewRef(path) : PyUnicode_Substring(path, slash + 1, length);
    PyObject *lasti_obj = PyLong_FromLong(lasti);
    PyObject *line_obj = PyLong_FromLong(line < 0 ? 0 : line);
    PyObject *line_text = line_obj == NULL ? NULL : PyObject_Str(line_obj);
    PyObject *lib = PyObject_GetAttr(miss, miss_names[M_LIB]);
    PyObject *kernel_name = NULL, *name = NULL, *site = NULL;
    if (file != NULL && lasti_obj != NULL && line_text != NULL && lib != NULL)
        kernel_name = kernel_name_of(miss, kernel, outcome);
    if (kernel_name != NULL) {
        *outcome = C_FAULT;
        PyObject *fields[FIELDS] = {kernel_name, function, path, module, file, line_text, lib};
        name = rendered_name(miss, fields);
    }
    if (name != NULL) {
        *outcome = PYTHON_RAISED;
        PyObject *args[12] = {miss,        (PyObject *)code, lasti_obj, kernel, kernel_id,
                              kernel_name, name,             function,  path,   module,
                              file,        line_obj};
        site = PyObject_VectorcallMethod(miss_names[M_BUILD], args,
                                         12 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(name);
    Py_XDECREF(kernel_name);
    Py_XDECREF(lib);
    Py_XDECREF(line_text);
    Py_XDECREF(file);
    Py_XDECREF(lasti_obj);
    Py_XDECREF(line_obj);
    return site;
}

/* The site of a launch straight from a line of user code (`caller`, whose kind is `kind`),
 * named here by Python's rules as kname.callsite.resolve names it with one user frame; NULL:
 * not named here (`outcome` says why). */
static PyObject *
named_here(LaunchWrapper *w, Frame *caller, PyObject *kernel, PyObject *kernel_id, int kind,
           Outcome *outcome)
{
    PyObject *miss = w->miss;
    *outcome = C_FAULT;
    PyObject *in_c = PyObject_GetAttr(miss, miss_names[M_IN_C]);
    if (in_c == NULL)
        return NULL;
    Py_DECREF(in_c); /* compared only */
    PyObject *modules = PySys_GetObject("modules"), *globals = frame_globals(caller);
    *outcome = IN_PYTHON;
    /* Other rules, a shell's cells, code run with unusual globals: Python names it. */
    if (in_c != Py_True || modules == NULL || !PyDict_Check(modules) || globals == NULL
        || !PyDict_CheckExact(globals))
        return NULL;
    PyObject *module = PyDict_GetItemWithError(globals, miss_names[M_NAME]);
    int ipython = PyDict_Contains(modules, miss_names[M_IPYTHON]);
    PyCodeObject *code = frame_code(caller);
    if (module == NULL || ipython != 0 || !PyUnicode_CheckExact(module)
        || !PyUnicode_CheckExact(code->co_filename)) {
        *outcome = PyErr_Occurred() ? C_FAULT : IN_PYTHON;
        return NULL;
    }
    Py_INCREF(module); /* the Python code called below may change the globals */
    Py_INCREF(modules);
    PyObject *site = NULL, *function = NULL;
    PyObject *place = place_of(miss, code, module, outcome);
    if (place == NULL || place == Py_None)
        goto done;
    int user = is_user_code(miss, code, module, modules, kind, outcome);
    if (user <= 0)
        goto done;
    *outcome = C_FAULT;
    function = function_of(code);
    if (function == NULL || function == Py_None)
        goto done;
    site = build_site(miss, caller, kernel, kernel_id, function, place, module, outcome);
done:
    if (site == NULL && !PyErr_Occurred())
        *outcome = IN_PYTHON;
    Py_XDECREF(function);
    Py_XDECREF(place);
    Py_DECREF(modules);
    Py_DECREF(module);
    return site;
}

/* named_here(), a fault of C's own handed to NativeMiss.failed(exc) (said once; Python names
 * every miss from then on): NULL without an error, this launch too. */
static PyObject *
named_in_c(LaunchWrapper *w, Frame *caller, PyObject *kernel, PyObject *kernel_id, int kind)
{
    Outcome outcome = IN_PYTHON;
    PyObject *site = named_here(w, caller, kernel, kernel_id, kind, &outcome);
    if (site != NULL || outcome != C_FAULT || !PyErr_ExceptionMatches(PyExc_Exception))
        return site;
    PyObject *exc = take_error();
    PyObject *said = PyObject_CallMethodOneArg(w->miss, miss_names[M_FAILED], exc);
    Py_DECREF(exc);
    Py_XDECREF(said);
    return NULL;
}

COLD PyObject *
find_missed_site(LaunchWrapper *w, Frame *caller, PyObject *kernel, PyObject **kernel_id)
{
    /* Called from library code, the site may be cached under a user frame above. */
    PyObject *site = NULL;
    int kind = kind_of(w->kinds, w->remember, caller);
    if (w->miss != NULL && (kind == KIND_USER || kind == -1)) {
        /* Straight from a user's line: named here, where Python's rules let C name it. */
        if (*kernel_id == NULL && (*kernel_id = PyLong_FromVoidPtr(kernel)) == NULL)
            return NULL;
        site = named_in_c(w, caller, kernel, *kernel_id, kind);
        if (site != NULL || PyErr_Occurred())
            return site;
    }
    Frame *back = PASSED_OVER(kind) ? frame_back(caller) : NULL;
    if (back != NULL)
        site = walked_site(w, back, kernel, kernel_id);
    if (site == NULL && kind != -2 && !PyErr_Occurred()) {
        /* Python decides, from the caller's frame object (made now, if it was not yet). */
        PyObject *resolve_args[2] = {(PyObject *)PyEval_GetFrame(), kernel};
        site = PyObject_Vectorcall(w->resolve, resolve_args, 2, NULL);
    }
    return site;
}

static PyObject *
watch_changes_of(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "watch_changes_of: a class, not %R", cls);
    Py_XSETREF(watched_class, (PyTypeObject *)Py_NewRef(cls));
    forget_all();
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the launch in progress */

static PyObject *
is_launch_caller(PyObject *module, PyObject *frame)
{
    (void)module;
    if (!PyFrame_Check(frame)) {
        PyErr_Format(PyExc_TypeError, "is_launch_caller() takes a frame, not %s",
                     Py_TYPE(frame)->tp_name);
        return NULL;
    }
    return PyBool_FromLong(launch_caller != NULL
                           && frame_of((PyFrameObject *)frame) == launch_caller);
}

/* ------------------------------------------------------------------ the module's part */

static PyMethodDef sites_methods[] = {
    {"is_launch_caller", is_launch_caller, METH_O,
     "Whether `frame` called the innermost LaunchWrapper launch running on this thread."},
    {"forget_launches", forget_launches, METH_NOARGS,
     "Forget what every cached launch remembers: a site or a switch, or its class, changed."},
    {"watch_changes_of", watch_changes_of, METH_O,
     "watch_changes_of(cls): instances of cls, and cls, call forget_launches() at every change; "
     "cached launches may remember what they read of them."},
    {NULL, NULL, 0, NULL},
};

/* The fields a launch reads: the switch's `on`, the site's by F_*. */
static int
intern_names(void)
{
    static const char *const site_fields[4] = {
        [F_COUNTER] = "counter", [F_LAUNCH] = "launch", [F_PUSH] = "push", [F_POP] = "pop"};
    if (switch_names[0] == NULL && (switch_names[0] = PyUnicode_InternFromString("on")) == NULL)
        return -1;
    for (int i = 0; i < 4; i++) {
        if (site_names[i] == NULL
            && (site_names[i] = PyUnicode_InternFromString(site_fields[i])) == NULL)
            return -1;
    }
    for (int i = 0; i < MISS_NAMES; i++) {
        if (miss_names[i] == NULL
            && (miss_names[i] = PyUnicode_InternFromString(miss_fields[i])) == NULL)
            return -1;
    }
    return 0;
}

int
sites_ready(PyObject *module)
{
    if (intern_names() < 0)
        return -1;
    return PyModule_AddFunctions(module, sites_methods);
}
