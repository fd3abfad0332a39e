/*
 * The join of kname._native_cupti, in C: the twin of kname.profiling.join.Join for the native
 * path where no stream log is kept. Launch records (moved from the recorder's buffer) and GPU
 * records (from CUPTI's buffers) meet here, in CUPTI's thread, without the GIL and without a
 * Python object per record. join.py is the specification: every table and every step in
 * join.c is one of its, in the same order, and tests/profiling/test_native_cupti_join.py
 * checks that both give the same Profile for the same streams. Sites are the recorder's kept
 * names (one object per name: a pointer is a name); <unattributed> is the kept name given for it.
 * The work of a CUDA graph replay goes to the line that made its node (the node table of
 * graphs.c), with the replay's line kept beside it, as join.py does.
 * Everything here runs under the recorder's activity_lock.
 */
#ifndef KNAME_NATIVE_CUPTI_JOIN_H
#define KNAME_NATIVE_CUPTI_JOIN_H

#include "_common_c/common.h" /* first: it includes Python.h */
#include "profiling/_cupti_c/graphs.h"
#include "profiling/_cupti_c/id_map.h"

#include <stdint.h>

/* ------------------------------------------------------------------ what the join joins */

/* A launch API call, as the recorder keeps it. */
typedef struct {
    uint64_t start, end;
    unsigned long thread;
    PyObject *site; /* NULL: no Python frame; else a name held by the recorder's `kept` */
    uint32_t correlation_id, parent;
    uint16_t api;
    uint8_t graph;
} Launch;

/* What the join needs of one activity record, copied out of CUPTI's buffer. */
enum { GPU_KERNEL = 1, GPU_MEMCPY, GPU_MEMSET, GPU_EXTERNAL };

typedef struct {
    uint64_t start, end; /* GPU_EXTERNAL: `start` is the external id */
    uint64_t graph_node_id;
    uint32_t correlation_id, stream, device, graph_id;
    uint32_t detail; /* GPU_KERNEL: the name's index in the recorder's names; GPU_MEMCPY: the
                      * copy kind (CUpti_ActivityMemcpyKind) */
    uint8_t kind;
} GpuRecord;

/* ---- kname profile --memory: what the join keeps apart for Python's memory join */

/* One of CUPTI's memory records (MEMORY2), copied out of its buffer (records.py's MemoryRecord,
 * the kind and operation as CUPTI numbers them). */
typedef struct {
    uint64_t address, bytes, timestamp;
    uint32_t correlation_id, device, stream, memory_kind; /* CUpti_ActivityMemoryKind */
    uint8_t allocation, is_async;
} MemoryFact;

/* A memory API call (cudaMalloc, cuMemFree...): its correlation id and its line. */
typedef struct {
    uint32_t correlation_id;
    const void *site;
} MemoryCall;

/* As memory_join.MemoryCalls does in front of join.py's Join: memory API calls are no launches
 * (is_memory_api, by api index), kept here with CUPTI's memory records until Python takes them
 * (drain_memory: a few per allocation, not one per kernel). At most `max_waiting` of each wait;
 * past that they are counted in `dropped`. */
typedef struct {
    int on;
    uint8_t *is_memory_api;
    size_t api_count;
    MemoryCall *calls;
    size_t call_count, call_room;
    MemoryFact *facts;
    size_t fact_count, fact_room;
    size_t max_waiting;
    uint64_t dropped;
} MemoryWaiting;

/* ------------------------------------------------------------------ its tables */

/* ---- the join's state */

#define MAX_STREAMS 4096 /* launch_times.py's: streams whose last end is kept */

/* What a site's totals count a record under: its kernel name's index, or a copy's kind, or the
 * one name of a memset (as the record's name in join.py). */
#define WORK_MEMCPY 0x40000000u
#define WORK_MEMSET 0x80000000u

/* What a GPU record counts as (a copy or a set is one work per kind, whatever it copied). */
static inline uint32_t
work_of(const GpuRecord *g)
{
    if (g->kind == GPU_MEMCPY)
        return WORK_MEMCPY | g->detail;
    if (g->kind == GPU_MEMSET)
        return WORK_MEMSET;
    return g->detail;
}

typedef struct {
    uint32_t work, next; /* next: the site's next kernel + 1 (0: the last) */
    uint64_t launches, gpu_ns;
} KernelTotal;

/* Of a site's graph work, what one line replayed (SiteTotals.replays). */
typedef struct {
    const void *replay;
    uint32_t next; /* the site's next replay line + 1 (0: the last) */
    uint64_t launches, gpu_ns;
} ReplayTotal;

typedef struct {
    const void *site;
    uint64_t launches, gpu_ns;
    uint32_t first;
    uint32_t head, tail; /* the site's kernels, in the order first seen (index + 1) */
    uint32_t replay_head, replay_tail; /* its graph work by replay line (index + 1) */
    uint64_t unseen_launches, unseen_gpu_ns; /* graph work replayed here, its nodes not seen */
    uint64_t launch_calls, launch_cpu_ns, idle_ns; /* launch_times.py's numbers */
} SiteTotal;

/* Lists of correlation ids (children) and of GPU records (orphans), in pools with free lists. */
typedef struct {
    uint32_t id, next; /* next node + 1 (0: the last) */
} IdNode;

typedef struct {
    GpuRecord record;
    uint32_t next;
} RecordNode;

typedef struct {
    int on;
    Py_ssize_t max_pending, recent_window;
    const void *unattributed;
    /* join.py's tables: pending (a: site, b: parent | graph << 32), children (a, b: the first
     * and last node + 1), recent (a: site), externals (a: external id), orphans (a, b: the
     * first and last node + 1), graphs_seen */
    Map pending, children, recent, externals, orphans, graphs;
    IdNode *ids;
    size_t id_count, id_room;
    uint32_t id_free; /* + 1 */
    RecordNode *records;
    size_t record_nodes, record_room;
    uint32_t record_free; /* + 1 */
    size_t orphan_count;
    SiteTotal *sites;
    size_t site_count, site_room;
    KernelTotal *kernels;
    size_t kernel_count, kernel_room;
    ReplayTotal *replays;
    size_t replay_count, replay_room;
    Index64 site_of, kernel_of; /* site pointer -> site index; site index << 32 | work -> kernel */
    Index64 replay_line, replay_of; /* replay site -> its number; site index << 32 | number ->
                                   * replay */
    GraphNodes nodes;
    /* launch_times.py's tables: timed_calls (a: enter, b: exit), each stream's last end (by
     * device << 32 | stream, at most MAX_STREAMS of them) */
    int times_on; /* LaunchTimes.on: the recorder times outermost calls for the verdict */
    Map timed_calls, outer_of; /* outer_of: a call made inside another (a: the outer one) */
    Index64 stream_of;
    uint64_t *stream_ends;
    size_t stream_count, stream_room;
    uint64_t dropped, launch_count, record_count;
    uint32_t first;
    int trimmed;   /* launches were dropped at the bound: said at the next report */
    int no_memory; /* something was not kept for want of memory: said too */
    MemoryWaiting memory; /* --memory's calls and records (kept with the join off too) */
} Join;

/* ---- a snapshot of the totals (profile()) */

typedef struct {
    uint32_t work;
    uint64_t launches, gpu_ns;
} KernelCount;

typedef struct {
    const void *replay;
    uint64_t launches, gpu_ns;
} ReplayCount;

typedef struct {
    const void *site;
    uint32_t first;
    size_t start, count;               /* its kernels in the snapshot's `kernels` */
    size_t replay_start, replay_count; /* its replay lines in the snapshot's `replays` */
    uint64_t unseen_launches, unseen_gpu_ns;
    uint64_t launch_calls, launch_cpu_ns, idle_ns;
} SiteCount;

typedef struct {
    SiteCount *sites;
    size_t site_count;
    KernelCount *kernels;
    size_t kernel_count, kernel_room;
    ReplayCount *replays;
    size_t replay_count, replay_room;
    SiteCount unattributed;
    uint64_t unmatched, dropped, earlier;
} Snapshot;

/* ------------------------------------------------------------------ its steps */

/* add_launch, for each of `count` launches in the order they finished; a launch with no Python
 * frame (site NULL) at `no_frame`. With memory on, a memory API call is kept apart instead. */
INTERNAL void join_launches(Join *j, const Launch *launches, Py_ssize_t count,
                            const void *no_frame);

/* add_graph_node, for each of `count` events in the order they came (a made node with no Python
 * frame at `no_frame`). */
INTERNAL void join_graph_nodes(Join *j, const NodeEvent *events, Py_ssize_t count,
                               const void *no_frame);

/* One buffer's records, as the collector hands them to the Python join: its external
 * correlations first, then its work (add_externals, then add_activities). */
INTERNAL void join_records(Join *j, const GpuRecord *records, Py_ssize_t count);

/* CUPTI's memory record kept for Python (memory on); past the bound, or for want of memory,
 * counted in `dropped`. */
INTERNAL void memory_keep_fact(MemoryWaiting *m, const MemoryFact *fact);

/* profile(): the sites (but <unattributed>), and <unattributed> with the records still waiting
 * for their launch, but those older than every launch seen (counted as earlier). 0: no memory. */
INTERNAL int join_snapshot(const Join *j, Snapshot *s);

INTERNAL void snapshot_free(Snapshot *s);
INTERNAL void join_free(Join *j);

#endif /* KNAME_NATIVE_CUPTI_JOIN_H */
