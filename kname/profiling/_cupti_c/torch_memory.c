/*
 * kname._native_cupti's TorchMemory: torch's GPU-trace memory events kept in C, for kname
 * profile --memory (memory_hooks.TorchBlocks, which sizes and charges them). torch's C++ calls
 * torch.cuda._gpu_trace.<registry>.fire_callbacks(address) under the GIL at each block handed
 * out and taken back; memory_hooks puts this file's callables there, so an event costs no
 * Python frame: the site of the running frame (the one that called into torch) found by a
 * cached look-up as capture.cached_site finds it (its own key, or past library frames the first
 * user frame's), kname's rules in Python (site_of_frame) on a miss or with no frame (torch's
 * autograd threads); the (address, site, time) kept in a buffer that `settle` empties every
 * `batch` events. A fault is kept, the first only, for take_fault(); the event is kept, named
 * `unnamed`. Everything here runs with the GIL held, which guards the buffer.
 *
 * own_site, kind_of and cached_site twin callback.c's lookup, kind_of and cached_site, which are
 * static there and take a Recorder (this needs no CUPTI subscription): one look-up, once
 * callback.c gives its own over the dicts alone.
 */
#include "profiling/_cupti_c/torch_memory.h" /* first: it includes Python.h */

#include <time.h>

#define MAX_EVENTS (1 << 22) /* events waiting; past that (settle failing), they are lost */

static const char FINDING[] = "finding the line of a torch allocation";
static const char SETTLING[] = "reading torch's allocation history";

TrackerCalls tracker_calls = {NULL, NULL};

/* What torch calls: a block handed out (is_free 0) or taken back, its address the one argument;
 * then `then` (torch's own fire_callbacks) where `others`, its registry's list, is not empty. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    TorchMemory *owner;
    PyObject *then, *others;
    int is_free;
} TorchEventCall;

/* ------------------------------------------------------------------ faults */

/* The error set now kept as the first fault (a Ctrl-C is raised again at the program's next
 * check instead: not lost), and cleared. */
void
memory_fault(TorchMemory *m, const char *where)
{
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        PyErr_Clear();
        PyErr_SetInterrupt();
        return;
    }
    PyObject *exc = take_error();
    if (m->fault == NULL && exc != NULL)
        m->fault = Py_BuildValue("(sO)", where, exc);
    PyErr_Clear(); /* Py_BuildValue's own, if any: the fault is lost, the event kept */
    Py_XDECREF(exc);
}

/* ------------------------------------------------------------------ the site */

static inline SiteEntry *
site_slot(TorchMemory *m, void *code, int lasti)
{
    uintptr_t h = ((uintptr_t)code >> 4) * 31u ^ (uintptr_t)lasti;
    return &m->recent[(h ^ (h >> 9)) & (SITES_KEPT - 1)];
}

/* The name of sites[(id(code), lasti, site_key)] (borrowed: the table holds it); NULL without an
 * error: no such site; NULL with one: an error. */
PyObject *
own_site_at(TorchMemory *m, PyCodeObject *code, int lasti)
{
    uint64_t generation = generation_of(m->sites);
    SiteEntry *entry = site_slot(m, code, lasti);
    if (m->remember && entry->code == (void *)code && entry->lasti == lasti
        && entry->generation == generation)
        return entry->name;
    PyObject *key = Py_BuildValue("(NiO)", PyLong_FromVoidPtr(code), lasti, m->site_key);
    if (key == NULL)
        return NULL;
    PyObject *site = Py_XNewRef(PyDict_GetItemWithError(m->sites, key));
    Py_DECREF(key);
    if (site == NULL)
        return NULL;
    PyObject *name = PyObject_GetAttrString(site, "name");
    Py_DECREF(site);
    if (name == NULL)
        return NULL;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a call site's name is a %.100s, not a str",
                     Py_TYPE(name)->tp_name);
        Py_DECREF(name);
        return NULL;
    }
    if (!m->remember) {
        Py_DECREF(name); /* the site still holds it, for this event */
        return name;
    }
    Py_XSETREF(entry->name, name);
    entry->code = code;
    entry->lasti = lasti;
    entry->generation = generation;
    return name;
}

static inline PyObject *
own_site(TorchMemory *m, Frame *frame)
{
    return own_site_at(m, frame_code(frame), frame_lasti(frame));
}

/* kname.callsite's decision on `code` (KIND_USER...; -1: none; -2: an error). */
int
kind_of_code(TorchMemory *m, PyCodeObject *code)
{
    uint64_t generation = generation_of(m->kinds);
    uintptr_t h = (uintptr_t)code >> 4;
    KindEntry *entry = &m->recent_kinds[(h ^ (h >> 8)) & (SITES_KEPT - 1)];
    if (m->remember && entry->code == (void *)code && entry->generation == generation)
        return entry->kind;
    int kind = decided_kind(m->kinds, code);
    if (m->remember && kind != -2)
        *entry = (KindEntry){code, generation, kind};
    return kind;
}

static inline int
kind_of(TorchMemory *m, Frame *frame)
{
    return kind_of_code(m, frame_code(frame));
}

/* The cached site of `frame` (borrowed), as capture.cached_site finds it; NULL without an error
 * where kname's rules must decide. */
static PyObject *
cached_site(TorchMemory *m, Frame *frame)
{
    PyObject *name = own_site(m, frame);
    if (name != NULL || PyErr_Occurred())
        return name;
    int kind = kind_of(m, frame);
    if (!PASSED_OVER(kind))
        return NULL;
    Frame *f = frame_back(frame);
    for (int depth = 0; f != NULL && depth < MAX_WALK; depth++) {
        kind = kind_of(m, f);
        if (kind == KIND_USER)
            return own_site(m, f);
        if (!PASSED_OVER(kind))
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* The site of an allocation made now on this thread (a new reference; never NULL). */
PyObject *
site_now(TorchMemory *m)
{
    Frame *frame = frame_current();
    if (frame != NULL) {
        PyObject *name = cached_site(m, frame);
        if (name != NULL)
            return Py_NewRef(name);
        if (PyErr_Occurred())
            memory_fault(m, FINDING);
    }
    /* kname's rules, once per line (or per event with no frame: the backward pass's line). */
    PyObject *arg = frame != NULL ? (PyObject *)PyEval_GetFrame() : Py_None;
    PyObject *found = PyObject_CallOneArg(m->site_of_frame, arg);
    if (found != NULL && PyUnicode_Check(found))
        return found;
    if (found != NULL) {
        PyErr_Format(PyExc_TypeError, "site_of_frame gave a %.100s, not a str",
                     Py_TYPE(found)->tp_name);
        Py_DECREF(found);
    }
    memory_fault(m, FINDING);
    return Py_NewRef(m->unnamed);
}

PyObject *
keep_name(TorchMemory *m, PyObject *name)
{
    PyObject *kept = PyDict_SetDefault(m->kept, name, name);
    return kept;
}

/* ------------------------------------------------------------------ the buffer */

int64_t
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Room for one more event; 0 when none (the event is lost, counted). */
static int
make_room(TorchMemory *m)
{
    if (m->count < m->room)
        return 1;
    Py_ssize_t room = m->room ? 2 * m->room : 1024;
    if (room > MAX_EVENTS)
        return 0;
    MemoryEvent *grown = PyMem_Realloc(m->events, (size_t)room * sizeof(MemoryEvent));
    if (grown == NULL)
        return 0;
    m->events = grown;
    m->room = room;
    return 1;
}

static void
settle_when_due(TorchMemory *m)
{
    if (m->count < m->batch || m->settling || m->settle == NULL)
        return;
    m->settling = 1; /* events from other threads while it runs wait in the buffer */
    PyObject *result = PyObject_CallNoArgs(m->settle);
    m->settling = 0;
    if (result == NULL)
        memory_fault(m, SETTLING);
    Py_XDECREF(result);
}

static void
add_event(TorchMemory *m, PyObject *address, int is_free)
{
    uintptr_t where = (uintptr_t)PyLong_AsUnsignedLongLong(address);
    if (where == (uintptr_t)-1 && PyErr_Occurred()) {
        memory_fault(m, is_free ? "charging a torch free" : "charging a torch allocation");
        return;
    }
    int64_t ns = now_ns();
    PyObject *site = is_free ? NULL : site_now(m); /* may run Python: before the buffer's turn */
    if (!make_room(m)) {
        m->lost++;
        Py_XDECREF(site);
        return;
    }
    m->events[m->count++] = (MemoryEvent){where, site, ns};
    settle_when_due(m);
}

static PyObject *
event_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TorchEventCall *call = (TorchEventCall *)op;
    TorchMemory *m = call->owner; /* NULL: cleared by the collector, yet torch still calls */
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (m != NULL && m->on && nargs == 1 && kwnames == NULL) {
        PyObject *pending = take_error(); /* an allocation made while an exception is handled */
        add_event(m, args[0], call->is_free);
        restore_error(pending);
    }
    if (call->others != NULL && PyList_Check(call->others) && PyList_GET_SIZE(call->others) > 0)
        return PyObject_Vectorcall(call->then, args, nargsf, kwnames);
    Py_RETURN_NONE;
}

static int
event_traverse(TorchEventCall *call, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(call));
    Py_VISIT(call->owner);
    Py_VISIT(call->then);
    Py_VISIT(call->others);
    return 0;
}

static int
event_clear(TorchEventCall *call)
{
    Py_CLEAR(call->owner);
    Py_CLEAR(call->then);
    Py_CLEAR(call->others);
    return 0;
}

static void
event_dealloc(TorchEventCall *call)
{
    PyObject_GC_UnTrack(call);
    event_clear(call);
    Py_TYPE(call)->tp_free((PyObject *)call);
}

static PyObject *
event_repr(TorchEventCall *call)
{
    return PyUnicode_FromFormat("<kname torch memory %s callback>",
                                call->is_free ? "free" : "allocation");
}

static PyTypeObject TorchEventCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.TorchEventCall",
    .tp_doc = "callback(address): a torch block handed out or taken back (TorchMemory.callback).",
    .tp_basicsize = sizeof(TorchEventCall),
    .tp_dealloc = (destructor)event_dealloc,
    .tp_repr = (reprfunc)event_repr,
    .tp_vectorcall_offset = offsetof(TorchEventCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)event_traverse,
    .tp_clear = (inquiry)event_clear,
};

/* ------------------------------------------------------------------ TorchMemory */

static void
drop_events(TorchMemory *m)
{
    for (Py_ssize_t i = 0; i < m->count; i++)
        Py_XDECREF(m->events[i].site);
    m->count = 0;
}

static int
memory_traverse(TorchMemory *m, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(m));
    Py_VISIT(m->sites);
    Py_VISIT(m->kinds);
    Py_VISIT(m->site_key);
    Py_VISIT(m->site_of_frame);
    Py_VISIT(m->unnamed);
    Py_VISIT(m->settle);
    Py_VISIT(m->fault);
    Py_VISIT(m->kept);
    return 0;
}

static int
memory_clear(TorchMemory *m)
{
    m->on = 0;
    if (tracker_calls.let_go != NULL)
        tracker_calls.let_go(m); /* first: its events point into m->kept */
    Py_CLEAR(m->sites);
    Py_CLEAR(m->kinds);
    Py_CLEAR(m->site_key);
    Py_CLEAR(m->site_of_frame);
    Py_CLEAR(m->unnamed);
    Py_CLEAR(m->settle);
    Py_CLEAR(m->fault);
    drop_events(m);
    for (int i = 0; i < SITES_KEPT; i++) {
        Py_CLEAR(m->recent[i].name);
        m->recent[i].code = NULL;
    }
    Py_CLEAR(m->kept);
    return 0;
}

static void
memory_dealloc(TorchMemory *m)
{
    PyObject_GC_UnTrack(m);
    memory_clear(m);
    PyMem_Free(m->events);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
memory_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"sites", "kinds", "site_key", "site_of_frame", "unnamed", "settle",
                            "batch", NULL};
    PyObject *sites, *kinds, *site_key, *site_of_frame, *unnamed, *settle;
    Py_ssize_t batch;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!OOUOn:TorchMemory", names, &PyDict_Type,
                                     &sites, &PyDict_Type, &kinds, &site_key, &site_of_frame,
                                     &unnamed, &settle, &batch))
        return NULL;
    if (!PyCallable_Check(site_of_frame) || !PyCallable_Check(settle) || batch < 1) {
        PyErr_SetString(PyExc_TypeError,
                        "TorchMemory: site_of_frame and settle must be callable, batch >= 1");
        return NULL;
    }
    TorchMemory *m = (TorchMemory *)type->tp_alloc(type, 0); /* zeroed */
    if (m == NULL)
        return NULL;
    m->kept = PyDict_New();
    if (m->kept == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    m->sites = Py_NewRef(sites);
    m->kinds = Py_NewRef(kinds);
    m->site_key = Py_NewRef(site_key);
    m->site_of_frame = Py_NewRef(site_of_frame);
    m->unnamed = Py_NewRef(unnamed);
    m->settle = Py_NewRef(settle);
    m->batch = batch;
    m->on = 1;
    m->remember = follow_changes(sites) && follow_changes(kinds);
    return (PyObject *)m;
}

/* callback(is_free, then, others) -> the callable torch calls (see TorchEventCall) */
static PyObject *
memory_callback(TorchMemory *m, PyObject *args)
{
    int is_free;
    PyObject *then, *others;
    if (!PyArg_ParseTuple(args, "pOO:callback", &is_free, &then, &others))
        return NULL;
    TorchEventCall *call = PyObject_GC_New(TorchEventCall, &TorchEventCallType);
    if (call == NULL)
        return NULL;
    call->vectorcall = event_vectorcall;
    call->owner = (TorchMemory *)Py_NewRef((PyObject *)m);
    call->then = Py_NewRef(then);
    call->others = Py_NewRef(others);
    call->is_free = is_free;
    PyObject_GC_Track(call);
    return (PyObject *)call;
}

/* take() -> [(address, site or None (a free), ns)]: the events so far, the buffer emptied */
static PyObject *
memory_take(TorchMemory *m, PyObject *unused)
{
    (void)unused;
    PyObject *taken = PyList_New(m->count);
    if (taken == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < m->count; i++) {
        MemoryEvent *e = &m->events[i];
        PyObject *item = Py_BuildValue("(KOL)", (unsigned long long)e->address,
                                       e->site != NULL ? e->site : Py_None, (long long)e->ns);
        if (item == NULL) {
            Py_DECREF(taken);
            return NULL;
        }
        PyList_SET_ITEM(taken, i, item);
    }
    drop_events(m);
    return taken;
}

/* take_fault() -> (where, exception) or None: the first fault, forgotten */
static PyObject *
memory_take_fault(TorchMemory *m, PyObject *unused)
{
    (void)unused;
    PyObject *fault = m->fault != NULL ? m->fault : Py_NewRef(Py_None);
    m->fault = NULL;
    return fault;
}

/* set(on, batch): whether events are kept; settle every `batch` events */
static PyObject *
memory_set(TorchMemory *m, PyObject *args)
{
    int on;
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "pn:set", &on, &batch))
        return NULL;
    if (batch < 1) {
        PyErr_SetString(PyExc_ValueError, "set: batch must be >= 1");
        return NULL;
    }
    m->on = on;
    m->batch = batch;
    if (tracker_calls.set != NULL)
        tracker_calls.set(m);
    Py_RETURN_NONE;
}

static PyObject *
memory_lost(TorchMemory *m, PyObject *unused)
{
    (void)unused;
    Py_ssize_t lost = m->lost;
    m->lost = 0;
    return PyLong_FromSsize_t(lost);
}

static PyMethodDef memory_methods[] = {
    {"callback", (PyCFunction)memory_callback, METH_VARARGS,
     "callback(is_free, then, others) -> callable(address): torch's event kept, then "
     "then(address) where the list `others` is not empty."},
    {"take", (PyCFunction)memory_take, METH_NOARGS,
     "take() -> [(address, site or None for a free, ns)]: the events so far, emptied."},
    {"take_fault", (PyCFunction)memory_take_fault, METH_NOARGS,
     "take_fault() -> (where, exception) or None: the first fault since the last take."},
    {"set", (PyCFunction)memory_set, METH_VARARGS,
     "set(on, batch): whether events are kept, and settle() called every `batch` events."},
    {"take_lost", (PyCFunction)memory_lost, METH_NOARGS,
     "take_lost() -> events lost (no room) since the last take."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject TorchMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.TorchMemory",
    .tp_doc = "torch's GPU-trace memory events, each with its line, kept in C "
              "(kname/profiling/_cupti_c/torch_memory.c).",
    .tp_basicsize = sizeof(TorchMemory),
    .tp_new = memory_new,
    .tp_dealloc = (destructor)memory_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)memory_traverse,
    .tp_clear = (inquiry)memory_clear,
    .tp_methods = memory_methods,
};

int
torch_memory_ready(PyObject *module)
{
    if (PyType_Ready(&TorchEventCallType) < 0 || PyType_Ready(&TorchMemoryType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "TorchMemory", (PyObject *)&TorchMemoryType);
}
