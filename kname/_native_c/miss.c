/*
 * kname._native's naming of the common miss (see miss.h): a launch straight from a line of user
 * code, named as kname.callsite.resolve names it with one user frame, from what Python's rules
 * decided (kname.callsite.NativeMiss): each file's `{path}`, its module's kind, the template's
 * parts. C reads the frame (its code's module, qualified name and line) and renders the name;
 * NativeMiss.build makes the site. Anything else is left to resolve().
 */
#include "_native_c/miss.h"

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

PyObject *
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

int
miss_ready(void)
{
    for (int i = 0; i < MISS_NAMES; i++) {
        if (miss_names[i] == NULL
            && (miss_names[i] = PyUnicode_InternFromString(miss_fields[i])) == NULL)
            return -1;
    }
    return 0;
}
