/*
 * kname._native_cupti's Recorder as Python sees it (see recorder.h): its own methods (the test
 * methods that stand in for CUPTI's callback, the marks of a wrapped launch, the finished calls
 * handed over as Python records, CUPTI's subscription), and the type itself. The files that give
 * it more methods add their own (module.c calls each one's ready function): its activity
 * buffers and the join in C, activity.c; its trace, trace.c and trace_json.c; its site calls
 * (SiteCall), site_calls.c.
 */
#include "profiling/_cupti_c/recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next_serial = 1;

/* LaunchRecord's fields, ActivityRecord's, ExternalCorrelation's and GraphNodeRecord's
 * (kname.profiling.records), each in the order of its constructor's arguments. */
static const char *const launch_fields[] = {
    "correlation_id", "thread", "site", "api", "start", "end", "graph", "parent", NULL,
};
static const char *const activity_fields[] = {
    "kind", "correlation_id", "name", "start", "end", "stream", "device", "graph_id",
    "graph_node_id", NULL,
};
static const char *const external_fields[] = {"correlation_id", "external_id", NULL};
static const char *const node_fields[] = {
    "event", "node", "graph", "graph_exec", "original", "site", "correlation_id", NULL,
};

/* ------------------------------------------------------------------ Python methods */

static int
check_api(Recorder *r, int api)
{
    if (api < 0 || api >= r->api_count) {
        PyErr_Format(PyExc_IndexError, "api index %d is not one of the %zd given", api,
                     r->api_count);
        return -1;
    }
    return 0;
}

static PyObject *
recorder_enter(Recorder *r, PyObject *args)
{
    unsigned int correlation_id;
    int api;
    unsigned long long timestamp;
    if (!PyArg_ParseTuple(args, "IiK:enter", &correlation_id, &api, &timestamp)
        || check_api(r, api) < 0)
        return NULL;
    launch_enter(r, correlation_id, api, timestamp);
    Py_RETURN_NONE;
}

static PyObject *
recorder_exit(Recorder *r, PyObject *args)
{
    unsigned int correlation_id;
    unsigned long long timestamp;
    if (!PyArg_ParseTuple(args, "IK:exit", &correlation_id, &timestamp))
        return NULL;
    launch_exit(r, correlation_id, timestamp);
    Py_RETURN_NONE;
}

typedef struct {
    Recorder *r;
    uint32_t correlation_id;
    int api;
    uint64_t start, end;
} OffGilCall;

static void *
enter_and_exit(void *arg)
{
    OffGilCall *call = (OffGilCall *)arg;
    launch_enter(call->r, call->correlation_id, call->api, call->start);
    launch_exit(call->r, call->correlation_id, call->end);
    return NULL;
}

static PyObject *
recorder_call_without_gil(Recorder *r, PyObject *args)
{
    OffGilCall call = {r, 0, 0, 0, 0};
    unsigned int correlation_id;
    unsigned long long start, end;
    int new_thread = 0, failed = 0;
    if (!PyArg_ParseTuple(args, "IiKK|p:call_without_gil", &correlation_id, &call.api, &start,
                          &end, &new_thread)
        || check_api(r, call.api) < 0)
        return NULL;
    call.correlation_id = correlation_id;
    call.start = start;
    call.end = end;
    Py_BEGIN_ALLOW_THREADS
    if (new_thread) {
        pthread_t thread;
        failed = pthread_create(&thread, NULL, enter_and_exit, &call);
        if (!failed)
            pthread_join(thread, NULL);
    }
    else {
        enter_and_exit(&call);
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
recorder_mark(Recorder *r, PyObject *name)
{
    PyObject *kept = keep(r, name);
    if (kept == NULL)
        return NULL;
    mark_wrapped(r, kept);
    Py_RETURN_NONE;
}

static PyObject *
recorder_unmark(Recorder *r, PyObject *unused)
{
    (void)unused;
    mark_wrapped(r, NULL);
    Py_RETURN_NONE;
}

/* `switch_` set to the truth of `flag`. */
static PyObject *
set_switch(atomic_int *switch_, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    atomic_store(switch_, on);
    Py_RETURN_NONE;
}

static PyObject *
recorder_time_launches(Recorder *r, PyObject *flag)
{
    return set_switch(&r->timed, flag);
}

static PyObject *
recorder_time_outer_launches(Recorder *r, PyObject *flag)
{
    return set_switch(&r->timed_outer, flag);
}

static PyObject *
recorder_set_frameless(Recorder *r, PyObject *name)
{
    PyObject *kept = NULL; /* None: no_frame again */
    if (name != Py_None && (kept = keep(r, name)) == NULL)
        return NULL;
    atomic_store_explicit(&r->frameless, kept, memory_order_release);
    Py_RETURN_NONE;
}

static PyObject *
recorder_set_frameless_namer(Recorder *r, PyObject *namer)
{
    if (namer != Py_None && !PyCallable_Check(namer)) {
        PyErr_SetString(PyExc_TypeError, "set_frameless_namer: a callable or None");
        return NULL;
    }
    /* Read by the callback under the GIL, which this holds: no launch sees it half-changed. */
    atomic_store(&r->has_frameless_namer, 0);
    Py_CLEAR(r->frameless_namer);
    if (namer != Py_None) {
        r->frameless_namer = Py_NewRef(namer);
        atomic_store(&r->has_frameless_namer, 1);
    }
    Py_RETURN_NONE;
}

/* ---- records as Python objects */

/* The `count` records at `taken` (each `size` bytes), made by one(r, make_record, record), as a
 * list; `taken` is freed. NULL with an error: no memory (taken NULL with a count: they stay). */
static PyObject *
records_list(Recorder *r, PyObject *make_record, void *taken, Py_ssize_t count, size_t size,
             PyObject *(*one)(Recorder *, PyObject *, const void *))
{
    if (count && taken == NULL)
        return PyErr_NoMemory(); /* the records stay for the next drain */
    PyObject *list = PyList_New(count);
    for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
        PyObject *record = one(r, make_record, (const char *)taken + (size_t)i * size);
        if (record == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, record);
    }
    free(taken);
    return list;
}

static PyObject *
launch_record(Recorder *r, PyObject *make_record, const void *launch)
{
    return launch_object(r, make_record, (const Launch *)launch);
}

static PyObject *
recorder_drain(Recorder *r, PyObject *make_record)
{
    Py_ssize_t count;
    Launch *taken = take_finished(r, &count);
    return records_list(r, make_record, taken, count, sizeof *taken, launch_record);
}

static PyObject *
node_record(Recorder *r, PyObject *make_record, const void *event)
{
    return node_object(r, make_record, (const NodeEvent *)event);
}

static PyObject *
recorder_drain_graph_nodes(Recorder *r, PyObject *make_record)
{
    Py_ssize_t count;
    NodeEvent *taken = take_node_events(r, &count);
    return records_list(r, make_record, taken, count, sizeof *taken, node_record);
}

static PyObject *
recorder_take_fault(Recorder *r, PyObject *unused)
{
    (void)unused;
    char detail[sizeof r->fault_detail];
    pthread_mutex_lock(&r->lock);
    const char *where = r->fault_where;
    PyObject *exc = r->fault;
    memcpy(detail, r->fault_detail, sizeof detail);
    r->fault_where = NULL;
    r->fault = NULL;
    r->fault_detail[0] = '\0';
    pthread_mutex_unlock(&r->lock);
    if (where == NULL)
        Py_RETURN_NONE;
    if (exc == NULL) /* a fault with no exception set (a C one, or one that left none) */
        exc = PyObject_CallFunction(PyExc_RuntimeError, "s", detail[0] ? detail : "no detail");
    if (exc == NULL)
        return NULL;
    return Py_BuildValue("(sN)", where, exc);
}

static PyObject *
recorder_take_forgotten(Recorder *r, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&r->lock);
    int forgot = r->forgot_open_calls;
    r->forgot_open_calls = 0;
    pthread_mutex_unlock(&r->lock);
    return PyBool_FromLong(forgot);
}

static PyObject *
recorder_counts(Recorder *r, PyObject *unused)
{
    (void)unused;
    Py_ssize_t count, open;
    pthread_mutex_lock(&r->lock);
    waiting_calls(r, &count, &open);
    Py_ssize_t nodes = r->node_event_count;
    unsigned long long dropped = r->dropped, nodes_dropped = r->node_events_dropped;
    pthread_mutex_unlock(&r->lock);
    return Py_BuildValue("{snsnsKsnsK}", "finished", count, "open", open, "dropped", dropped,
                         "graph_nodes", nodes, "graph_nodes_dropped", nodes_dropped);
}

/* ---- CUPTI */

/* subscribe(path) -> (status, holder): the callback subscribed (status 0), or CUPTI's status
 * and, when another tool holds CUPTI and the library says so, that tool's name. */
static PyObject *
recorder_subscribe(Recorder *r, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s:subscribe", &path))
        return NULL;
    if (r->subscriber != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this recorder is subscribed already");
        return NULL;
    }
    if (r->library == NULL) {
        /* The binding loaded libcupti already: the same copy, never a second one. */
        r->library = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (r->library == NULL)
            r->library = dlopen(path, RTLD_NOW);
        if (r->library == NULL) {
            const char *why = dlerror();
            PyErr_Format(PyExc_OSError, "%s", why ? why : path);
            return NULL;
        }
    }
    r->subscribe = (kn_Subscribe)symbol(r, "cuptiSubscribe");
    r->unsubscribe = (kn_Unsubscribe)symbol(r, "cuptiUnsubscribe");
    r->enable_callback = (kn_EnableCallback)symbol(r, "cuptiEnableCallback");
    r->get_timestamp = (kn_GetTimestamp)symbol(r, "cuptiGetTimestamp");
    if (!r->subscribe || !r->unsubscribe || !r->enable_callback || !r->get_timestamp)
        return NULL;
    r->subscribe_v2 = (kn_Subscribe_v2)dlsym(r->library, "cuptiSubscribe_v2"); /* CUPTI 13+ */

    char holder[KN_CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = "";
    kn_SubscriberParams params = {sizeof params, "kname", holder, sizeof holder - 1};
    kn_SubscriberHandle subscriber = NULL;
    kn_CUptiResult status;
    atomic_store(&r->stopped, 0);
    Py_BEGIN_ALLOW_THREADS
    cancel_teardown(); /* CUPTI takes one subscriber: a finalize still waiting is off */
    if (r->subscribe_v2 != NULL)
        status = r->subscribe_v2(&subscriber, on_api, r, &params);
    else
        status = r->subscribe(&subscriber, on_api, r);
    Py_END_ALLOW_THREADS
    if (status == KN_CUPTI_SUCCESS) {
        r->subscriber = subscriber;
        Py_INCREF(r); /* CUPTI holds it as userdata until unsubscribe() */
    }
    holder[sizeof holder - 1] = '\0';
    if (holder[0] == '\0')
        return Py_BuildValue("(kO)", (unsigned long)status, Py_None);
    return Py_BuildValue("(ks)", (unsigned long)status, holder);
}

/* enable(domain, cbid, api) -> status: CUPTI calls back at that API, recorded as api. */
static PyObject *
recorder_enable(Recorder *r, PyObject *args)
{
    unsigned int domain, cbid;
    int api;
    if (!PyArg_ParseTuple(args, "IIi:enable", &domain, &cbid, &api) || check_api(r, api) < 0)
        return NULL;
    if (domain != KN_CUPTI_CB_DOMAIN_DRIVER_API && domain != KN_CUPTI_CB_DOMAIN_RUNTIME_API) {
        PyErr_Format(PyExc_ValueError, "domain %u is not the driver's (1) or the runtime's (2)",
                     domain);
        return NULL;
    }
    if (r->subscriber == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "enable() before subscribe()");
        return NULL;
    }
    if (cbid >= MAX_CBID) {
        PyErr_Format(PyExc_ValueError, "callback id %u is past the %d kname has room for", cbid,
                     MAX_CBID);
        return NULL;
    }
    /* before CUPTI may call back with it */
    r->apis_of[domain][cbid] = (uint16_t)((api + 1) | (r->graph_of[api] ? GRAPH_API : 0));
    kn_CUptiResult status;
    kn_SubscriberHandle subscriber = r->subscriber;
    Py_BEGIN_ALLOW_THREADS
    status = r->enable_callback(1, subscriber, domain, cbid);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(status);
}

/* enable_graph(cbid, event) -> status: CUPTI calls back at that resource callback, kept as
 * node event `event` (1 to NODE_EVENT_COUNT: GRAPH_EVENTS' numbers, from 1). */
static PyObject *
recorder_enable_graph(Recorder *r, PyObject *args)
{
    unsigned int cbid;
    int event;
    if (!PyArg_ParseTuple(args, "Ii:enable_graph", &cbid, &event))
        return NULL;
    if (event < 1 || event > NODE_EVENT_COUNT || cbid >= MAX_RESOURCE_CBID) {
        PyErr_Format(PyExc_ValueError, "enable_graph: event must be 1 to %d, cbid below %d",
                     NODE_EVENT_COUNT, MAX_RESOURCE_CBID);
        return NULL;
    }
    if (r->subscriber == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "enable_graph() before subscribe()");
        return NULL;
    }
    if (r->get_graph_node_id == NULL) {
        kn_GetGraphNodeId node_id = (kn_GetGraphNodeId)symbol(r, "cuptiGetGraphNodeId");
        kn_GetGraphId graph_id = (kn_GetGraphId)symbol(r, "cuptiGetGraphId");
        if (node_id == NULL || graph_id == NULL)
            return NULL;
        r->get_graph_id = graph_id;
        r->get_graph_exec_id = (kn_GetGraphExecId)dlsym(r->library, "cuptiGetGraphExecId");
        r->get_graph_node_id = node_id; /* last: the callback reads the others once it is set */
    }
    r->graph_events[cbid] = (uint8_t)event; /* before CUPTI may call back with it */
    kn_CUptiResult status;
    kn_SubscriberHandle subscriber = r->subscriber;
    Py_BEGIN_ALLOW_THREADS
    status = r->enable_callback(1, subscriber, KN_CUPTI_CB_DOMAIN_RESOURCE, cbid);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(status);
}

/* unsubscribe() -> status: no callback after it; nothing touches Python from now on. */
static PyObject *
recorder_unsubscribe(Recorder *r, PyObject *unused)
{
    (void)unused;
    atomic_store(&r->stopped, 1);
    if (r->subscriber == NULL)
        return PyLong_FromLong(0);
    kn_SubscriberHandle subscriber = r->subscriber;
    kn_CUptiResult status;
    /* Without the GIL: a callback in flight on another thread may be waiting for it. */
    Py_BEGIN_ALLOW_THREADS
    status = r->unsubscribe(subscriber);
    Py_END_ALLOW_THREADS
    r->subscriber = NULL;
    Py_DECREF(r);
    return PyLong_FromUnsignedLong(status);
}

static PyMethodDef recorder_methods[] = {
    {"enter", (PyCFunction)recorder_enter, METH_VARARGS,
     "enter(correlation_id, api, timestamp): a launch API call starts on this thread, made by "
     "the running Python frame (what the CUPTI callback does at API enter)."},
    {"exit", (PyCFunction)recorder_exit, METH_VARARGS,
     "exit(correlation_id, timestamp): that call returns (what the callback does at API exit)."},
    {"call_without_gil", (PyCFunction)recorder_call_without_gil, METH_VARARGS,
     "call_without_gil(correlation_id, api, start, end, new_thread=False): enter and exit with "
     "the GIL released, as from a library that releases it, or on a new thread that never ran "
     "Python."},
    {"mark", (PyCFunction)recorder_mark, METH_O,
     "mark(name): the launch kname wraps that starts on this thread has this site."},
    {"unmark", (PyCFunction)recorder_unmark, METH_NOARGS, "unmark(): that launch is over."},
    {"time_launches", (PyCFunction)recorder_time_launches, METH_O,
     "time_launches(flag): whether launch calls get CPU timestamps at their enter and exit "
     "(cuptiGetTimestamp, twice a call): only a trace or a stream log reads them (default True)."},
    {"time_outer_launches", (PyCFunction)recorder_time_outer_launches, METH_O,
     "time_outer_launches(flag): whether outermost launch calls get CPU timestamps at their "
     "enter and exit (the launch-bound verdict's CPU time; default False)."},
    {"set_frameless", (PyCFunction)recorder_set_frameless, METH_O,
     "set_frameless(name or None): a launch with no Python frame has this site from now on "
     "(None: no_frame)."},
    {"set_frameless_namer", (PyCFunction)recorder_set_frameless_namer, METH_O,
     "set_frameless_namer(namer or None): a launch set_frameless names is named "
     "namer(that name) instead, asked under the GIL (None: not asked)."},
    {"drain", (PyCFunction)recorder_drain, METH_O,
     "drain(make_record) -> list: the finished calls, as make_record(correlation_id, thread, "
     "site, api, start, end, graph, parent), in the order they finished; open ones stay."},
    {"take_fault", (PyCFunction)recorder_take_fault, METH_NOARGS,
     "take_fault() -> (where, exception) the first time a fault happened, else None."},
    {"take_forgotten", (PyCFunction)recorder_take_forgotten, METH_NOARGS,
     "take_forgotten() -> bool: whether open calls were forgotten (an exit missed) since."},
    {"counts", (PyCFunction)recorder_counts, METH_NOARGS,
     "counts() -> {'finished', 'open', 'dropped', 'graph_nodes', 'graph_nodes_dropped'}: "
     "records waiting, calls open, calls dropped; graph node events waiting, and dropped."},
    {"subscribe", (PyCFunction)recorder_subscribe, METH_VARARGS,
     "subscribe(libcupti_path) -> (status, holder or None)."},
    {"enable", (PyCFunction)recorder_enable, METH_VARARGS,
     "enable(domain, cbid, api) -> status."},
    {"enable_graph", (PyCFunction)recorder_enable_graph, METH_VARARGS,
     "enable_graph(cbid, event) -> status: CUPTI calls back at that graph resource callback, "
     "kept as GRAPH_EVENTS[event - 1]."},
    {"drain_graph_nodes", (PyCFunction)recorder_drain_graph_nodes, METH_O,
     "drain_graph_nodes(make_record) -> list: the graph node events kept, as make_record(event, "
     "node, graph, graph_exec, original, site, correlation_id), in the order they came."},
    {"unsubscribe", (PyCFunction)recorder_unsubscribe, METH_NOARGS, "unsubscribe() -> status."},
    {"finalize_later", (PyCFunction)recorder_finalize_later, METH_NOARGS,
     "finalize_later() -> status: after unsubscribe(), CUPTI is finalized (detached from the "
     "process) at the next driver or runtime API exit."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
recorder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"apis", "sites", "kinds", "site_of_frame", "site_key", "no_frame",
                            "unnamed", "max_pending", "max_open_calls", NULL};
    PyObject *apis, *sites, *kinds, *site_of_frame, *site_key, *no_frame, *unnamed;
    Py_ssize_t max_pending;
    int max_open;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!OOUUni:Recorder", names, &apis,
                                     &PyDict_Type, &sites, &PyDict_Type, &kinds, &site_of_frame,
                                     &site_key, &no_frame, &unnamed, &max_pending, &max_open))
        return NULL;
    if (!PyCallable_Check(site_of_frame)) {
        PyErr_SetString(PyExc_TypeError, "Recorder: site_of_frame must be callable");
        return NULL;
    }
    if (max_open < 1 || max_open > MAX_OPEN || max_pending < 1) {
        PyErr_Format(PyExc_ValueError,
                     "Recorder: max_open_calls must be 1 to %d and max_pending at least 1",
                     MAX_OPEN);
        return NULL;
    }
    PyObject *pairs = PySequence_Tuple(apis);
    if (pairs == NULL)
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(pairs);
    if (count > MAX_APIS) { /* none: a recorder of activity buffers alone */
        Py_DECREF(pairs);
        PyErr_SetString(PyExc_ValueError, "Recorder: apis must be at most 32767 (name, graph) "
                                          "pairs");
        return NULL;
    }
    Recorder *r = (Recorder *)type->tp_alloc(type, 0);
    if (r == NULL) {
        Py_DECREF(pairs);
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->activity_lock, NULL);
    init_record_layout(&r->record_layout, launch_fields);
    init_record_layout(&r->activity_layout, activity_fields);
    init_record_layout(&r->external_layout, external_fields);
    init_record_layout(&r->node_layout, node_fields);
    r->serial = next_serial++;
    atomic_store(&r->timed, 1);
    atomic_store(&r->timed_outer, 0);
    r->forks = atomic_load(&forks);
    r->api_names = PyTuple_New(count);
    r->graph_of = calloc(count ? (size_t)count : 1, 1);
    r->kept = PyDict_New();
    if (r->api_names == NULL || r->graph_of == NULL || r->kept == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name, *graph, *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyArg_ParseTuple(pair, "UO:an api", &name, &graph))
            goto fail;
        int is_graph = PyObject_IsTrue(graph);
        if (is_graph < 0)
            goto fail;
        PyTuple_SET_ITEM(r->api_names, i, Py_NewRef(name));
        r->graph_of[i] = (uint8_t)is_graph;
    }
    r->api_count = count;
    r->sites = Py_NewRef(sites);
    r->kinds = Py_NewRef(kinds);
    r->site_of_frame = Py_NewRef(site_of_frame);
    r->site_key = Py_NewRef(site_key);
    r->no_frame = Py_NewRef(no_frame);
    r->unnamed = Py_NewRef(unnamed);
    if (keep(r, unnamed) == NULL || keep(r, no_frame) == NULL)
        goto fail;
    r->max_pending = max_pending;
    r->max_open = max_open;
    r->remember = follow_changes(sites) && follow_changes(kinds);
    Py_DECREF(pairs);
    return (PyObject *)r;
fail:
    Py_DECREF(pairs);
    Py_DECREF(r);
    return NULL;
}

static int
recorder_traverse(Recorder *r, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(r));
    Py_VISIT(r->api_names);
    Py_VISIT(r->sites);
    Py_VISIT(r->kinds);
    Py_VISIT(r->site_of_frame);
    Py_VISIT(r->frameless_namer);
    Py_VISIT(r->site_key);
    Py_VISIT(r->no_frame);
    Py_VISIT(r->unnamed);
    Py_VISIT(r->kept);
    Py_VISIT(r->fault);
    Py_VISIT(r->record_layout.type);
    Py_VISIT(r->activity_layout.type);
    Py_VISIT(r->external_layout.type);
    Py_VISIT(r->node_layout.type);
    Py_VISIT(r->on_buffer);
    for (int i = 0; i < COPY_KINDS; i++)
        Py_VISIT(r->copy_names[i]);
    return 0;
}

static int
recorder_clear(Recorder *r)
{
    /* The records point into `kept`: none may be read once it goes. */
    forget_finished(r);
    pthread_mutex_lock(&r->lock);
    r->node_event_count = 0;
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_lock(&r->activity_lock);
    r->trace.launch_count = r->trace.node_count = 0;
    pthread_mutex_unlock(&r->activity_lock);
    memset(r->recent, 0, sizeof r->recent);
    Py_CLEAR(r->api_names);
    Py_CLEAR(r->sites);
    Py_CLEAR(r->kinds);
    atomic_store(&r->has_frameless_namer, 0);
    Py_CLEAR(r->frameless_namer);
    Py_CLEAR(r->site_of_frame);
    Py_CLEAR(r->site_key);
    Py_CLEAR(r->no_frame);
    Py_CLEAR(r->unnamed);
    Py_CLEAR(r->kept);
    Py_CLEAR(r->fault);
    Py_CLEAR(r->record_layout.type);
    Py_CLEAR(r->activity_layout.type);
    Py_CLEAR(r->external_layout.type);
    Py_CLEAR(r->node_layout.type);
    r->record_layout.fast = r->activity_layout.fast = r->external_layout.fast = 0;
    r->node_layout.fast = 0;
    Py_CLEAR(r->on_buffer); /* never the owner's: CUPTI's hold keeps the owner reachable */
    for (int i = 0; i < COPY_KINDS; i++)
        Py_CLEAR(r->copy_names[i]);
    for (size_t i = 0; i < r->name_objects_room; i++)
        Py_CLEAR(r->name_objects[i]);
    return 0;
}

static void
recorder_dealloc(Recorder *r)
{
    /* Never while subscribed: CUPTI then holds a reference (see subscribe). */
    PyObject_GC_UnTrack(r);
    recorder_clear(r);
    free_buffers(r);
    free(r->node_events);
    free(r->graph_of);
    free(r->gpu);
    free(r->name_objects);
    names_free(&r->names);
    join_free(&r->join);
    trace_free(&r->trace);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->activity_lock);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.Recorder",
    .tp_doc = "Recorder(apis, sites, kinds, site_of_frame, site_key, no_frame, unnamed, "
              "max_pending, max_open_calls): kname profile's CUPTI launch callback (see "
              "kname/profiling/_cupti_c/recorder.h).",
    .tp_basicsize = sizeof(Recorder),
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)recorder_traverse,
    .tp_clear = (inquiry)recorder_clear,
    .tp_methods = recorder_methods,
    .tp_new = recorder_new,
};

/* ------------------------------------------------------------------ the module's part */

int
recorder_ready(PyObject *module)
{
    if (PyType_Ready(&RecorderType) < 0 || PyModule_AddFunctions(module, teardown_functions) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Recorder", (PyObject *)&RecorderType);
}
