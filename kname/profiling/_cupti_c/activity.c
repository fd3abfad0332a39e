/*
 * kname._native_cupti's activity buffers (see recorder.h): CUPTI's buffer callbacks, each
 * buffer read into GPU records without the GIL (kernel names copied once each), then handed to
 * the join in C or, with the GIL, to Python's (drain_activities); and the Recorder's methods for
 * them and for the join in C.
 */
#include "profiling/_cupti_c/recorder.h"

#include <stdlib.h>
#include <string.h>

static const char READING[] = "reading CUPTI's activity records";

/* ------------------------------------------------------------------ activity buffers */

/* CUPTI's buffer callbacks take no userdata: the recorder they feed is `buffers_owner`, held (a
 * strong reference) from take_activity_buffers() to release_activity_buffers(). The lock is held
 * while a buffer is read and handed over, which takes the GIL: Python code takes the lock only
 * with the GIL released. */
static pthread_mutex_t buffers_lock = PTHREAD_MUTEX_INITIALIZER;
static Recorder *buffers_owner;
static atomic_size_t buffer_bytes;

/* ---- reading a buffer: under r->activity_lock */

static int
gpu_kind_of(uint32_t cupti_kind)
{
    switch (cupti_kind) {
    case KN_CUPTI_ACTIVITY_KIND_KERNEL:
    case KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return GPU_KERNEL;
    case KN_CUPTI_ACTIVITY_KIND_MEMCPY:
        return GPU_MEMCPY;
    case KN_CUPTI_ACTIVITY_KIND_MEMSET:
        return GPU_MEMSET;
    case KN_CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return GPU_EXTERNAL;
    default:
        return 0;
    }
}

/* Room for one more GPU record: 1, or 0 (past max_gpu, or no memory). */
static int
gpu_room(Recorder *r)
{
    if (r->gpu_count < r->gpu_capacity)
        return 1;
    if (r->gpu_count >= r->max_gpu)
        return 0;
    Py_ssize_t capacity = r->gpu_capacity ? 2 * r->gpu_capacity : FIRST_GPU_ROOM;
    if (capacity > r->max_gpu)
        capacity = r->max_gpu;
    GpuRecord *grown = realloc(r->gpu, (size_t)capacity * sizeof *grown);
    if (grown == NULL) {
        note_c_fault(r, READING, "no memory for another GPU record", 0);
        return 0;
    }
    r->gpu = grown;
    r->gpu_capacity = capacity;
    return 1;
}

/* The fields every kind of GPU work has, under the same names in CUPTI's records of each. */
#define COPY_WORK(g, work)                                                                     \
    do {                                                                                       \
        (g)->start = (work)->start;                                                            \
        (g)->end = (work)->end;                                                                \
        (g)->correlation_id = (work)->correlationId;                                           \
        (g)->stream = (work)->streamId;                                                        \
        (g)->device = (work)->deviceId;                                                        \
        (g)->graph_id = (work)->graphId;                                                       \
        (g)->graph_node_id = (work)->graphNodeId;                                              \
    } while (0)

/* A MEMORY2 record (--memory), kept for Python's memory join. */
static void
keep_memory_record(Recorder *r, const kn_ActivityMemory *m)
{
    MemoryFact fact = {
        .address = m->address,
        .bytes = m->bytes,
        .timestamp = m->timestamp,
        .correlation_id = m->correlationId,
        .device = m->deviceId,
        .stream = m->streamId,
        .memory_kind = m->memoryKind,
        .allocation = m->memoryOperationType == KN_CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
        .is_async = m->isAsync != 0,
    };
    memory_keep_fact(&r->join.memory, &fact);
}

static void
keep_record(Recorder *r, const kn_Activity *record)
{
    if (record->kind == KN_CUPTI_ACTIVITY_KIND_MEMORY2) {
        if (r->join.memory.on)
            keep_memory_record(r, (const kn_ActivityMemory *)record);
        return;
    }
    int kind = gpu_kind_of(record->kind);
    if (kind == 0)
        return; /* a kind kname does not read (an API record, say) */
    if (!gpu_room(r)) {
        r->gpu_dropped++;
        return;
    }
    GpuRecord *g = &r->gpu[r->gpu_count++];
    memset(g, 0, sizeof *g);
    g->kind = (uint8_t)kind;
    if (kind == GPU_KERNEL) {
        const kn_ActivityKernel *k = (const kn_ActivityKernel *)record;
        COPY_WORK(g, k);
        g->detail = intern_name(&r->names, k->name);
    }
    else if (kind == GPU_MEMCPY) {
        const kn_ActivityMemcpy *m = (const kn_ActivityMemcpy *)record;
        COPY_WORK(g, m);
        g->detail = m->copyKind;
    }
    else if (kind == GPU_MEMSET) {
        const kn_ActivityMemset *m = (const kn_ActivityMemset *)record;
        COPY_WORK(g, m);
    }
    else {
        const kn_ActivityExternalCorrelation *e = (const kn_ActivityExternalCorrelation *)record;
        g->correlation_id = e->correlationId;
        g->start = e->externalId;
    }
}

static void
read_buffer(Recorder *r, uint8_t *buffer, size_t valid)
{
    kn_Activity *record = NULL;
    size_t dropped = 0;
    pthread_mutex_lock(&r->activity_lock);
    for (;;) {
        kn_CUptiResult status = r->get_next_record(buffer, valid, &record);
        if (status != KN_CUPTI_SUCCESS) {
            /* The end of the buffer, or (INVALID_KIND) a record CUPTI did not finish. */
            if (status != KN_CUPTI_ERROR_MAX_LIMIT_REACHED && status != KN_CUPTI_ERROR_INVALID_KIND)
                note_c_fault(r, READING, "cuptiActivityGetNextRecord failed", (long)status);
            break;
        }
        keep_record(r, record);
    }
    if (r->get_num_dropped(NULL, 0, &dropped) == KN_CUPTI_SUCCESS)
        r->cupti_dropped += dropped;
    pthread_mutex_unlock(&r->activity_lock);
}

/* With the join in C: the calls finished so far, the graph node events, then the GPU records
 * read, joined (what the collector does with a buffer on the Python join), and kept for the trace
 * when it is kept (memory calls too, which the join keeps apart). Any thread, no GIL. Whether
 * memory calls or records wait for Python (drain_memory). */
static int
join_buffer(Recorder *r)
{
    int memory_waiting;
    pthread_mutex_lock(&r->activity_lock);
    if (r->join.on) {
        Py_ssize_t count;
        Launch *taken = take_finished(r, &count);
        if (count && taken == NULL)
            r->join.no_memory = 1; /* they stay for the next buffer */
        if (taken != NULL) {
            trace_launches(&r->trace, taken, count);
            join_launches(&r->join, taken, count, r->no_frame);
        }
        free(taken);
        NodeEvent *events = take_node_events(r, &count);
        if (count && events == NULL)
            r->join.no_memory = 1;
        if (events != NULL) {
            trace_nodes(&r->trace, events, count);
            join_graph_nodes(&r->join, events, count, r->no_frame);
        }
        free(events);
        trace_work(&r->trace, r->gpu, r->gpu_count);
        join_records(&r->join, r->gpu, r->gpu_count);
        r->gpu_count = 0;
    }
    memory_waiting = r->join.memory.call_count || r->join.memory.fact_count;
    pthread_mutex_unlock(&r->activity_lock);
    return memory_waiting;
}

/* ---- CUPTI's buffer callbacks (any thread; CUPTI's own, mostly) */

static void
buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    size_t bytes = atomic_load(&buffer_bytes);
    void *memory = NULL;
    if (bytes == 0 || posix_memalign(&memory, KN_CUPTI_ACTIVITY_RECORD_ALIGNMENT, bytes) != 0)
        memory = NULL; /* declined: CUPTI counts what it drops */
    *buffer = memory;
    *size = memory != NULL ? bytes : 0;
    *max_records = 0; /* as many as fit */
}

/* on_buffer() with the GIL: the records read so far go to the join. */
static void
hand_over(Recorder *r)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *pending = take_error();
    PyObject *result = PyObject_CallNoArgs(r->on_buffer);
    if (result == NULL)
        note_fault(r, READING);
    Py_XDECREF(result);
    restore_error(pending);
    PyGILState_Release(gil);
}

static void
buffer_completed(kn_CUcontext context, uint32_t stream, uint8_t *buffer, size_t size,
                 size_t valid)
{
    (void)context;
    (void)stream;
    (void)size;
    pthread_mutex_lock(&buffers_lock);
    Recorder *r = buffers_owner;
    /* In a child forked from the owner's process, nothing is recorded (CUPTI does not follow). */
    if (r != NULL && buffer != NULL && atomic_load(&forks) == r->forks) {
        read_buffer(r, buffer, valid);
        /* join.on is set before the buffers are taken, never unset. With it, on_buffer (if any)
         * takes the memory calls and records alone, called only when some wait. */
        int hand = r->join.on ? join_buffer(r) : 1;
        if (hand && r->on_buffer != NULL && !must_not_touch_python(r))
            hand_over(r);
    }
    pthread_mutex_unlock(&buffers_lock);
    free(buffer);
}

/* ---- Python methods */

static int
release_buffers(Recorder *r)
{
    int owned = 0;
    PyObject *callback;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&buffers_lock);
    if (buffers_owner == r) {
        buffers_owner = NULL;
        owned = 1;
    }
    callback = r->on_buffer;
    r->on_buffer = NULL;
    pthread_mutex_unlock(&buffers_lock);
    Py_END_ALLOW_THREADS
    Py_XDECREF(callback);
    if (owned)
        Py_DECREF(r);
    return owned;
}

/* take_activity_buffers(buffer_bytes, max_records, on_buffer) -> status */
static PyObject *
recorder_take_activity_buffers(Recorder *r, PyObject *args)
{
    Py_ssize_t bytes, max_records;
    PyObject *on_buffer;
    if (!PyArg_ParseTuple(args, "nnO:take_activity_buffers", &bytes, &max_records, &on_buffer))
        return NULL;
    if (on_buffer != Py_None && !PyCallable_Check(on_buffer)) {
        PyErr_SetString(PyExc_TypeError, "take_activity_buffers: on_buffer must be callable");
        return NULL;
    }
    if (bytes < 1024 || max_records < 1) {
        PyErr_SetString(PyExc_ValueError, "take_activity_buffers: buffer_bytes must be at least "
                                          "1024 and max_records at least 1");
        return NULL;
    }
    if (r->library == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "take_activity_buffers() before subscribe()");
        return NULL;
    }
    r->register_callbacks =
        (kn_ActivityRegisterCallbacks)symbol(r, "cuptiActivityRegisterCallbacks");
    r->get_next_record = (kn_ActivityGetNextRecord)symbol(r, "cuptiActivityGetNextRecord");
    r->get_num_dropped =
        (kn_ActivityGetNumDroppedRecords)symbol(r, "cuptiActivityGetNumDroppedRecords");
    r->flush_all = (kn_ActivityFlushAll)symbol(r, "cuptiActivityFlushAll");
    if (!r->register_callbacks || !r->get_next_record || !r->get_num_dropped || !r->flush_all)
        return NULL;
    pthread_mutex_lock(&r->activity_lock);
    int ready = names_init(&r->names);
    r->max_gpu = max_records;
    pthread_mutex_unlock(&r->activity_lock);
    if (!ready)
        return PyErr_NoMemory();

    PyObject *callback = on_buffer == Py_None ? NULL : Py_NewRef(on_buffer);
    Recorder *previous;
    kn_CUptiResult status;
    Py_INCREF(r); /* held as the owner */
    atomic_store(&buffer_bytes, (size_t)bytes);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&buffers_lock);
    previous = buffers_owner;
    buffers_owner = r;
    PyObject *replaced = r->on_buffer;
    r->on_buffer = callback;
    callback = replaced;
    pthread_mutex_unlock(&buffers_lock);
    status = r->register_callbacks(buffer_requested, buffer_completed);
    Py_END_ALLOW_THREADS
    Py_XDECREF(callback);
    Py_XDECREF(previous);
    if (status != KN_CUPTI_SUCCESS)
        release_buffers(r);
    return PyLong_FromUnsignedLong(status);
}

/* release_activity_buffers() -> bool: later buffers are freed unread; whether this recorder had
 * them. */
static PyObject *
recorder_release_activity_buffers(Recorder *r, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(release_buffers(r));
}

/* flush_activities(flag) -> status: cuptiActivityFlushAll(flag), the GIL released (the buffers
 * it completes are handed over, on this thread or CUPTI's). */
static PyObject *
recorder_flush_activities(Recorder *r, PyObject *args)
{
    unsigned int flag;
    if (!PyArg_ParseTuple(args, "I:flush_activities", &flag))
        return NULL;
    if (r->flush_all == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "flush_activities() before take_activity_buffers()");
        return NULL;
    }
    kn_CUptiResult status;
    Py_BEGIN_ALLOW_THREADS
    status = r->flush_all(flag);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(status);
}

/* drain_activities(make_activity, make_external, memcpy_name) -> (work, externals) */
static PyObject *
recorder_drain_activities(Recorder *r, PyObject *args)
{
    PyObject *make_activity, *make_external, *memcpy_name;
    if (!PyArg_ParseTuple(args, "OOO:drain_activities", &make_activity, &make_external,
                          &memcpy_name))
        return NULL;
    Py_ssize_t count = 0, externals = 0;
    GpuRecord *taken = NULL;
    if (atomic_load(&forks) == r->forks) { /* a forked child: its parent reports them */
        pthread_mutex_lock(&r->activity_lock);
        taken = r->gpu;
        count = r->gpu_count;
        r->gpu = NULL;
        r->gpu_count = r->gpu_capacity = 0;
        pthread_mutex_unlock(&r->activity_lock);
    }
    for (Py_ssize_t i = 0; i < count; i++)
        externals += taken[i].kind == GPU_EXTERNAL;
    PyObject *lists[2] = {PyList_New(count - externals), PyList_New(externals)};
    Py_ssize_t filled[2] = {0, 0};
    for (Py_ssize_t i = 0; lists[0] != NULL && lists[1] != NULL && i < count; i++) {
        PyObject *record = gpu_object(r, &taken[i], make_activity, make_external, memcpy_name);
        if (record == NULL) {
            Py_CLEAR(lists[0]);
            break;
        }
        int which = taken[i].kind == GPU_EXTERNAL;
        PyList_SET_ITEM(lists[which], filled[which]++, record);
    }
    free(taken);
    if (lists[0] == NULL || lists[1] == NULL) {
        Py_XDECREF(lists[0]);
        Py_XDECREF(lists[1]);
        return NULL;
    }
    return Py_BuildValue("(NN)", lists[0], lists[1]);
}

static PyObject *
recorder_activity_counts(Recorder *r, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&r->activity_lock);
    Py_ssize_t waiting = r->gpu_count;
    unsigned long long dropped = r->gpu_dropped, cupti_dropped = r->cupti_dropped;
    unsigned long long past_bound = r->names.past_bound;
    Py_ssize_t names = r->names.count ? (Py_ssize_t)(r->names.count - FIRST_NAME) : 0;
    pthread_mutex_unlock(&r->activity_lock);
    return Py_BuildValue("{snsKsKsnsK}", "waiting", waiting, "dropped", dropped, "cupti_dropped",
                         cupti_dropped, "names", names, "names_past_bound", past_bound);
}

/* ---- the join in C, from Python */

/* join_in_c(max_pending, recent_window, unattributed, max_nodes, recent_nodes): from now on
 * the GPU records are joined here (join.py's bounds, graphs.py's for graph nodes;
 * `unattributed`, its name for what no launch claims), not handed over; take_activity_buffers()
 * follows, with no on_buffer. */
static PyObject *
recorder_join_in_c(Recorder *r, PyObject *args)
{
    Py_ssize_t max_pending, recent_window, max_nodes, recent_nodes;
    PyObject *unattributed;
    if (!PyArg_ParseTuple(args, "nnUnn:join_in_c", &max_pending, &recent_window, &unattributed,
                          &max_nodes, &recent_nodes))
        return NULL;
    if (max_pending < 1 || recent_window < 1 || max_nodes < 0 || recent_nodes < 0) {
        PyErr_SetString(PyExc_ValueError, "join_in_c: max_pending and recent_window must be at "
                                          "least 1, max_nodes and recent_nodes at least 0");
        return NULL;
    }
    PyObject *kept = keep(r, unattributed);
    if (kept == NULL)
        return NULL;
    pthread_mutex_lock(&r->activity_lock);
    r->join.max_pending = max_pending;
    r->join.recent_window = recent_window;
    r->join.unattributed = kept;
    r->join.nodes.max_nodes = max_nodes;
    r->join.nodes.recent_nodes = recent_nodes;
    r->join.on = 1;
    /* Launch times are counted where outermost calls are timed for them (the verdict). */
    r->join.times_on = atomic_load(&r->timed_outer);
    pthread_mutex_unlock(&r->activity_lock);
    Py_RETURN_NONE;
}

/* join_now(): the calls finished and the GPU records read so far, joined now. */
static PyObject *
recorder_join_now(Recorder *r, PyObject *unused)
{
    (void)unused;
    if (atomic_load(&forks) == r->forks) /* a forked child: its parent reports them */
        (void)join_buffer(r);
    Py_RETURN_NONE;
}

/* ---- --memory: memory calls and records for Python's memory join */

/* keep_memory(is_memory_api, max_waiting): by api index, which APIs allocate or free (bytes of 0
 * and 1): with the join in C, their calls are kept apart from the launches; CUPTI's memory
 * records are read from now on. Before take_activity_buffers(). */
static PyObject *
recorder_keep_memory(Recorder *r, PyObject *args)
{
    Py_buffer flags;
    Py_ssize_t max_waiting;
    if (!PyArg_ParseTuple(args, "y*n:keep_memory", &flags, &max_waiting))
        return NULL;
    if (flags.len != r->api_count || max_waiting < 1) {
        PyBuffer_Release(&flags);
        PyErr_SetString(PyExc_ValueError, "keep_memory: one flag per api, and max_waiting at "
                                          "least 1");
        return NULL;
    }
    uint8_t *copy = malloc(flags.len ? (size_t)flags.len : 1);
    if (copy == NULL) {
        PyBuffer_Release(&flags);
        return PyErr_NoMemory();
    }
    memcpy(copy, flags.buf, (size_t)flags.len);
    PyBuffer_Release(&flags);
    pthread_mutex_lock(&r->activity_lock);
    MemoryWaiting *m = &r->join.memory;
    free(m->is_memory_api);
    m->is_memory_api = copy;
    m->api_count = (size_t)r->api_count;
    m->max_waiting = (size_t)max_waiting;
    m->on = 1;
    pthread_mutex_unlock(&r->activity_lock);
    Py_RETURN_NONE;
}

/* drain_memory() -> (calls, records, dropped): the memory calls kept apart [(correlation_id,
 * site)] and CUPTI's memory records [(correlation_id, allocation, memory_kind, address, bytes,
 * timestamp, device, stream, is_async)] so far, and how many of both were not kept (ever). */
static PyObject *
recorder_drain_memory(Recorder *r, PyObject *unused)
{
    (void)unused;
    MemoryWaiting taken = {0};
    pthread_mutex_lock(&r->activity_lock);
    MemoryWaiting *m = &r->join.memory;
    taken.dropped = m->dropped;
    if (atomic_load(&forks) == r->forks) { /* a forked child: its parent reports them */
        taken.calls = m->calls;
        taken.call_count = m->call_count;
        taken.facts = m->facts;
        taken.fact_count = m->fact_count;
        m->calls = NULL;
        m->facts = NULL;
        m->call_count = m->call_room = m->fact_count = m->fact_room = 0;
    }
    pthread_mutex_unlock(&r->activity_lock);
    return memory_drained(taken.calls, taken.call_count, taken.facts, taken.fact_count,
                          (unsigned long long)taken.dropped);
}

static PyObject *
recorder_join_counts(Recorder *r, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&r->activity_lock);
    const Join *j = &r->join;
    PyObject *counts = Py_BuildValue(
        "{sKsKsKsnsnsnsnsnsnsisisnsnsKsi}", "launches", j->launch_count, "records",
        j->record_count, "dropped", j->dropped, "pending", (Py_ssize_t)j->pending.live,
        "children", (Py_ssize_t)j->children.live, "recent", (Py_ssize_t)j->recent.live,
        "externals", (Py_ssize_t)j->externals.live, "orphans", (Py_ssize_t)j->orphan_count,
        "graphs", (Py_ssize_t)j->graphs.live, "trimmed", j->trimmed, "no_memory",
        j->no_memory || j->nodes.no_memory, "nodes", (Py_ssize_t)j->nodes.live, "nodes_kept",
        (Py_ssize_t)j->nodes.kept, "nodes_not_kept", (unsigned long long)j->nodes.not_kept,
        "nodes_capped", j->nodes.capped);
    pthread_mutex_unlock(&r->activity_lock);
    return counts;
}

static PyObject *
work_name(Recorder *r, PyObject *memcpy_name, uint32_t work)
{
    if (work == WORK_MEMSET)
        return Py_NewRef(str_memset_name);
    if (work & WORK_MEMCPY)
        return copy_name(r, memcpy_name, work & ~WORK_MEMCPY);
    return kernel_name(r, work);
}

/* (first, [(kernel name, launches, gpu_ns)], [(replay site, launches, gpu_ns)],
 * (unseen launches, unseen gpu_ns), (launch calls, their CPU ns, idle ns)) of one site of the
 * snapshot. */
static PyObject *
site_object(Recorder *r, PyObject *memcpy_name, const Snapshot *s, const SiteCount *site)
{
    PyObject *kernels = PyList_New((Py_ssize_t)site->count);
    for (size_t i = 0; kernels != NULL && i < site->count; i++) {
        const KernelCount *k = &s->kernels[site->start + i];
        PyObject *name = work_name(r, memcpy_name, k->work);
        PyObject *kernel = name == NULL ? NULL
                                        : Py_BuildValue("(NKK)", name, k->launches, k->gpu_ns);
        if (kernel == NULL)
            Py_CLEAR(kernels);
        else
            PyList_SET_ITEM(kernels, (Py_ssize_t)i, kernel);
    }
    PyObject *replays = kernels == NULL ? NULL : PyList_New((Py_ssize_t)site->replay_count);
    for (size_t i = 0; replays != NULL && i < site->replay_count; i++) {
        const ReplayCount *c = &s->replays[site->replay_start + i];
        PyObject *replay = Py_BuildValue("(OKK)", (PyObject *)c->replay, c->launches, c->gpu_ns);
        if (replay == NULL)
            Py_CLEAR(replays);
        else
            PyList_SET_ITEM(replays, (Py_ssize_t)i, replay);
    }
    if (replays == NULL) {
        Py_XDECREF(kernels);
        return NULL;
    }
    return Py_BuildValue("(kNN(KK)(KKK))", (unsigned long)site->first, kernels, replays,
                         site->unseen_launches, site->unseen_gpu_ns, site->launch_calls,
                         site->launch_cpu_ns, site->idle_ns);
}

/* join_profile(memcpy_name) -> (sites, unattributed, unmatched, dropped, earlier): the join's
 * Profile, as plain values: sites [(name, first, kernels)], unattributed (first, kernels). */
static PyObject *
recorder_join_profile(Recorder *r, PyObject *memcpy_name)
{
    Snapshot s;
    pthread_mutex_lock(&r->activity_lock);
    int made = join_snapshot(&r->join, &s);
    pthread_mutex_unlock(&r->activity_lock);
    if (!made) {
        snapshot_free(&s);
        return PyErr_NoMemory();
    }
    PyObject *sites = PyList_New((Py_ssize_t)s.site_count);
    for (size_t i = 0; sites != NULL && i < s.site_count; i++) {
        PyObject *site = site_object(r, memcpy_name, &s, &s.sites[i]);
        PyObject *named = site == NULL ? NULL
                                       : Py_BuildValue("(ON)", (PyObject *)s.sites[i].site, site);
        if (named == NULL)
            Py_CLEAR(sites);
        else
            PyList_SET_ITEM(sites, (Py_ssize_t)i, named);
    }
    PyObject *unattributed = sites ? site_object(r, memcpy_name, &s, &s.unattributed) : NULL;
    PyObject *profile = NULL;
    if (unattributed != NULL)
        profile = Py_BuildValue("(NNKKK)", sites, unattributed, s.unmatched, s.dropped,
                                s.earlier);
    else
        Py_XDECREF(sites);
    snapshot_free(&s);
    return profile;
}

/* ------------------------------------------------------------------ the module's part */

static PyMethodDef activity_methods[] = {
    {"take_activity_buffers", (PyCFunction)recorder_take_activity_buffers, METH_VARARGS,
     "take_activity_buffers(buffer_bytes, max_records, on_buffer) -> status: CUPTI's activity "
     "buffers come to this recorder (after subscribe()), are read in C and freed; on_buffer() "
     "(or None) is called with the GIL after each. At most max_records wait for a drain."},
    {"release_activity_buffers", (PyCFunction)recorder_release_activity_buffers, METH_NOARGS,
     "release_activity_buffers() -> bool: buffers completed from now on are freed unread."},
    {"flush_activities", (PyCFunction)recorder_flush_activities, METH_VARARGS,
     "flush_activities(flag) -> status: cuptiActivityFlushAll(flag), without the GIL."},
    {"drain_activities", (PyCFunction)recorder_drain_activities, METH_VARARGS,
     "drain_activities(make_activity, make_external, memcpy_name) -> (work, externals): the GPU "
     "records read so far, as make_activity(kind, correlation_id, name, start, end, stream, "
     "device, graph_id, graph_node_id) and make_external(correlation_id, external_id); "
     "memcpy_name(copy_kind) names a copy (asked once per kind)."},
    {"join_in_c", (PyCFunction)recorder_join_in_c, METH_VARARGS,
     "join_in_c(max_pending, recent_window, unattributed, max_nodes, recent_nodes): GPU records "
     "are joined in C from now on (kname.profiling.join's rules and bounds, graphs.py's for "
     "graph nodes), not handed over."},
    {"join_now", (PyCFunction)recorder_join_now, METH_NOARGS,
     "join_now(): the finished calls, then the GPU records read so far, joined now."},
    {"join_counts", (PyCFunction)recorder_join_counts, METH_NOARGS,
     "join_counts() -> dict: the join's launches and records seen, launches dropped at the "
     "bound, the size of each of its tables, and whether it trimmed or lacked memory."},
    {"join_profile", (PyCFunction)recorder_join_profile, METH_O,
     "join_profile(memcpy_name) -> (sites, unattributed, unmatched, dropped, earlier): the join's "
     "totals: sites [(name, (first, kernels, replays, unseen))], unattributed (first, kernels, "
     "replays, unseen); kernels [(kernel, launches, gpu_ns)], replays [(replay site, launches, "
     "gpu_ns)], unseen (launches, gpu_ns)."},
    {"keep_memory", (PyCFunction)recorder_keep_memory, METH_VARARGS,
     "keep_memory(is_memory_api, max_waiting): CUPTI's memory records are read from now on, and "
     "with the join in C the calls of the APIs flagged (bytes, one per api index) are kept "
     "apart from the launches, for drain_memory(); at most max_waiting of each wait."},
    {"drain_memory", (PyCFunction)recorder_drain_memory, METH_NOARGS,
     "drain_memory() -> (calls, records, dropped): memory calls [(correlation_id, site)], "
     "CUPTI's memory records [(correlation_id, allocation, memory_kind, address, bytes, "
     "timestamp, device, stream, is_async)] so far, and how many were not kept."},
    {"activity_counts", (PyCFunction)recorder_activity_counts, METH_NOARGS,
     "activity_counts() -> {'waiting', 'dropped', 'cupti_dropped', 'names', "
     "'names_past_bound'}: GPU records waiting, not kept past the bound, dropped by CUPTI; kernel "
     "names kept, and kernel records named past their bound."},
    {NULL, NULL, 0, NULL},
};

int
activity_ready(PyTypeObject *recorder)
{
    return add_methods(recorder, activity_methods);
}

/* ------------------------------------------------------------------ forks */

void
activity_in_forked_child(void)
{
    pthread_mutex_init(&buffers_lock, NULL);
}
