/*
 * kname._native_cupti's launch callback (see recorder.h): what CUPTI calls at the enter and
 * the exit of each launch API call (on_api), on the launching thread: the calls open on each
 * thread, their sites (launch_site.c), the buffer the finished calls wait in, and the first
 * fault, kept for take_fault(). And what it calls at CUPTI's graph resource
 * callbacks (graph_event): the node's ids and, for a node made, its site.
 */
#include "profiling/_cupti_c/callback.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char RECORDING[] = "recording a CUDA launch for kname profile";
static const char GRAPHING[] = "recording a CUDA graph node for kname profile";

_Thread_local ThreadCalls *here = NULL;

/* ---- each thread's buffer of finished calls (types.h: ThreadBuffer). Its thread appends
 * without a lock; everything else here runs under r->lock. */

static pthread_key_t thread_end;

/* One holder lets `b` go: the last frees it. Any thread, no lock. */
static void
let_go(ThreadBuffer *b)
{
    if (b != NULL && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free(b->records);
        free(b);
    }
}

/* This thread's calls' hold of their buffer let go (the records stay for the drain). */
static void
let_buffer_go(ThreadCalls *t)
{
    if (t->buffer != NULL)
        let_go(t->buffer);
    t->buffer = NULL;
    t->records = NULL;
    t->written = t->capacity = 0;
}

/* The thread holding `calls` ended: its buffer let go, its calls freed. A launch call made after
 * this on the same thread (from another library's destructor) makes them anew. */
static void
thread_ended(void *calls)
{
    ThreadCalls *t = (ThreadCalls *)calls;
    let_buffer_go(t);
    if (here == t)
        here = NULL;
    free(t);
}

int
thread_end_ready(void)
{
    static int made = 0;
    if (made)
        return 0;
    int failed = pthread_key_create(&thread_end, thread_ended);
    if (failed) {
        errno = failed;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    made = 1;
    return 0;
}

ThreadCalls *
calls_start(Recorder *r)
{
    ThreadCalls *t = here;
    if (t == NULL) {
        t = malloc(sizeof *t);
        if (t == NULL || pthread_setspecific(thread_end, t) != 0) {
            free(t);
            note_c_fault(r, RECORDING, "no memory for a thread's launch calls", 0);
            return NULL;
        }
        t->buffer = NULL;
        here = t;
    }
    else
        let_buffer_go(t); /* another recorder's: its list keeps it while it has records */
    memset(t, 0, offsetof(ThreadCalls, calls));
    t->owner = r->serial;
    t->thread = PyThread_get_thread_ident();
    return t;
}

/* A buffer for this thread, on r's list (NULL: no memory). Under r->lock. */
static ThreadBuffer *
new_buffer(Recorder *r, ThreadCalls *t)
{
    ThreadBuffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    atomic_store(&b->refs, 2);
    b->next = r->buffers;
    r->buffers = b;
    t->buffer = b;
    return b;
}

/* Room for one more record in `b`, full: the drained part's room, else more room, up to
 * max_pending made over every thread. 0: none (no memory: *no_memory). Under r->lock. */
static int
more_room(Recorder *r, ThreadBuffer *b, int *no_memory)
{
    Py_ssize_t count = atomic_load_explicit(&b->count, memory_order_relaxed);
    if (count < b->capacity)
        return 1;
    if (b->consumed > 0) { /* the drained part's room used again: the rest moved down */
        count -= b->consumed;
        memmove(b->records, &b->records[b->consumed], (size_t)count * sizeof(Launch));
        b->consumed = 0;
        atomic_store_explicit(&b->count, count, memory_order_relaxed);
        return 1;
    }
    Py_ssize_t capacity = b->capacity ? 2 * b->capacity : FIRST_ROOM;
    if (capacity - b->capacity > r->max_pending - r->room)
        capacity = b->capacity + (r->max_pending - r->room);
    if (capacity <= b->capacity)
        return 0;
    Launch *grown = realloc(b->records, (size_t)capacity * sizeof(Launch));
    if (grown == NULL) {
        *no_memory = 1;
        return 0;
    }
    r->room += capacity - b->capacity;
    b->records = grown;
    b->capacity = capacity;
    return 1;
}

/* `launch` into this thread's buffer, past its room: under r->lock, a buffer made or room made
 * (or the call dropped, counted). */
static void
append_slowly(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    int no_memory = 0;
    pthread_mutex_lock(&r->lock);
    ThreadBuffer *b = t->buffer != NULL ? t->buffer : new_buffer(r, t);
    if (b != NULL && more_room(r, b, &no_memory)) {
        Py_ssize_t count = atomic_load_explicit(&b->count, memory_order_relaxed);
        b->records[count] = *launch;
        atomic_store_explicit(&b->count, count + 1, memory_order_release);
    }
    else {
        no_memory |= b == NULL;
        r->dropped++;
    }
    if (b != NULL) { /* this thread's view of it, for append() */
        t->records = b->records;
        t->written = atomic_load_explicit(&b->count, memory_order_relaxed);
        t->capacity = b->capacity;
    }
    pthread_mutex_unlock(&r->lock);
    if (no_memory)
        note_c_fault(r, RECORDING, "no memory for another launch record", 0);
}

/* A finished call into this thread's buffer: without a lock while it has room (this thread's
 * view of the buffer is read, the buffer's count only written). */
static inline void
append(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    Py_ssize_t written = t->written;
    if (written < t->capacity) {
        t->records[written] = *launch;
        t->written = written + 1;
        atomic_store_explicit(&t->buffer->count, written + 1, memory_order_release);
        return;
    }
    append_slowly(r, t, launch);
}

/* Calls open on `t` to be recorded at their exit: `delta` more (its thread alone writes it;
 * counts() reads it). 0: no buffer for them (no memory): such a call is not recorded. */
static int
open_calls_change(Recorder *r, ThreadCalls *t, int delta)
{
    ThreadBuffer *b = t->buffer;
    if (b == NULL) {
        pthread_mutex_lock(&r->lock);
        b = new_buffer(r, t);
        pthread_mutex_unlock(&r->lock);
        if (b == NULL) {
            note_c_fault(r, RECORDING, "no memory for another launch record", 0);
            return 0;
        }
    }
    t->open += delta;
    atomic_store_explicit(&b->open, t->open, memory_order_relaxed);
    return 1;
}

/* A call recorded at its exit finished (or was forgotten): into this thread's buffer. */
static void
finish(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    open_calls_change(r, t, -1);
    append(r, t, launch);
}

/* The records `b` holds for the drain, from `consumed`. */
static inline Py_ssize_t
waiting_in(ThreadBuffer *b)
{
    return atomic_load_explicit(&b->count, memory_order_acquire) - b->consumed;
}

/* The buffers of threads that ended, drained, taken off the list and let go. */
static void
drop_ended_buffers(Recorder *r)
{
    for (ThreadBuffer **at = &r->buffers; *at != NULL;) {
        ThreadBuffer *b = *at;
        if (atomic_load_explicit(&b->refs, memory_order_acquire) == 1 && waiting_in(b) == 0) {
            *at = b->next;
            r->room -= b->capacity;
            let_go(b);
        }
        else
            at = &b->next;
    }
}

void
waiting_calls(Recorder *r, Py_ssize_t *finished, Py_ssize_t *open)
{
    *finished = *open = 0;
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next) {
        *finished += waiting_in(b);
        *open += atomic_load_explicit(&b->open, memory_order_relaxed);
    }
}

/* A thread's records waiting for the drain, from `at` to `end`. */
typedef struct {
    const Launch *at, *end;
} Run;

/* The runs, a min-heap by their first record's correlation id: runs[i] sifted down. */
static void
sift_down(Run *runs, size_t n, size_t i)
{
    for (;;) {
        size_t least = i, left = 2 * i + 1, right = left + 1;
        if (left < n && runs[left].at->correlation_id < runs[least].at->correlation_id)
            least = left;
        if (right < n && runs[right].at->correlation_id < runs[least].at->correlation_id)
            least = right;
        if (least == i)
            return;
        Run swap = runs[i];
        runs[i] = runs[least];
        runs[least] = swap;
        i = least;
    }
}

/* The threads' runs merged into `out`, as they would have finished one after the other: each
 * thread's in its own order, the next taken from the thread whose next call entered first
 * (CUPTI numbers the calls as they enter, over every thread). `runs` is used up. */
static void
merge_runs(Run *runs, size_t n, Launch *out)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(runs, n, i);
    while (n > 0) {
        *out++ = *runs[0].at++;
        if (runs[0].at == runs[0].end)
            runs[0] = runs[--n];
        sift_down(runs, n, 0);
    }
}

Launch *
take_finished(Recorder *r, Py_ssize_t *count)
{
    pthread_mutex_lock(&r->lock);
    size_t threads = 0;
    Py_ssize_t total = 0;
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next, threads++)
        total += waiting_in(b);
    Launch *taken = total ? malloc((size_t)total * sizeof(Launch)) : NULL;
    Run *runs = total ? malloc(threads * sizeof(Run)) : NULL;
    *count = total;
    if (taken != NULL && runs != NULL) {
        size_t n = 0;
        Py_ssize_t at = 0;
        for (ThreadBuffer *b = r->buffers; b != NULL && at < total; b = b->next) {
            Py_ssize_t end = atomic_load_explicit(&b->count, memory_order_acquire);
            if (end - b->consumed > total - at) /* written since it was counted */
                end = b->consumed + (total - at);
            if (end > b->consumed)
                runs[n++] = (Run){&b->records[b->consumed], &b->records[end]};
            at += end - b->consumed;
            b->consumed = end;
        }
        merge_runs(runs, n, taken);
    }
    else if (taken != NULL) {
        free(taken);
        taken = NULL;
    }
    if (total == 0 || taken != NULL) /* all drained: the buffers of threads that ended go */
        drop_ended_buffers(r);
    pthread_mutex_unlock(&r->lock);
    free(runs);
    return taken;
}

void
forget_finished(Recorder *r)
{
    pthread_mutex_lock(&r->lock);
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next)
        b->consumed = atomic_load_explicit(&b->count, memory_order_acquire);
    drop_ended_buffers(r);
    pthread_mutex_unlock(&r->lock);
}

void
free_buffers(Recorder *r)
{
    pthread_mutex_lock(&r->lock);
    ThreadBuffer *b = r->buffers;
    r->buffers = NULL;
    r->room = 0;
    pthread_mutex_unlock(&r->lock);
    while (b != NULL) {
        ThreadBuffer *next = b->next;
        let_go(b);
        b = next;
    }
}

NodeEvent *
take_node_events(Recorder *r, Py_ssize_t *count)
{
    pthread_mutex_lock(&r->lock);
    *count = r->node_event_count;
    NodeEvent *taken = *count ? malloc((size_t)*count * sizeof(NodeEvent)) : NULL;
    if (taken != NULL) {
        memcpy(taken, r->node_events, (size_t)*count * sizeof(NodeEvent));
        r->node_event_count = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return taken;
}

/* A graph node event into its buffer, up to max_pending (past that, or with no memory, counted
 * in node_events_dropped). */
static void
keep_node_event(Recorder *r, const NodeEvent *e)
{
    pthread_mutex_lock(&r->lock);
    if (r->node_event_count == r->node_event_capacity && r->node_event_count < r->max_pending) {
        Py_ssize_t capacity = r->node_event_capacity ? 2 * r->node_event_capacity : 256;
        if (capacity > r->max_pending)
            capacity = r->max_pending;
        NodeEvent *grown = realloc(r->node_events, (size_t)capacity * sizeof *grown);
        if (grown != NULL) {
            r->node_events = grown;
            r->node_event_capacity = capacity;
        }
    }
    if (r->node_event_count < r->node_event_capacity)
        r->node_events[r->node_event_count++] = *e;
    else
        r->node_events_dropped++;
    pthread_mutex_unlock(&r->lock);
}


/* ---- enter and exit: what the CUPTI callback calls (and the test methods) */

/* An exit was missed: no stale outer call may name later launches. The recorded ones are kept
 * with no end time, as the Python capture keeps them. */
static void
forget_open_calls(Recorder *r, ThreadCalls *t)
{
    for (int i = 0; i < t->count; i++) {
        if (t->calls[i].recorded)
            finish(r, t, &t->calls[i].launch);
    }
    t->count = 0;
    pthread_mutex_lock(&r->lock);
    r->forgot_open_calls = 1;
    pthread_mutex_unlock(&r->lock);
}

/* A launch API call starts on this thread (`t`): its site, and the call open until its exit.
 * `graph`: the api launches a graph. With `at_enter` it is recorded now (nothing at its exit
 * needs it: no end time is taken), and its exit only closes it; else it is recorded at its
 * exit. */
static void
enter_call(Recorder *r, ThreadCalls *t, uint32_t correlation_id, int api, int graph,
           uint64_t timestamp, int at_enter)
{
    if (t->count >= r->max_open)
        forget_open_calls(r, t);
    Launch launch = {timestamp, 0, t->thread, NULL, correlation_id, 0, (uint16_t)api,
                     (uint8_t)graph};
    if (t->count > 0) {
        const Launch *outer = &t->calls[t->count - 1].launch;
        launch.site = outer->site;
        launch.parent = outer->correlation_id;
    }
    else if (t->wrapped != NULL) {
        launch.site = t->wrapped; /* inside a launch kname wraps: its push said the site */
    }
    else {
        launch.site = site_here(r, t);
        if (launch.site == NULL) /* no Python frame: autograd's threads, in a backward pass */
            launch.site = frameless_site(r, t);
        if (t->count >= r->max_open) /* Python ran meanwhile, and launched more */
            forget_open_calls(r, t);
    }
    OpenCall *call = &t->calls[t->count++];
    call->launch = launch;
    if (at_enter) {
        append(r, t, &launch);
        call->recorded = 0; /* in the buffer already: its exit has nothing to add */
    }
    else
        call->recorded = open_calls_change(r, t, 1);
    atomic_store_explicit(&r->last_correlation_id, correlation_id, memory_order_relaxed);
}

void
launch_enter(Recorder *r, uint32_t correlation_id, int api, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    if (t != NULL)
        enter_call(r, t, correlation_id, api, r->graph_of[api], timestamp, 0);
}

/* The open call `correlation_id` of this thread, taken off its list (the innermost, as calls
 * nest, without a copy: read it before the thread's next enter); NULL: none open. */
static inline OpenCall *
take_open_call(ThreadCalls *t, uint32_t correlation_id)
{
    int last = t->count - 1;
    if (last >= 0 && t->calls[last].launch.correlation_id == correlation_id) {
        t->count = last;
        return &t->calls[last];
    }
    for (int i = last - 1; i >= 0; i--) { /* an exit out of order: its call moved to the top */
        if (t->calls[i].launch.correlation_id != correlation_id)
            continue;
        OpenCall call = t->calls[i];
        memmove(&t->calls[i], &t->calls[i + 1], (size_t)(last - i) * sizeof(OpenCall));
        t->calls[last] = call;
        t->count = last;
        return &t->calls[last];
    }
    return NULL;
}

void
launch_exit(Recorder *r, uint32_t correlation_id, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    OpenCall *call = t != NULL ? take_open_call(t, correlation_id) : NULL;
    if (call != NULL && call->recorded) {
        call->launch.end = timestamp;
        finish(r, t, &call->launch);
    }
}

/* cuptiGetTimestamp, or 0 when it fails (kept as a fault). */
static uint64_t
timestamp_now(Recorder *r)
{
    uint64_t timestamp = 0;
    kn_CUptiResult status = r->get_timestamp(&timestamp);
    if (status != KN_CUPTI_SUCCESS) {
        note_c_fault(r, RECORDING, "cuptiGetTimestamp failed", (long)status);
        return 0;
    }
    return timestamp;
}

/* Whether a launch call entering now on `t` gets a CPU timestamp: every call for a trace or a
 * stream log (`timed`); else, for the launch-bound verdict (`timed_outer`), an outermost one
 * only (the driver's call inside the runtime's is part of the outer call's time). */
static inline int
stamps_enter(Recorder *r, ThreadCalls *t)
{
    return atomic_load_explicit(&r->timed, memory_order_relaxed)
           || (atomic_load_explicit(&r->timed_outer, memory_order_relaxed) && t->count == 0);
}

/* The enter of a launch call, timed (where stamps_enter says) once kname's own work for it is
 * done: its CPU time is the launch API's, not the site's look-up (0: not timed). A call not
 * timed is recorded at its enter: its exit then touches nothing but this thread's list, and
 * the buffer's lock is taken once a call, not twice. */
static void
launch_enter_now(Recorder *r, uint32_t correlation_id, int api, int graph)
{
    ThreadCalls *t = calls_of(r);
    if (t == NULL)
        return;
    int stamped = stamps_enter(r, t);
    enter_call(r, t, correlation_id, api, graph, 0, !stamped);
    if (stamped && t->count > 0 && t->calls[t->count - 1].launch.correlation_id == correlation_id)
        t->calls[t->count - 1].launch.start = timestamp_now(r);
}

/* The exit of a launch call: timed as its enter was (an outermost call timed at its enter). */
static void
launch_exit_now(Recorder *r, uint32_t correlation_id)
{
    ThreadCalls *t = calls_of(r);
    OpenCall *call = t != NULL ? take_open_call(t, correlation_id) : NULL;
    if (call == NULL || !call->recorded)
        return;
    int timed = atomic_load_explicit(&r->timed, memory_order_relaxed);
    if (timed || (call->launch.start != 0 && call->launch.parent == 0))
        call->launch.end = timestamp_now(r);
    finish(r, t, &call->launch);
}

/* ---- CUDA graphs: what the callback calls at CUPTI's graph resource callbacks */

/* An id through one of CUPTI's functions (0 for a null handle, or when it fails: said once). */
#define GRAPH_ID(r, get, handle, id)                                                           \
    do {                                                                                       \
        if ((handle) != NULL && (get) != NULL) {                                               \
            kn_CUptiResult status = (get)((handle), (id));                                     \
            if (status != KN_CUPTI_SUCCESS) {                                                  \
                note_c_fault((r), GRAPHING, #get " failed", (long)status);                     \
                *(id) = 0;                                                                     \
            }                                                                                  \
        }                                                                                      \
    } while (0)

void
graph_event(Recorder *r, int event, const kn_ResourceData *data)
{
    const kn_GraphData *graph = (const kn_GraphData *)data->resourceDescriptor;
    if (graph == NULL)
        return;
    NodeEvent e;
    memset(&e, 0, sizeof e);
    e.event = (uint8_t)event;
    GRAPH_ID(r, r->get_graph_node_id, graph->node, &e.node);
    GRAPH_ID(r, r->get_graph_node_id, graph->originalNode, &e.original);
    GRAPH_ID(r, r->get_graph_id, graph->graph, &e.graph);
    GRAPH_ID(r, r->get_graph_exec_id, graph->graphExec, &e.graph_exec);
    if (event == NODE_CREATED) {
        /* Made during stream capture: inside the launch call captured, which has its site. */
        ThreadCalls *t = calls_of(r);
        if (t == NULL)
            e.site = r->unnamed;
        else if (t->count > 0)
            e.site = t->calls[t->count - 1].launch.site;
        else if (t->wrapped != NULL)
            e.site = t->wrapped;
        else
            e.site = site_here(r, t); /* added explicitly: the line that added it */
    }
    e.correlation_id = atomic_load_explicit(&r->last_correlation_id, memory_order_relaxed);
    keep_node_event(r, &e);
}

/* The api index + 1 and GRAPH_API of a launch API (0: not recorded). */
static inline unsigned
api_of(Recorder *r, kn_CallbackDomain domain, kn_CallbackId cbid)
{
    if (domain > 2 || cbid >= MAX_CBID)
        return 0;
    return r->apis_of[domain][cbid];
}

void
on_api(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *cbdata)
{
    Recorder *r = (Recorder *)userdata;
    const kn_CallbackData *data = (const kn_CallbackData *)cbdata;
    if (r == NULL || data == NULL)
        return;
    if (domain != KN_CUPTI_CB_DOMAIN_RESOURCE && data->callbackSite == KN_CUPTI_API_EXIT) {
        /* An exit touches no Python (this thread's list, the buffer): only whether the recorder
         * stopped, or this is a forked child, is read, not the interpreter's state. */
        if (!atomic_load_explicit(&r->stopped, memory_order_relaxed)
            && atomic_load_explicit(&forks, memory_order_relaxed) == r->forks)
            launch_exit_now(r, data->correlationId);
        return;
    }
    if (must_not_touch_python(r))
        return;
    if (domain == KN_CUPTI_CB_DOMAIN_RESOURCE) { /* its data is a kn_ResourceData */
        int event = cbid < MAX_RESOURCE_CBID ? r->graph_events[cbid] : 0;
        if (event)
            graph_event(r, event, (const kn_ResourceData *)cbdata);
        return;
    }
    if (data->callbackSite == KN_CUPTI_API_ENTER) {
        unsigned api = api_of(r, domain, cbid);
        if (api != 0)
            launch_enter_now(r, data->correlationId, (int)(api & MAX_APIS) - 1,
                             (api & GRAPH_API) != 0);
    }
}


