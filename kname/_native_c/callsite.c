/*
 * kname._native's site finding (see launch.h): a launch's site found in kname.callsite's
 * `sites` as callsite.resolve would find it, with the recent table in front (what a cached
 * launch remembers is set here, in remember_launch), the kinds of code read from `kinds` for the
 * walk past library frames, the launch in progress on each thread (launch_caller), and the
 * forgetting that keeps every remembered answer true.
 */
#include "_native_c/callsite.h"
#include "_native_c/miss.h"

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

COLD PyObject *
find_missed_site(LaunchWrapper *w, Frame *caller, PyObject *kernel, PyObject **kernel_id)
{
    PyObject *site = NULL;
    int kind = kind_of(w->kinds, w->remember, caller);
    if (w->miss != NULL && (kind == KIND_USER || kind == -1)) {
        /* Straight from a user's line: named in C (miss.c), where Python's rules let C name it. */
        if (*kernel_id == NULL && (*kernel_id = PyLong_FromVoidPtr(kernel)) == NULL)
            return NULL;
        site = named_in_c(w, caller, kernel, *kernel_id, kind);
        if (site != NULL || PyErr_Occurred())
            return site;
    }
    /* Called from library code, the site may be cached under a user frame above. */
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
    return miss_ready();
}

int
sites_ready(PyObject *module)
{
    if (intern_names() < 0)
        return -1;
    return PyModule_AddFunctions(module, sites_methods);
}
