/*
 * Prototype (benchmarks only, not part of kname): kname's cached per-launch path as a C
 * callable, to measure how far below the pure-Python closure the same work can go.
 *
 * A Wrapper(original, miss, push, pop, mode, attr) object is callable (vectorcall) and binds
 * like a function when set as a class attribute (`__call__`). Per call it does what
 * kname.launch's closure does on a cached site:
 *   - the switch (set_enabled());
 *   - the kernel: `original` (mode 0), the first argument (mode 1, CuPy's kernel `self`), or
 *     an attribute of it (mode 2, numba's `_LaunchConfiguration.dispatcher`);
 *   - the calling frame (PyEval_GetFrame: the caller, as C calls push no frame), its code and
 *     f_lasti; the key is the address of the instruction, code + f_lasti, which is unique
 *     among live code objects on CPython 3.11+ where the bytecode lives inside the code object
 *     (each entry keeps its code object alive); a dict look-up on that int;
 *   - the site entry, a tuple (kernel, counter, attributes, handle, code): counts the launch
 *     (next(counter)), pushes `push(attributes, handle)` when attributes is not None, calls
 *     the original, pops in all cases;
 *   - a miss, a kernel other than the entry's, or any error inside: `miss(frame, kernel, key)`
 *     (Python: kname's resolve) returns the entry or None; the launch always runs.
 *
 * Build: cc -shared -fPIC -O2 -I<python include> fastpath_proto.c -o
 *        _kname_fastpath_proto<EXT_SUFFIX>   (CPython 3.11 or newer)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#if PY_VERSION_HEX < 0x030B0000
#error "the address key needs CPython 3.11+ (bytecode inside the code object)"
#endif

static int enabled = 1;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original;
    PyObject *sites; /* dict: int(code address + f_lasti) -> entry tuple */
    PyObject *miss;
    PyObject *push;
    PyObject *pop;
    PyObject *attr;
    int mode;
} Wrapper;

static PyObject *
call_original(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
}

static PyObject *
wrapper_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Wrapper *w = (Wrapper *)op;
    PyObject *kernel, *owned_kernel = NULL, *key, *entry, *result, *r;
    PyObject *attributes, *handle;
    PyFrameObject *frame;
    PyCodeObject *code;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);

    if (!enabled)
        return call_original(w, args, nargsf, kwnames);
    if (w->mode == 0) {
        kernel = w->original;
    } else {
        if (nargs < 1)
            return call_original(w, args, nargsf, kwnames);
        kernel = args[0];
        if (w->mode == 2) {
            owned_kernel = kernel = PyObject_GetAttr(args[0], w->attr);
            if (kernel == NULL) {
                PyErr_Clear();
                return call_original(w, args, nargsf, kwnames);
            }
        }
    }
    frame = PyEval_GetFrame(); /* borrowed */
    if (frame == NULL) {
        Py_XDECREF(owned_kernel);
        return call_original(w, args, nargsf, kwnames);
    }
    code = PyFrame_GetCode(frame);
    key = PyLong_FromSize_t((size_t)code + (size_t)PyFrame_GetLasti(frame));
    Py_DECREF(code); /* the entry keeps it alive */
    if (key == NULL) {
        PyErr_Clear();
        Py_XDECREF(owned_kernel);
        return call_original(w, args, nargsf, kwnames);
    }
    entry = PyDict_GetItemWithError(w->sites, key); /* borrowed */
    if (entry != NULL && PyTuple_GET_ITEM(entry, 0) == kernel) {
        Py_INCREF(entry);
    } else {
        PyErr_Clear();
        entry = PyObject_CallFunctionObjArgs(w->miss, (PyObject *)frame, kernel, key, NULL);
        if (entry == NULL)
            PyErr_Clear(); /* kname reports its own faults once; the launch runs */
    }
    Py_DECREF(key);
    Py_XDECREF(owned_kernel);
    if (entry == NULL || entry == Py_None) {
        Py_XDECREF(entry);
        return call_original(w, args, nargsf, kwnames);
    }
    r = PyIter_Next(PyTuple_GET_ITEM(entry, 1)); /* count the launch */
    Py_XDECREF(r);
    attributes = PyTuple_GET_ITEM(entry, 2);
    if (attributes == Py_None) {
        Py_DECREF(entry);
        return call_original(w, args, nargsf, kwnames);
    }
    handle = PyTuple_GET_ITEM(entry, 3);
    {
        PyObject *push_args[2] = {attributes, handle};
        r = PyObject_Vectorcall(w->push, push_args, 2, NULL);
    }
    if (r == NULL) {
        PyErr_Clear();
        Py_DECREF(entry);
        return call_original(w, args, nargsf, kwnames);
    }
    Py_DECREF(r);
    result = call_original(w, args, nargsf, kwnames);
    {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback); /* the launch's own error, if any */
        r = PyObject_Vectorcall(w->pop, &handle, 1, NULL);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
        PyErr_Restore(type, value, traceback);
    }
    Py_DECREF(entry);
    return result;
}

static PyObject *
wrapper_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"original", "miss", "push", "pop", "mode", "attr", NULL};
    PyObject *original, *miss, *push, *pop, *attr = Py_None;
    int mode = 0;
    Wrapper *w;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|iO", names, &original, &miss, &push, &pop,
                                     &mode, &attr))
        return NULL;
    w = (Wrapper *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->vectorcall = wrapper_vectorcall;
    w->sites = PyDict_New();
    if (w->sites == NULL) {
        Py_DECREF(w);
        return NULL;
    }
    Py_INCREF(original); w->original = original;
    Py_INCREF(miss); w->miss = miss;
    Py_INCREF(push); w->push = push;
    Py_INCREF(pop); w->pop = pop;
    Py_INCREF(attr); w->attr = attr;
    w->mode = mode;
    return (PyObject *)w;
}

static int
wrapper_traverse(Wrapper *w, visitproc visit, void *arg)
{
    Py_VISIT(w->original);
    Py_VISIT(w->sites);
    Py_VISIT(w->miss);
    Py_VISIT(w->push);
    Py_VISIT(w->pop);
    Py_VISIT(w->attr);
    return 0;
}

static int
wrapper_clear(Wrapper *w)
{
    Py_CLEAR(w->original);
    Py_CLEAR(w->sites);
    Py_CLEAR(w->miss);
    Py_CLEAR(w->push);
    Py_CLEAR(w->pop);
    Py_CLEAR(w->attr);
    return 0;
}

static void
wrapper_dealloc(Wrapper *w)
{
    PyObject_GC_UnTrack(w);
    wrapper_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Bind like a function, so it can stand in for a method such as `__call__`. */
static PyObject *
wrapper_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
wrapper_get_sites(Wrapper *w, void *closure)
{
    (void)closure;
    Py_INCREF(w->sites);
    return w->sites;
}

static PyGetSetDef wrapper_getset[] = {
    {"sites", (getter)wrapper_get_sites, NULL, "the fast entries, by instruction address", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kname_fastpath_proto.Wrapper",
    .tp_basicsize = sizeof(Wrapper),
    .tp_dealloc = (destructor)wrapper_dealloc,
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_descr_get = wrapper_descr_get,
    .tp_getset = wrapper_getset,
    .tp_new = wrapper_new,
};

static PyObject *
set_enabled(PyObject *module, PyObject *arg)
{
    (void)module;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    enabled = on;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_enabled", set_enabled, METH_O, "Switch every Wrapper on or off."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_kname_fastpath_proto", NULL, -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__kname_fastpath_proto(void)
{
    PyObject *m;
    if (PyType_Ready(&WrapperType) < 0)
        return NULL;
    m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WrapperType);
    if (PyModule_AddObject(m, "Wrapper", (PyObject *)&WrapperType) < 0) {
        Py_DECREF(&WrapperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
