/*
 * kname._native's NVTX ranges (see ranges.h): the NvtxCall type, and nvtx_domain() and
 * nvtx_range(), which make them. Without the NVTX headers at build time, only nvtx_ready(),
 * which then does nothing.
 */
#include "_native_c/ranges.h"

_Thread_local int kname_ranges_open;

#ifdef KNAME_NVTX
/* Domain name -> its handle (as an int); domain name -> {category: id}. Under the GIL. */
static PyObject *nvtx_domains, *nvtx_categories;

static PyObject *
nvtx_call_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)args;
    NvtxCall *call = (NvtxCall *)op;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments", call->pop ? "push" : "pop");
        return NULL;
    }
    nvtx_call_now(call);
    Py_RETURN_NONE;
}

static PyObject *
nvtx_call_repr(NvtxCall *call)
{
    if (call->pop == NULL)
        return PyUnicode_FromString("<kname NVTX pop>");
    return PyUnicode_FromFormat("<kname NVTX push %R>", call->message);
}

static void
nvtx_call_dealloc(NvtxCall *call)
{
    Py_XDECREF(call->message);
    Py_XDECREF(call->pop);
    Py_TYPE(call)->tp_free((PyObject *)call);
}

PyTypeObject NvtxCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.NvtxCall",
    .tp_doc = "A call site's NVTX push() or pop(), calling the NVTX C API (nvtx_range).",
    .tp_basicsize = sizeof(NvtxCall),
    .tp_dealloc = (destructor)nvtx_call_dealloc,
    .tp_repr = (reprfunc)nvtx_call_repr,
    .tp_vectorcall_offset = offsetof(NvtxCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
};

/* The handle of domain `name` (a str), opened on first use; NULL without an error when NVTX has
 * no tool (its calls are then no-ops), NULL with one on error. */
static nvtxDomainHandle_t
open_domain(PyObject *name, int *failed)
{
    *failed = 0;
    PyObject *known = PyDict_GetItemWithError(nvtx_domains, name); /* borrowed */
    if (known != NULL)
        return (nvtxDomainHandle_t)PyLong_AsVoidPtr(known);
    const char *text = PyErr_Occurred() ? NULL : PyUnicode_AsUTF8(name);
    if (text == NULL) {
        *failed = 1;
        return NULL;
    }
    nvtxDomainHandle_t domain = nvtxDomainCreateA(text);
    PyObject *handle = PyLong_FromVoidPtr(domain);
    if (handle == NULL || PyDict_SetItem(nvtx_domains, name, handle) < 0) {
        Py_XDECREF(handle);
        *failed = 1;
        return NULL;
    }
    Py_DECREF(handle);
    return domain;
}

/* The id of `category` (a str) in `domain`, named there on first use; 0 on error. */
static uint32_t
category_id(nvtxDomainHandle_t domain, PyObject *domain_name, PyObject *category)
{
    PyObject *ids = PyDict_GetItemWithError(nvtx_categories, domain_name); /* borrowed */
    if (ids == NULL) {
        if (PyErr_Occurred() || (ids = PyDict_New()) == NULL)
            return 0;
        int set = PyDict_SetItem(nvtx_categories, domain_name, ids);
        Py_DECREF(ids); /* nvtx_categories holds it */
        if (set < 0)
            return 0;
    }
    PyObject *known = PyDict_GetItemWithError(ids, category); /* borrowed */
    if (known != NULL)
        return (uint32_t)PyLong_AsUnsignedLong(known);
    const char *text = PyErr_Occurred() ? NULL : PyUnicode_AsUTF8(category);
    uint32_t id = (uint32_t)PyDict_GET_SIZE(ids) + 1; /* from 1 per domain, in first-use order */
    PyObject *value = text == NULL ? NULL : PyLong_FromUnsignedLong(id);
    int stored = value != NULL && PyDict_SetItem(ids, category, value) == 0;
    Py_XDECREF(value);
    if (!stored)
        return 0;
    nvtxDomainNameCategoryA(domain, id, text);
    return id;
}

/* A pop (`pop` NULL), or a push that closes its range with `pop`. */
static NvtxCall *
new_nvtx_call(nvtxDomainHandle_t domain, PyObject *message, NvtxCall *pop)
{
    NvtxCall *call = PyObject_New(NvtxCall, &NvtxCallType);
    if (call == NULL)
        return NULL;
    call->vectorcall = nvtx_call_vectorcall;
    call->domain = domain;
    memset(&call->attributes, 0, sizeof call->attributes);
    call->message = Py_XNewRef(message);
    call->pop = Py_XNewRef((PyObject *)pop);
    return call;
}

static PyObject *
nvtx_domain(PyObject *module, PyObject *name)
{
    (void)module;
    if (!PyUnicode_Check(name))
        return PyErr_Format(PyExc_TypeError, "nvtx_domain() takes a str, not %.100s",
                            Py_TYPE(name)->tp_name);
    int failed;
    nvtxDomainHandle_t domain = open_domain(name, &failed);
    if (failed)
        return NULL;
    return PyBool_FromLong(domain != NULL);
}

static PyObject *
nvtx_range(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *domain_name, *message, *category;
    unsigned int argb;
    if (!PyArg_ParseTuple(args, "UUIU:nvtx_range", &domain_name, &message, &argb, &category))
        return NULL;
    int failed;
    nvtxDomainHandle_t domain = open_domain(domain_name, &failed);
    if (failed)
        return NULL;
    if (domain == NULL)
        Py_RETURN_NONE;
    const char *text = PyUnicode_AsUTF8(message);
    if (text == NULL)
        return NULL;
    uint32_t category_number = category_id(domain, domain_name, category);
    if (category_number == 0)
        return NULL;
    NvtxCall *pop = new_nvtx_call(domain, NULL, NULL);
    if (pop == NULL)
        return NULL;
    NvtxCall *push = new_nvtx_call(domain, message, pop);
    if (push == NULL) {
        Py_DECREF(pop);
        return NULL;
    }
    push->attributes.version = NVTX_VERSION;
    push->attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    push->attributes.category = category_number;
    push->attributes.colorType = NVTX_COLOR_ARGB;
    push->attributes.color = argb;
    push->attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    push->attributes.message.registered = nvtxDomainRegisterStringA(domain, text);
    return Py_BuildValue("(NN)", push, pop);
}

static PyMethodDef nvtx_methods[] = {
    {"nvtx_domain", nvtx_domain, METH_O,
     "nvtx_domain(name) -> bool: opens the NVTX domain `name` (NVTX loads its tool now); "
     "False when no tool is attached."},
    {"nvtx_range", nvtx_range, METH_VARARGS,
     "nvtx_range(domain, message, argb, category) -> (push, pop) calling the NVTX C API, or "
     "None when no tool is attached."},
    {NULL, NULL, 0, NULL},
};

int
nvtx_ready(PyObject *module)
{
    if (PyType_Ready(&NvtxCallType) < 0)
        return -1;
    if (nvtx_domains == NULL && (nvtx_domains = PyDict_New()) == NULL)
        return -1;
    if (nvtx_categories == NULL && (nvtx_categories = PyDict_New()) == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "NvtxCall", (PyObject *)&NvtxCallType) < 0)
        return -1;
    return PyModule_AddFunctions(module, nvtx_methods);
}

#else
int
nvtx_ready(PyObject *module)
{
    (void)module;
    return 0;
}
#endif /* KNAME_NVTX */
