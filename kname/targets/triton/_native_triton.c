/*
 * Triton's part of kname._native (named in kname.targets.triton's Library.c_sources):
 * SkipBeneath, which guards Triton's launch hooks (beneath a LaunchWrapper's launch, with only
 * library code between, the hook is not called), and SubscriptLaunch, a `__getitem__` whose
 * `kernel[grid](...)` calls kname's launch wrapper with no Python frame between the caller's line
 * and the launch (see kname/_native_c/launch.h).
 */
#include "_native_c/launch.h"

/* ------------------------------------------------------------------ the launch in progress */

/* Whether `frame` runs inside the launch of a LaunchWrapper with no user frame between: a walk up
 * from it reaches launch_caller first, through frames `kinds` says are passed over. 1, 0 (also
 * when unsure: a frame not classified yet), -1 on error. */
static int
is_beneath_launch(PyObject *kinds, int remember, Frame *frame)
{
    if (launch_caller == NULL)
        return 0;
    Frame *f = frame;
    for (int depth = 0; depth < MAX_WALK && f != NULL; depth++) {
        if (f == launch_caller)
            return 1;
        int kind = kind_of(kinds, remember, f);
        if (kind == -2)
            return -1;
        if (!PASSED_OVER(kind))
            return 0;
        f = frame_back(f);
    }
    return 0;
}

/* ------------------------------------------------------------------ SkipBeneath */

/* SkipBeneath(hook, kinds): calls hook(*args, **kwargs), except beneath a LaunchWrapper's launch
 * (is_beneath_launch from its caller's frame), where it returns None at once. For a library's
 * launch hooks (Triton's): a launch that kname's wrapper names already costs them nothing. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *hook, *kinds;
    int remember;
} SkipBeneath;

static PyObject *
skip_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SkipBeneath *g = (SkipBeneath *)op;
    if (g->hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname hook guard called after it was cleared");
        return NULL;
    }
    int beneath = is_beneath_launch(g->kinds, g->remember, frame_current());
    if (beneath > 0)
        Py_RETURN_NONE;
    if (beneath < 0)
        PyErr_Clear(); /* unsure: the hook decides, as without this guard */
    return PyObject_Vectorcall(g->hook, args, nargsf, kwnames);
}

static PyObject *
skip_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"hook", "kinds", NULL};
    PyObject *hook, *kinds;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!:SkipBeneath", names, &hook, &PyDict_Type,
                                     &kinds))
        return NULL;
    if (!PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "SkipBeneath: hook must be callable");
        return NULL;
    }
    SkipBeneath *g = (SkipBeneath *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    g->vectorcall = skip_vectorcall;
    g->hook = Py_NewRef(hook);
    g->kinds = Py_NewRef(kinds);
    g->remember = follow_changes(kinds);
    return (PyObject *)g;
}

static int
skip_traverse(SkipBeneath *g, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(g));
    Py_VISIT(g->hook);
    Py_VISIT(g->kinds);
    return 0;
}

static int
skip_clear(SkipBeneath *g)
{
    Py_CLEAR(g->hook);
    Py_CLEAR(g->kinds);
    return 0;
}

static void
skip_dealloc(SkipBeneath *g)
{
    PyObject_GC_UnTrack(g);
    skip_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
skip_repr(SkipBeneath *g)
{
    if (g->hook == NULL)
        return PyUnicode_FromString("<kname hook guard (cleared)>");
    return PyUnicode_FromFormat("<kname hook guard of %R>", g->hook);
}

static PyMemberDef skip_members[] = {
    {"__wrapped__", MEMBER_OBJECT_EX, offsetof(SkipBeneath, hook), READONLY, "the hook"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SkipBeneathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.SkipBeneath",
    .tp_doc = "SkipBeneath(hook, kinds): hook, except beneath a kname launch (returns None).",
    .tp_basicsize = sizeof(SkipBeneath),
    .tp_dealloc = (destructor)skip_dealloc,
    .tp_vectorcall_offset = offsetof(SkipBeneath, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)skip_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)skip_traverse,
    .tp_clear = (inquiry)skip_clear,
    .tp_members = skip_members,
    .tp_new = skip_new,
};

/* ------------------------------------------------------------------ SubscriptLaunch */

/* SubscriptLaunch(launch, method, key_keyword, fixed): a `__getitem__` for a class whose
 * `obj[key](*args, **kwargs)` is a launch (Triton's `kernel[grid](...)`): obj[key] is a
 * BoundLaunch, and calling it calls
 *     launch(obj.<method>, *args, **kwargs, <key_keyword>=key, **fixed)
 * with no Python frame between the caller's line and `launch` (a LaunchWrapper of
 * operator.call), where Triton's own `__getitem__` and its lambda are a frame each. */
#define KW_CACHE 16 /* kwargs name tuples remembered: they are constants of the callers' code */

typedef struct {
    PyObject *given;    /* the caller's kwnames (held: its address stays unique) */
    PyObject *combined; /* given + the index's own names */
} KwNames;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *launch, *method;
    PyObject *names;  /* (key_keyword, *fixed names) */
    PyObject *values; /* the fixed values, in the same order after the key */
    PyObject *dict;
    KwNames kwnames[KW_CACHE];
} SubscriptLaunch;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    SubscriptLaunch *index;
    PyObject *bound; /* obj.<method> */
    PyObject *key;
} BoundLaunch;

static PyTypeObject BoundLaunchType;

/* The caller's kwnames followed by the index's own (new reference), remembered. */
static PyObject *
combined_kwnames(SubscriptLaunch *s, PyObject *given)
{
    if (given == NULL)
        return Py_NewRef(s->names);
    KwNames *entry = &s->kwnames[((uintptr_t)given >> 4) % KW_CACHE];
    if (entry->given == given)
        return Py_NewRef(entry->combined);
    PyObject *combined = PySequence_Concat(given, s->names);
    if (combined == NULL)
        return NULL;
    Py_XSETREF(entry->given, Py_NewRef(given));
    Py_XSETREF(entry->combined, Py_NewRef(combined));
    return combined;
}

static PyObject *
bound_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    BoundLaunch *b = (BoundLaunch *)op;
    SubscriptLaunch *s = b->index;
    if (s == NULL || s->launch == NULL) { /* cleared by the collector, yet called */
        PyErr_SetString(PyExc_RuntimeError, "kname launch called after it was cleared");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t given = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t own = PyTuple_GET_SIZE(s->names);
    Py_ssize_t total = 1 + nargs + given + own;
    PyObject *small[16];
    PyObject **stack = total <= 16 ? small : PyMem_Malloc(total * sizeof(PyObject *));
    if (stack == NULL)
        return PyErr_NoMemory();
    PyObject *names = combined_kwnames(s, kwnames);
    PyObject *result = NULL;
    if (names != NULL) {
        stack[0] = b->bound;
        for (Py_ssize_t i = 0; i < nargs + given; i++)
            stack[1 + i] = args[i];
        stack[1 + nargs + given] = b->key;
        for (Py_ssize_t i = 1; i < own; i++)
            stack[1 + nargs + given + i] = PyTuple_GET_ITEM(s->values, i - 1);
        result = PyObject_Vectorcall(s->launch, stack, 1 + nargs, names);
        Py_DECREF(names);
    }
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

/* index(obj, key): obj[key]. */
static PyObject *
subscript_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SubscriptLaunch *s = (SubscriptLaunch *)op;
    if (s->launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname subscript launch called after it was cleared");
        return NULL;
    }
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "__getitem__ takes exactly one key");
        return NULL;
    }
    PyObject *bound = PyObject_GetAttr(args[0], s->method);
    if (bound == NULL)
        return NULL;
    BoundLaunch *b = PyObject_GC_New(BoundLaunch, &BoundLaunchType);
    if (b == NULL) {
        Py_DECREF(bound);
        return NULL;
    }
    b->vectorcall = bound_vectorcall;
    b->index = (SubscriptLaunch *)Py_NewRef(op);
    b->bound = bound;
    b->key = Py_NewRef(args[1]);
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static PyObject *
subscript_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"launch", "method", "key_keyword", "fixed", NULL};
    PyObject *launch, *method, *key_keyword, *fixed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUUO!:SubscriptLaunch", names, &launch, &method,
                                     &key_keyword, &PyDict_Type, &fixed))
        return NULL;
    PyObject *own = PyList_New(1), *values = PyList_New(0);
    if (own == NULL || values == NULL)
        goto fail;
    PyList_SET_ITEM(own, 0, Py_NewRef(key_keyword));
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fixed, &pos, &name, &value)) {
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "SubscriptLaunch: fixed keywords must be str");
            goto fail;
        }
        if (PyList_Append(own, name) < 0 || PyList_Append(values, value) < 0)
            goto fail;
    }
    SubscriptLaunch *s = (SubscriptLaunch *)type->tp_alloc(type, 0);
    if (s == NULL)
        goto fail;
    s->vectorcall = subscript_vectorcall;
    s->launch = Py_NewRef(launch);
    s->method = Py_NewRef(method);
    s->names = PyList_AsTuple(own);
    s->values = PyList_AsTuple(values);
    Py_DECREF(own);
    Py_DECREF(values);
    if (s->names == NULL || s->values == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
fail:
    Py_XDECREF(own);
    Py_XDECREF(values);
    return NULL;
}

static int
subscript_traverse(SubscriptLaunch *s, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(s));
    Py_VISIT(s->launch);
    Py_VISIT(s->method);
    Py_VISIT(s->names);
    Py_VISIT(s->values);
    Py_VISIT(s->dict);
    for (int i = 0; i < KW_CACHE; i++) {
        Py_VISIT(s->kwnames[i].given);
        Py_VISIT(s->kwnames[i].combined);
    }
    return 0;
}

static int
subscript_clear(SubscriptLaunch *s)
{
    Py_CLEAR(s->launch);
    Py_CLEAR(s->method);
    Py_CLEAR(s->names);
    Py_CLEAR(s->values);
    Py_CLEAR(s->dict);
    for (int i = 0; i < KW_CACHE; i++) {
        Py_CLEAR(s->kwnames[i].given);
        Py_CLEAR(s->kwnames[i].combined);
    }
    return 0;
}

static void
subscript_dealloc(SubscriptLaunch *s)
{
    PyObject_GC_UnTrack(s);
    subscript_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *
subscript_repr(SubscriptLaunch *s)
{
    if (s->launch == NULL)
        return PyUnicode_FromString("<kname subscript launch (cleared)>");
    return PyUnicode_FromFormat("<kname subscript launch through %R>", s->launch);
}

static PyTypeObject SubscriptLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.SubscriptLaunch",
    .tp_doc = "SubscriptLaunch(launch, method, key_keyword, fixed): a __getitem__ whose "
              "obj[key](*a, **k) calls launch(obj.<method>, *a, **k, <key_keyword>=key, **fixed).",
    .tp_basicsize = sizeof(SubscriptLaunch),
    .tp_dealloc = (destructor)subscript_dealloc,
    .tp_vectorcall_offset = offsetof(SubscriptLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)subscript_repr,
    /* METHOD_DESCRIPTOR: `obj[key]` calls it unbound with obj first, no bound method made. */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)subscript_traverse,
    .tp_clear = (inquiry)subscript_clear,
    .tp_descr_get = bind_like_a_function, /* `k.__getitem__` */
    .tp_getset = dict_getset,
    .tp_dictoffset = offsetof(SubscriptLaunch, dict),
    .tp_new = subscript_new,
};

static int
bound_traverse(BoundLaunch *b, visitproc visit, void *arg)
{
    Py_VISIT(b->index);
    Py_VISIT(b->bound);
    Py_VISIT(b->key);
    return 0;
}

static int
bound_clear(BoundLaunch *b)
{
    Py_CLEAR(b->index);
    Py_CLEAR(b->bound);
    Py_CLEAR(b->key);
    return 0;
}

static void
bound_dealloc(BoundLaunch *b)
{
    PyObject_GC_UnTrack(b);
    bound_clear(b);
    PyObject_GC_Del(b);
}

static PyTypeObject BoundLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.BoundLaunch",
    .tp_doc = "obj[key] of a SubscriptLaunch: call it to launch.",
    .tp_basicsize = sizeof(BoundLaunch),
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_vectorcall_offset = offsetof(BoundLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
};

/* ------------------------------------------------------------------ the module's part */

/* Called by PyInit__native, as registered below. */
static int
triton_ready(PyObject *module)
{
    if (PyType_Ready(&SkipBeneathType) < 0 || PyType_Ready(&SubscriptLaunchType) < 0
        || PyType_Ready(&BoundLaunchType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "SkipBeneath", (PyObject *)&SkipBeneathType) < 0
        || PyModule_AddObjectRef(module, "SubscriptLaunch", (PyObject *)&SubscriptLaunchType) < 0)
        return -1;
    return 0;
}

KNAME_UNIT(triton_ready)
