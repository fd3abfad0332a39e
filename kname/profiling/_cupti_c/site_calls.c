/*
 * kname._native_cupti's SiteCall: the push and pop kname profile runs for a site's wrapped
 * launches (Recorder.site_calls, which this file adds to the Recorder), in C. The head
 * kname._native reads is _common_c/profiled.h.
 */
#include "profiling/_cupti_c/recorder.h"

/* push() or pop() of the launches kname wraps at one site: what capture's closures do when the
 * marks are this recorder's and no external correlation is pushed, with no Python frame and no
 * look-up per call. push: nvtx_push() (when given), then the site marked on this thread; pop: the
 * mark removed, then nvtx_pop(). An error from an NVTX call is the call's (the launch wrapper
 * says it), as from the closures. Its head (_common_c/profiled.h) lets kname._native's cached
 * launch do the same without calling it. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    KnameProfiled profiled; /* its nvtx: NULL, no range */
    Recorder *recorder;
    PyObject *name; /* held by the recorder's `kept` too: `wrapped` may point at it */
} SiteCall;

static void
site_mark(const KnameProfiled *profiled)
{
    const SiteCall *call = (const SiteCall *)((const char *)profiled - offsetof(SiteCall, profiled));
    if (call->recorder != NULL)
        mark_wrapped(call->recorder, call->name);
}

static void
site_unmark(const KnameProfiled *profiled)
{
    const SiteCall *call = (const SiteCall *)((const char *)profiled - offsetof(SiteCall, profiled));
    if (call->recorder != NULL)
        mark_wrapped(call->recorder, NULL);
}

static PyObject *
site_call_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)args;
    SiteCall *call = (SiteCall *)op;
    int is_pop = call->profiled.is_pop;
    if (call->recorder == NULL) { /* cleared by the collector, yet called from a finalizer */
        PyErr_SetString(PyExc_RuntimeError, "kname site call used after it was cleared");
        return NULL;
    }
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, is_pop ? "pop() takes no arguments"
                                                : "push() takes no arguments");
        return NULL;
    }
    if (is_pop)
        site_unmark(&call->profiled);
    if (call->profiled.nvtx != NULL) {
        PyObject *result = PyObject_CallNoArgs(call->profiled.nvtx);
        if (result == NULL)
            return NULL;
        Py_DECREF(result);
    }
    if (!is_pop)
        site_mark(&call->profiled);
    Py_RETURN_NONE;
}

static int
site_call_traverse(SiteCall *call, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(call));
    Py_VISIT(call->recorder);
    Py_VISIT(call->name);
    Py_VISIT(call->profiled.nvtx);
    return 0;
}

static int
site_call_clear(SiteCall *call)
{
    Py_CLEAR(call->recorder);
    Py_CLEAR(call->name);
    Py_CLEAR(call->profiled.nvtx);
    call->profiled.nvtx_attributes = NULL;
    return 0;
}

static void
site_call_dealloc(SiteCall *call)
{
    PyObject_GC_UnTrack(call);
    site_call_clear(call);
    Py_TYPE(call)->tp_free((PyObject *)call);
}

static PyObject *
site_call_repr(SiteCall *call)
{
    return PyUnicode_FromFormat("<kname profile %s of %R>",
                                call->profiled.is_pop ? "pop" : "push", call->name);
}

static PyTypeObject SiteCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.SiteCall",
    .tp_doc = "push() or pop() of a wrapped launch's site (Recorder.site_calls).",
    .tp_basicsize = sizeof(SiteCall),
    .tp_dealloc = (destructor)site_call_dealloc,
    .tp_repr = (reprfunc)site_call_repr,
    .tp_vectorcall_offset = offsetof(SiteCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)site_call_traverse,
    .tp_clear = (inquiry)site_call_clear,
};

static PyObject *
new_site_call(Recorder *r, PyObject *name, PyObject *nvtx, int is_pop)
{
    SiteCall *call = PyObject_GC_New(SiteCall, &SiteCallType);
    if (call == NULL)
        return NULL;
    call->vectorcall = site_call_vectorcall;
    call->profiled = (KnameProfiled){
        KNAME_PROFILED_MAGIC, site_mark, site_unmark, r, nvtx == Py_None ? NULL : Py_NewRef(nvtx),
        is_pop, NULL, NULL,
    };
    call->recorder = (Recorder *)Py_NewRef((PyObject *)r);
    call->name = Py_NewRef(name);
    PyObject_GC_Track(call);
    return (PyObject *)call;
}

/* site_calls(name, nvtx_push, nvtx_pop) -> (push, pop) */
static PyObject *
recorder_site_calls(Recorder *r, PyObject *args)
{
    PyObject *name, *nvtx_push, *nvtx_pop;
    if (!PyArg_ParseTuple(args, "OOO:site_calls", &name, &nvtx_push, &nvtx_pop))
        return NULL;
    for (int i = 0; i < 2; i++) {
        PyObject *nvtx = i ? nvtx_pop : nvtx_push;
        if (nvtx != Py_None && !PyCallable_Check(nvtx)) {
            PyErr_Format(PyExc_TypeError, "site_calls: %s must be callable or None, not %.100s",
                         i ? "nvtx_pop" : "nvtx_push", Py_TYPE(nvtx)->tp_name);
            return NULL;
        }
    }
    PyObject *kept = keep(r, name);
    if (kept == NULL)
        return NULL;
    PyObject *push = new_site_call(r, kept, nvtx_push, 0);
    PyObject *pop = push == NULL ? NULL : new_site_call(r, kept, nvtx_pop, 1);
    if (pop == NULL) {
        Py_XDECREF(push);
        return NULL;
    }
    return Py_BuildValue("(NN)", push, pop);
}

static PyMethodDef site_calls_methods[] = {
    {"site_calls", (PyCFunction)recorder_site_calls, METH_VARARGS,
     "site_calls(name, nvtx_push, nvtx_pop) -> (push, pop): a wrapped launch's calls in C, "
     "push = nvtx_push() then mark(name), pop = unmark() then nvtx_pop() (None: no NVTX call)."},
    {NULL, NULL, 0, NULL},
};

int
site_calls_ready(PyTypeObject *recorder)
{
    if (PyType_Ready(&SiteCallType) < 0)
        return -1;
    return add_methods(recorder, site_calls_methods);
}
