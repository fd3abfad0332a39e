/*
 * kname._native's Counter, the C twin of the itertools.count() kname.counters makes on the Python
 * path: the launches under one name, which the launch wrapper advances in place (launch.h).
 */
#include "_native_c/types.h"

static PyObject *
counter_next(Counter *c)
{
    return PyLong_FromSsize_t(c->next++);
}

static PyObject *
counter_repr(Counter *c)
{
    return PyUnicode_FromFormat("count(%zd)", c->next);
}

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *no_names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Counter", no_names))
        return NULL;
    return type->tp_alloc(type, 0); /* zeroed: counts from 0 */
}

static PyMemberDef counter_members[] = {
    {"value", MEMBER_SSIZE, offsetof(Counter, next), MEMBER_READONLY, "launches counted so far"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.Counter",
    .tp_doc = "Counts launches as itertools.count() does; the C wrapper adds one in place.",
    .tp_basicsize = sizeof(Counter),
    .tp_repr = (reprfunc)counter_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)counter_next,
    .tp_members = counter_members,
    .tp_new = counter_new,
};

int
counters_ready(PyObject *module)
{
    if (PyType_Ready(&CounterType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Counter", (PyObject *)&CounterType);
}
