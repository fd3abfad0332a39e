/*
 * kname._native_cupti's shared types: the Recorder, each thread's open calls, kernel names, the
 * recent tables, with the inline reads that use only them and the state (state.c) they read. A
 * header of no one file: recorder.c, callback.c and the Recorder's other files read these
 * (recorder.h says what the Recorder does).
 */
#ifndef KNAME_NATIVE_CUPTI_TYPES_H
#define KNAME_NATIVE_CUPTI_TYPES_H

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
#define FIRST_ROOM 256   /* records a thread's buffer first makes room for */
#define MAX_CBID 4096    /* callback ids per domain (CUPTI 13: 877 driver, 567 runtime) */
#define MAX_APIS 0x7FFF  /* api indexes, below apis_of's GRAPH_API bit */
#define GRAPH_API 0x8000 /* in an apis_of entry: the api launches a graph */
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
    int recorded; /* it goes to the thread's buffer at its exit */
} OpenCall;

/* One thread's finished calls for one recorder. Its thread alone writes it, without a lock:
 * records[count], then `count` published (release). The drain reads [consumed, count) under the
 * recorder's lock, and the thread changes `records`, `capacity` or `consumed` only under that
 * lock (when full: room again once drained, or more room). Held by its thread and by the
 * recorder's list (`refs`): the last to let go frees it, so the calls of a thread that ended
 * before the drain are still drained. */
typedef struct ThreadBuffer {
    struct ThreadBuffer *next; /* the recorder's list, under its lock */
    Launch *records;
    Py_ssize_t capacity, consumed;
    _Atomic Py_ssize_t count;
    atomic_int open; /* calls open now, recorded at their exit */
    atomic_int refs; /* 2: its thread's and the list's; 1: its thread ended (or moved on) */
} ThreadBuffer;

/* A site a thread found with the GIL under its frame's own key, for its launches made with the
 * GIL released (callback.c's site_without_gil). */
#define THREAD_SITES 32 /* entries, a power of 2 */

typedef struct {
    const void *position; /* frame_position: the frame's instruction, in its code object */
    void *code;
    uint64_t generation;
    PyObject *name; /* kept by the recorder */
} ThreadSite;

/* A site a thread found with the GIL by walking from its running frame, through library code,
 * to the first user frame above (callback.c's cached_site), for its launches made with the GIL
 * released from the same frames: the walk's inputs (each frame's code, the user frame's
 * instruction, the dicts' generations) are compared, the walk is not taken again. */
#define WALKED_DEPTH 8  /* frames above the running one a walked site may pass */
#define WALKED_SITES 16 /* entries, a power of 2 */

typedef struct {
    const void *position; /* the running frame's instruction */
    void *code;           /* its code */
    const void *user;     /* the user frame's instruction */
    void *codes[WALKED_DEPTH]; /* the code of each frame above the running one, to the user's */
    uint64_t sites_generation, kinds_generation;
    PyObject *name; /* kept by the recorder */
    int depth;      /* the user frame is the depth-th above the running one; 0: no entry */
} WalkedSite;

/* One thread's launch API calls now open, the site of the wrapped launch it is running, and its
 * buffer of finished calls. All belong to one recorder (`owner`, its serial): another recorder
 * starts them afresh. */
typedef struct {
    uint64_t owner;
    int count;
    int naming; /* asking Python for a site: a launch API called meanwhile is not walked again */
    PyObject *wrapped;
    unsigned long thread; /* PyThread_get_thread_ident() */
    /* Its buffer (NULL until its first finished call), and the buffer as its thread writes it:
     * the call finishing reads this line only, the buffer's own is written, never read. */
    ThreadBuffer *buffer;
    Launch *records;
    Py_ssize_t written, capacity;
    int open; /* the buffer's `open`, as this thread last set it */
    ThreadSite sites[THREAD_SITES];
    WalkedSite walked[WALKED_SITES];
    OpenCall calls[MAX_OPEN]; /* last: calls_start clears what comes before it */
} ThreadCalls;


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
    /* What the callback reads at every launch call, side by side (a cache line or two): between
     * calls the program's own work evicts them, and each line read is paid again (issue 43). */
    uint64_t serial;
    atomic_int stopped;
    unsigned int forks; /* the forks made before this recorder */
    /* Launch calls get CPU timestamps (cuptiGetTimestamp at enter and exit): only the trace and
     * the stream log read them. */
    atomic_int timed;
    /* Outermost launch calls get them (the launch-bound verdict's CPU time per line). */
    atomic_int timed_outer;
    atomic_uint last_correlation_id; /* the last launch call entered (graph nodes take it) */
    int max_open;
    int remember; /* look-ups may go in the recent tables: both dicts are followed */
    uint8_t *graph_of;   /* by api index */
    PyObject *api_names; /* tuple of str, by api index */
    Py_ssize_t api_count;
    PyObject *sites, *kinds, *site_of_frame, *site_key, *no_frame, *unnamed;
    PyObject *kept; /* dict: every site name recorded, name -> name */
    /* The site of a launch with no Python frame (kept), or NULL: no_frame. set_frameless() sets
     * it while a backward pass runs (kname.profiling.backward); read by any thread. */
    _Atomic(PyObject *) frameless;
    /* While set (set_frameless_namer, under the GIL): a launch named `frameless` is named
     * namer(frameless) instead, under the GIL: kname.profiling.backward's, which adds the
     * forward line of the autograd node running on the launching thread. */
    PyObject *frameless_namer;
    _Atomic int has_frameless_namer;
    Py_ssize_t max_pending;

    /* The finished calls: each thread's buffer (`buffers`, its list), made and grown under
     * `lock`, with the room they hold (`room`: at most max_pending). */
    pthread_mutex_t lock;
    ThreadBuffer *buffers;
    Py_ssize_t room;
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
    /* By domain (driver 1, runtime 2): cbid -> api index + 1 (0: not recorded), with GRAPH_API
     * set for a graph launch. Fixed in size: a callback may read it on another thread while
     * enable() writes another entry. */
    uint16_t apis_of[3][MAX_CBID];

    /* CUDA graphs: resource cbid -> node event (0: not recorded), the id functions, the last
     * launch call entered, and the events waiting for a drain (under `lock`, bounded as the
     * launches are). */
    uint8_t graph_events[MAX_RESOURCE_CBID];
    kn_GetGraphNodeId get_graph_node_id;
    kn_GetGraphId get_graph_id;
    kn_GetGraphExecId get_graph_exec_id; /* NULL before CUPTI 12.4: no executable graph ids */
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

#endif /* KNAME_NATIVE_CUPTI_TYPES_H */
