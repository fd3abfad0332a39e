/*
 * CuPy's part of kname._native (named in kname.targets.cupy's Library.c_sources): BaseCall(base),
 * base.__call__(self, ...) straight to the C slot of one of CuPy's Cython kernel classes, the
 * original of the launch wrapper that kname's subclass of that class has as its __call__; and
 * kname's C __call__ slot for those subclasses (use_direct_call), which hands the wrapper the
 * caller's argument tuple and dict and runs a cached launch in fewer steps still than the
 * wrapper's own (see kname/_native_c/launch.h).
 */
#include "_native_c/launch.h"

static PyObject *
args_tuple(PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    return tuple;
}

/* ------------------------------------------------------------------ BaseCall */

/* A BaseCall holds the class whose own __call__ slot it calls. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *base;
} BaseCall;

/* BaseCall(base): base.__call__(self, *args, **kwargs) for a class whose __call__ is a C slot
 * (CuPy's Cython kernels), without the slot wrapper's two argument tuples: the original of the
 * launch wrapper that kname's Python subclass of such a class has as its __call__. */
static PyObject *
base_call_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    BaseCall *c = (BaseCall *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (c->base == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname base call used after it was cleared");
        return NULL;
    }
    if (nargs < 1 || !PyObject_TypeCheck(args[0], c->base)) {
        PyErr_Format(PyExc_TypeError, "descriptor '__call__' requires a '%s' object but received %s",
                     c->base->tp_name, nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    PyObject *tuple = args_tuple(args + 1, nargs - 1);
    if (tuple == NULL)
        return NULL;
    PyObject *kwargs = NULL;
    Py_ssize_t given = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (given && (kwargs = PyDict_New()) != NULL) {
        for (Py_ssize_t i = 0; i < given; i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_CLEAR(kwargs);
                break;
            }
        }
    }
    PyObject *result = NULL;
    if (!given || kwargs != NULL)
        result = c->base->tp_call(args[0], tuple, kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}

static PyObject *
base_call_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"base", NULL};
    PyTypeObject *base;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:BaseCall", names, &PyType_Type, &base))
        return NULL;
    if (base->tp_call == NULL) {
        PyErr_Format(PyExc_TypeError, "BaseCall: '%s' objects are not callable", base->tp_name);
        return NULL;
    }
    BaseCall *c = (BaseCall *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->vectorcall = base_call_vectorcall;
    c->base = (PyTypeObject *)Py_NewRef(base);
    return (PyObject *)c;
}

static int
base_call_traverse(BaseCall *c, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(c));
    Py_VISIT(c->base);
    return 0;
}

static int
base_call_clear(BaseCall *c)
{
    Py_CLEAR(c->base);
    return 0;
}

static void
base_call_dealloc(BaseCall *c)
{
    PyObject_GC_UnTrack(c);
    base_call_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *
base_call_repr(BaseCall *c)
{
    if (c->base == NULL)
        return PyUnicode_FromString("<kname base call (cleared)>");
    return PyUnicode_FromFormat("<kname call of %s's own __call__>", c->base->tp_name);
}

static PyMemberDef base_call_members[] = {
    {"base", MEMBER_OBJECT_EX, offsetof(BaseCall, base), READONLY, "the class"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BaseCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.BaseCall",
    .tp_doc = "BaseCall(base): base.__call__(self, *args, **kwargs), straight to base's C slot.",
    .tp_basicsize = sizeof(BaseCall),
    .tp_dealloc = (destructor)base_call_dealloc,
    .tp_vectorcall_offset = offsetof(BaseCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)base_call_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)base_call_traverse,
    .tp_clear = (inquiry)base_call_clear,
    .tp_members = base_call_members,
    .tp_new = base_call_new,
};

/* ------------------------------------------------------------------ the C __call__ slot */

/* kname's subclass of a CuPy kernel class has a Python-level __call__ (a LaunchWrapper), so
 * CPython gives it its generic slot: a look-up, then the arguments copied onto a stack with the
 * instance first, then BaseCall copying them back into a tuple for CuPy's slot. This slot does
 * the look-up and calls the wrapper with the tuple and dict it got (see Args in
 * kname/_native_c/launch.h). */
static PyObject *str_dunder_call;

/* CuPy's own slot, where `call` is a launch wrapper of BaseCall(base) and `type` derives from
 * base: call_slot_form then calls it straight. NULL otherwise. */
static ternaryfunc
base_slot_of(PyTypeObject *type, PyObject *call)
{
    if (call == NULL || !Py_IS_TYPE(call, &LaunchWrapperType))
        return NULL;
    PyObject *original = ((LaunchWrapper *)call)->original;
    if (original == NULL || !Py_IS_TYPE(original, &BaseCallType))
        return NULL;
    PyTypeObject *base = ((BaseCall *)original)->base;
    return base != NULL && PyType_IsSubtype(type, base) ? base->tp_call : NULL;
}

/* Whether a launch of `w` through the slot launches the instance it is called on (CuPy's
 * kernels): its recent entries are then keyed by that instance. */
static int
kernel_is_self(LaunchWrapper *w)
{
    return w->kernel_mode == KERNEL_ARG && w->attribute == NULL && w->index == 0;
}

/* Looks up `type`'s __call__ for direct_call and remembers it in `hot`. Runs no Python code: the
 * class remembered before comes back, for the caller to release once it no longer reads `hot`. */
static COLD PyTypeObject *
remember_call(PyTypeObject *type)
{
    PyTypeObject *before = hot.call_type;
    PyObject *found = _PyType_Lookup(type, str_dunder_call); /* borrowed, no error */
    hot.call_type = (PyTypeObject *)Py_NewRef(type);
    hot.call_stamp = follow_type(type); /* after the look-up: see follow_type */
    hot.call = found;
    hot.call_base_slot = base_slot_of(type, found);
    hot.call_short = hot.call_base_slot != NULL && kernel_is_self((LaunchWrapper *)found)
                         ? found : NULL;
    return before;
}

/* Any launch through the slot: the class's __call__ looked up anew where the class has changed,
 * whatever it is now called. */
static NOINLINE PyObject *
direct_call_in_full(PyObject *self, PyObject *args, PyObject *kwargs)
{
    /* The class's __call__ as last looked up (`hot`, see kname/_common_c/common.h), good while the class
     * keeps its stamp: it moves whenever the class's attributes or bases change (a base's too).
     * So is the base's slot found for it: a wrapper's original never changes. */
    PyTypeObject *type = Py_TYPE(self), *released = NULL;
    if (type != hot.call_type || type_stamp(type) != hot.call_stamp)
        released = remember_call(type);
    PyObject *call = Py_XNewRef(hot.call); /* the class may be changed during the launch */
    ternaryfunc base_slot = hot.call_base_slot;
    PyObject *result;
    if (call == NULL) {
        result = PyErr_Format(PyExc_TypeError, "'%.200s' object is not callable", type->tp_name);
    }
    else if (Py_IS_TYPE(call, &LaunchWrapperType) && ((LaunchWrapper *)call)->original != NULL) {
        PyObject *original = ((LaunchWrapper *)call)->original;
        Args a = {NULL, 0, NULL, self, args, kwargs, original, base_slot};
        result = launch((LaunchWrapper *)call, &a);
    }
    else { /* something else is the class's __call__ now: call it as CPython's slot would */
        descrgetfunc get = Py_TYPE(call)->tp_descr_get;
        PyObject *bound = get == NULL ? Py_NewRef(call) : get(call, self, (PyObject *)type);
        result = bound == NULL ? NULL : PyObject_Call(bound, args, kwargs);
        Py_XDECREF(bound);
    }
    Py_XDECREF(call);
    Py_XDECREF(released);
    return result;
}

/* The slot. A cached launch of a CuPy kernel takes a short path: the class's remembered
 * __call__ and the recent entry are all it reads, and the launch itself is CuPy's slot, called
 * straight with the caller's tuple and dict. The wrapper needs no reference: nothing of it is
 * read once CuPy is called. The same steps as launch()'s cached launch, in fewer instructions,
 * because a launch inside CuPy fetches them anew each time. */
static PyObject *
direct_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyTypeObject *type = Py_TYPE(self);
    LaunchWrapper *w = (LaunchWrapper *)hot.call_short;
    if (w != NULL && type == hot.call_type && type_stamp(type) == hot.call_stamp) {
        Frame *caller = frame_current();
        Frame **in_progress = &launch_caller;
        const Recent *entry = cached_entry(w, caller, *in_progress, self);
        if (entry != NULL) {
            ternaryfunc base_slot = hot.call_base_slot;
            CachedRange range = open_cached(entry);
            Frame *outer = *in_progress;
            *in_progress = caller;
            PyObject *result = base_slot(self, args, kwargs);
            *in_progress = outer;
            close_cached(range);
            return result;
        }
    }
    return direct_call_in_full(self, args, kwargs);
}

static PyObject *
use_direct_call(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls) || !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return PyErr_Format(PyExc_TypeError, "use_direct_call: a class made in Python, not %R",
                            cls);
    PyObject *own = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, str_dunder_call);
    if (own == NULL || !Py_IS_TYPE(own, &LaunchWrapperType)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "use_direct_call: %R's own __call__ is not a kname "
                         "launch wrapper", cls);
        return NULL;
    }
    /* CPython sets the slot again whenever __call__ is set or deleted on the class (disable()
     * and enable() do), which undoes this: the caller calls it after each time it sets one. */
    ((PyTypeObject *)cls)->tp_call = direct_call;
    Py_RETURN_NONE;
}

static PyObject *
has_direct_call(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "has_direct_call: a class, not %R", cls);
    return PyBool_FromLong(((PyTypeObject *)cls)->tp_call == direct_call);
}

/* ------------------------------------------------------------------ the module's part */

static PyMethodDef cupy_methods[] = {
    {"use_direct_call", use_direct_call, METH_O,
     "use_direct_call(cls): instances of cls call its own __call__, a LaunchWrapper, from a C slot "
     "(no argument copies); setting or deleting cls.__call__ later gives CPython's slot back."},
    {"has_direct_call", has_direct_call, METH_O,
     "has_direct_call(cls): whether instances of cls are called through use_direct_call's slot."},
    {NULL, NULL, 0, NULL},
};

/* Called by PyInit__native, as registered below. */
static int
cupy_ready(PyObject *module)
{
    if (str_dunder_call == NULL
        && (str_dunder_call = PyUnicode_InternFromString("__call__")) == NULL)
        return -1;
    if (PyType_Ready(&BaseCallType) < 0
        || PyModule_AddObjectRef(module, "BaseCall", (PyObject *)&BaseCallType) < 0)
        return -1;
    return PyModule_AddFunctions(module, cupy_methods);
}

KNAME_UNIT(cupy_ready)
