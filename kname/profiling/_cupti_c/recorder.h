/*
 * kname._native_cupti: kname profile's CUPTI launch callback in C. This header is what the
 * extension's files share; docs/architecture.md has the table of the files and their jobs.
 *
 * CUPTI calls a subscriber's callback on the launching thread, inside the CUDA API call, at its
 * enter and at its exit. In Python (cupti-python calling CuptiCollector) that costs 20-50 us a
 * launch; here, a launch whose site is cached costs a frame look-up and a few pointer compares.
 *
 * Recorder(apis, sites, kinds, site_of_frame, site_key, no_frame, unnamed, max_pending,
 * max_open_calls) does, per launch API call, what kname.profiling.capture.LaunchCapture's enter
 * and exit do, with the same rules, in the same order:
 *   enter: a call made inside another launch API call open on this thread (a runtime call's
 *     driver call) takes the outer call's site and has the outer correlation id as its parent;
 *     else, inside a launch kname wraps, the site its push marked on this thread (mark/unmark);
 *     else the site of the running Python frame: its key (id(code), f_lasti, site_key) looked up
 *     in `sites` (kname.callsite.sites), or, from library code, the key of the first user frame
 *     above it (`kinds`: kname.callsite._kinds), as capture.site_of_frame finds it when it is
 *     cached; anything else asks site_of_frame(frame) (Python, once per call site). No frame:
 *     the name set_frameless() gave (the backward pass running), else `no_frame`. More than
 *     max_open_calls open at once: they are forgotten (said at drain).
 *   exit: the end time of the open call with that correlation id.
 * site_calls(name, nvtx_push, nvtx_pop) gives a wrapped launch's push and pop as C callables: the
 * NVTX call and the mark (or the unmark and the NVTX call), no Python frame per launch.
 * Each call is kept as a C struct (no Python object per launch); drain(make_record) hands over
 * the finished ones as make_record(correlation_id, thread, site, api, start, end, graph,
 * parent), in the order they finished. Calls still open stay until their exit.
 *
 * Threads and the GIL: the GIL is taken only to read a frame, and only when the thread does not
 * hold it (torch releases it around its launches). A thread with no Python thread state, a
 * call nested in an open one, and a wrapped launch need no GIL at all: the site names kept here
 * (the dict `kept`, for the recorder's lifetime) are stored as plain pointers, and the records
 * are guarded by a mutex of their own. Nothing touches Python once the interpreter finalizes,
 * after unsubscribe(), or in a child forked after the recorder was made (CUPTI does not follow a
 * fork).
 *
 * Faults never reach CUPTI: the first is kept for take_fault(), the launch is still recorded.
 * At most max_pending records wait for a drain; past that, calls are counted in `dropped`.
 *
 * Activity buffers: take_activity_buffers() registers CUPTI's buffer callbacks (in place of
 * cupti-python's). CUPTI asks for a buffer (malloc'd here, aligned as it asks) and hands it back
 * full, mostly on its own thread: each record of a kind the join reads (kernels, copies, sets,
 * external correlations) is copied out into a C struct, without the GIL (a kernel's name is
 * copied once and found again by hash), and the buffer is freed. on_buffer() is then called with
 * the GIL to take them (drain_activities), after the finished launches. At most max_records
 * wait; past that, and CUPTI's own drops, are counted (activity_counts()).
 *
 * The join: after join_in_c(), nothing is handed over: the finished launches and then the
 * buffer's records are joined right there, in C (kname.profiling.join's tables, steps and
 * bounds, for the path that keeps no stream log), and the totals are read with join_profile().
 *
 * The trace: after keep_trace(max_records), what the join in C is given is also kept, as C
 * structs, for --trace (trace.h), and trace_json() writes the Chrome trace from
 * it. Launch calls are timed (cuptiGetTimestamp at enter and exit) only while time_launches()
 * says so: a trace or a stream log reads the times, nothing else does.
 *
 * CUDA graphs: enable_graph(cbid, event) has CUPTI call back at one of its graph resource
 * callbacks (a node made, cloned, updated, destroyed): each is kept as a C struct, as a launch
 * is, with the ids cuptiGetGraphNodeId, cuptiGetGraphId and cuptiGetGraphExecId give, and, for a
 * node made, the site of the launch call open on this thread (a captured launch), else of the
 * wrapped launch running, else of the running frame (a node added explicitly); with the
 * correlation id of the last launch call entered, which orders it among the launches.
 * drain_graph_nodes(make_record) hands them over (GraphNodeRecord); with the join in C they go
 * there, after the launches and before each buffer's records.
 *
 * CUPTI itself: subscribe(path) dlopens the libcupti that cupti-python loaded (by its absolute
 * path, RTLD_NOLOAD first) and takes the functions of cupti_abi.h; no CUDA header is needed to
 * build this extension. Linux, CPython 3.11+ with the GIL (a free-threaded build refuses
 * to import: kname then uses the Python callback).
 */
#ifndef KNAME_NATIVE_CUPTI_H
#define KNAME_NATIVE_CUPTI_H

#include "_common_c/common.h" /* first: it includes Python.h */
#include "profiling/_cupti_c/join.h"
#include "profiling/_cupti_c/trace.h"
#include "profiling/_cupti_c/cupti_abi.h"
#include "_common_c/profiled.h"
#include "_common_c/slots.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030B0000
#error "kname._native_cupti needs CPython 3.11 or newer (PyFrame_GetLasti)"
#endif

#define MAX_OPEN 32      /* room per thread; max_open_calls (capture's rule) may not exceed it */
#define RECENT 256       /* entries of each table of recent look-ups, a power of 2 */
#define FIRST_ROOM 4096  /* records the buffer first makes room for */
#define MAX_CBID 4096    /* callback ids per domain (CUPTI 13: 877 driver, 567 runtime) */
#define FIRST_GPU_ROOM 4096 /* GPU records the buffer first makes room for */
#define COPY_KINDS 32       /* memcpy kinds whose names are kept (CUPTI 13: 0 to 12) */
#define MAX_RESOURCE_CBID 64 /* resource callback ids (CUPTI 13: 26) */

/* Interned at the module's import (module.c): a site's `name`;
 * kname.profiling.records' KERNEL, MEMCPY and MEMSET, and the memset's work name (capture.py's);
 * its NODE_EVENTS, by their numbers (graphs.h); and "". */
INTERNAL extern PyObject *str_name, *str_kernel, *str_memcpy, *str_memset, *str_memset_name,
    *str_empty;
INTERNAL extern PyObject *graph_event_names[NODE_EVENT_COUNT + 1];

/* Set once nothing may touch Python any more: at the end of finalization. */
INTERNAL extern atomic_int python_gone;
/* Forks made since the module was imported: a recorder made before a fork records nothing in the
 * child (CUPTI does not follow a fork, nor do the owners of its locks). */
INTERNAL extern atomic_uint forks;

static inline int
finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* ------------------------------------------------------------------ records */

typedef struct {
    Launch launch;
    int recorded; /* room was reserved for it: it goes to the buffer at its exit */
} OpenCall;

/* One thread's launch API calls now open, and the site of the wrapped launch it is running. Both
 * belong to one recorder (`owner`, its serial): another recorder starts them afresh. */
typedef struct {
    uint64_t owner;
    int count;
    int naming; /* asking Python for a site: a launch API called meanwhile is not walked again */
    PyObject *wrapped;
    OpenCall calls[MAX_OPEN];
} ThreadCalls;

INTERNAL extern _Thread_local ThreadCalls here; /* callback.c */

/* LaunchRecord's fields, ActivityRecord's, ExternalCorrelation's and GraphNodeRecord's
 * (kname.profiling.records), each in the order of its constructor's arguments, made by
 * new_record (_common_c/slots.h). */
#define FIELDS RECORD_FIELDS

/* ------------------------------------------------------------------ kernel names */

/* Kernel names, each copied once (CUPTI documents its name pointer as shared by the records of a
 * kernel, not as outliving the buffer), and found again by hash, or by CUPTI's pointer when the
 * text there is still the same. Bounded in number and bytes; past that, one name for all. */
#define NAME_NONE 0       /* a kernel record without a name */
#define NAME_PAST_BOUND 1 /* a name not kept */
#define FIRST_NAME 2      /* the first of CUPTI's */
#define NAME_CACHE 256 /* entries of the table by CUPTI's pointer, a power of 2 */

typedef struct {
    char **text;    /* by index; the first two are the fixed names above */
    uint64_t *hash; /* by index */
    uint32_t *slots; /* open addressing: index + 1 (0: empty); `slot_count` is a power of 2 */
    size_t count, room, slot_count, bytes;
    unsigned long long past_bound; /* kernel records whose name was not kept */
    struct {
        const char *pointer;
        uint32_t index;
    } recent[NAME_CACHE];
} Names;

/* ------------------------------------------------------------------ recent look-ups */

/* Direct-mapped tables of recent look-ups of `sites` and `kinds`, so that a cached launch builds
 * no key and hashes nothing. An entry answers only while the dicts are unchanged since (a dict
 * watcher's generation on 3.12+, the dicts' version tags on 3.11), when the dict would give the
 * same answer. A site's name is kept in `kept`, so an entry's name outlives the site. */
typedef struct {
    void *code;
    int lasti;
    uint64_t generation;
    PyObject *name; /* NULL: no site under that key */
} RecentSite;

typedef struct {
    void *code;
    uint64_t generation;
    int kind;
} RecentKind;

/* ------------------------------------------------------------------ Recorder */

typedef struct {
    PyObject_HEAD
    uint64_t serial;
    PyObject *api_names; /* tuple of str, by api index */
    uint8_t *graph_of;   /* by api index */
    Py_ssize_t api_count;
    PyObject *sites, *kinds, *site_of_frame, *site_key, *no_frame, *unnamed;
    PyObject *kept; /* dict: every site name recorded, name -> name */
    /* The site of a launch with no Python frame (kept), or NULL: no_frame. set_frameless() sets
     * it while a backward pass runs (kname.profiling.backward); read by any thread. */
    _Atomic(PyObject *) frameless;
    int max_open;
    int remember; /* look-ups may go in the recent tables: both dicts are followed */
    Py_ssize_t max_pending;

    /* The records: finished ones in `records`, room reserved for the `open` ones. */
    pthread_mutex_t lock;
    Launch *records;
    Py_ssize_t count, capacity, open;
    unsigned long long dropped;
    int forgot_open_calls;

    /* The first fault: a Python exception, or a C one said in `fault_detail`. */
    PyObject *fault;
    const char *fault_where;
    char fault_detail[160];

    /* CUPTI */
    void *library;
    kn_Subscribe subscribe;
    kn_Subscribe_v2 subscribe_v2;
    kn_Unsubscribe unsubscribe;
    kn_EnableCallback enable_callback;
    kn_GetTimestamp get_timestamp;
    kn_SubscriberHandle subscriber;
    atomic_int stopped;
    unsigned int forks; /* the forks made before this recorder */
    /* By domain (driver 1, runtime 2): cbid -> api index + 1 (0: not recorded). Fixed in size:
     * a callback may read it on another thread while enable() writes another entry. */
    uint16_t apis_of[3][MAX_CBID];

    /* CUDA graphs: resource cbid -> node event (0: not recorded), the id functions, the last
     * launch call entered, and the events waiting for a drain (under `lock`, bounded as the
     * launches are). */
    uint8_t graph_events[MAX_RESOURCE_CBID];
    kn_GetGraphNodeId get_graph_node_id;
    kn_GetGraphId get_graph_id;
    kn_GetGraphExecId get_graph_exec_id; /* NULL before CUPTI 12.4: no executable graph ids */
    atomic_uint last_correlation_id;
    NodeEvent *node_events;
    Py_ssize_t node_event_count, node_event_capacity;
    unsigned long long node_events_dropped;

    /* GPU records, read from CUPTI's activity buffers (take_activity_buffers), under their own
     * lock. `lock` may be taken with it held, never the other way round. */
    pthread_mutex_t activity_lock;
    GpuRecord *gpu;
    Py_ssize_t gpu_count, gpu_capacity, max_gpu;
    unsigned long long gpu_dropped;   /* past max_gpu */
    unsigned long long cupti_dropped; /* CUPTI's count: no buffer space */
    Names names;
    PyObject *on_buffer;     /* called with the GIL after a buffer is read; NULL: none */
    PyObject **name_objects; /* by name index, made with the GIL */
    size_t name_objects_room;
    PyObject *copy_names[COPY_KINDS]; /* by copy kind, from memcpy_name() */
    kn_ActivityRegisterCallbacks register_callbacks;
    kn_ActivityGetNextRecord get_next_record;
    kn_ActivityGetNumDroppedRecords get_num_dropped;
    kn_ActivityFlushAll flush_all;

    Join join; /* under activity_lock; on: GPU records are joined here, not handed over */
    TraceLog trace; /* under activity_lock; on: what the join is given is kept for --trace */
    /* Launch calls get CPU timestamps (cuptiGetTimestamp at enter and exit): only the trace and
     * the stream log read them. */
    atomic_int timed;

    RecordLayout record_layout, activity_layout, external_layout, node_layout;
    RecentSite recent[RECENT];
    RecentKind recent_kinds[RECENT];
} Recorder;

static inline int
must_not_touch_python(Recorder *r)
{
    return atomic_load_explicit(&r->stopped, memory_order_relaxed)
           || atomic_load_explicit(&python_gone, memory_order_relaxed)
           || atomic_load_explicit(&forks, memory_order_relaxed) != r->forks || finalizing();
}

static inline ThreadCalls *
calls_of(Recorder *r)
{
    ThreadCalls *t = &here;
    if (t->owner != r->serial) {
        memset(t, 0, offsetof(ThreadCalls, calls));
        t->owner = r->serial;
    }
    return t;
}

/* ------------------------------------------------------------------ the callback */

/* In callback.c: what CUPTI calls at each launch API call, and what it shares. */

/* What CUPTI calls. Never raises, never fails the CUDA call. */
INTERNAL void on_api(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid,
                     const void *cbdata);

/* One of CUPTI's graph resource callbacks (`event`: NODE_CREATED...), on the thread making the
 * node: kept for the next drain. */
INTERNAL void graph_event(Recorder *r, int event, const kn_ResourceData *data);

/* A launch API call starts on this thread (enter), or returns (exit). */
INTERNAL void launch_enter(Recorder *r, uint32_t correlation_id, int api, uint64_t timestamp);
INTERNAL void launch_exit(Recorder *r, uint32_t correlation_id, uint64_t timestamp);

/* Keep a fault for take_fault(), unless one is kept already (report_fault says each kind once).
 * With the GIL: the exception set now, cleared. */
INTERNAL void note_fault(Recorder *r, const char *where);

/* The same for a fault of CUPTI's, said in words (no GIL needed). */
INTERNAL void note_c_fault(Recorder *r, const char *where, const char *detail, long status);

/* The finished calls taken out of the buffer (a copy, *count of them; NULL when none, or, with
 * *count left above 0, no memory: they stay). Any thread. */
INTERNAL Launch *take_finished(Recorder *r, Py_ssize_t *count);

/* The graph node events waiting, taken the same way. */
INTERNAL NodeEvent *take_node_events(Recorder *r, Py_ssize_t *count);

/* Where `kept` holds a name equal to `name`, that one (borrowed); NULL with an error. */
INTERNAL PyObject *keep(Recorder *r, PyObject *name);

/* ------------------------------------------------------------------ the Recorder */

/* In recorder.c: the type as Python sees it, with its own methods (the others' files add theirs:
 * each file's <file>_ready(&RecorderType) below). 0, or -1 with an error. */
INTERNAL extern PyTypeObject RecorderType;
INTERNAL int recorder_ready(PyObject *module);

/* In state.c: the strings above interned, once. 0, or -1 with an error. */
INTERNAL int state_ready(void);

/* libcupti's function `name`; NULL with OSError when it has none (state.c). */
INTERNAL void *symbol(Recorder *r, const char *name);

/* ------------------------------------------------------------------ records */

/* In records.c, the twin of kname.profiling.records. */

/* The kernel names table made, with its two fixed names (0: no memory); a name's index in it,
 * copied once; the table freed (the recorder's end). Under r->activity_lock. */
INTERNAL int names_init(Names *n);
INTERNAL uint32_t intern_name(Names *n, const char *name);
INTERNAL void names_free(Names *n);

/* A launch call, a graph node event, a GPU record as the Python record made by make_record
 * (records.py's LaunchRecord, GraphNodeRecord; ActivityRecord or, for an external correlation,
 * make_external's ExternalCorrelation): a new reference, NULL with an error. */
INTERNAL PyObject *launch_object(Recorder *r, PyObject *make_record, const Launch *launch);
INTERNAL PyObject *node_object(Recorder *r, PyObject *make_record, const NodeEvent *event);
INTERNAL PyObject *gpu_object(Recorder *r, const GpuRecord *g, PyObject *make_activity,
                              PyObject *make_external, PyObject *memcpy_name);

/* The str of kernel name `index`, made once; memcpy_name(copy_kind), asked once per copy kind
 * (new references, NULL with an error). */
INTERNAL PyObject *kernel_name(Recorder *r, uint32_t index);
INTERNAL PyObject *copy_name(Recorder *r, PyObject *memcpy_name, uint32_t copy_kind);

/* ------------------------------------------------------------------ the Recorder's other methods */

/* Each adds its methods to the Recorder (module.c calls them after recorder_ready). 0, or -1 with
 * an error. */
INTERNAL int activity_ready(PyTypeObject *recorder);   /* activity.c: buffers, the join in C */
INTERNAL int trace_ready(PyTypeObject *recorder);      /* trace.c: the trace kept */
INTERNAL int trace_json_ready(PyTypeObject *recorder); /* trace_json.c: its JSON */
INTERNAL int site_calls_ready(PyTypeObject *recorder); /* site_calls.c: SiteCall too */

/* A copy of the trace's log, taken under the activity lock (trace.c); 0: no memory. */
INTERNAL int trace_snapshot(Recorder *r, TraceLog *copy);

/* In a forked child: the buffers' lock made anew (CUPTI's thread, which may have held it, is
 * not in the child). */
INTERNAL void activity_in_forked_child(void);

#endif /* KNAME_NATIVE_CUPTI_H */
