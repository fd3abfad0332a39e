/*
 * kname._native_cupti: kname profile's CUPTI launch callback in C.
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
 *     `no_frame`. More than max_open_calls open at once: they are forgotten (said at drain).
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
 * CUPTI itself: subscribe(path) dlopens the libcupti that cupti-python loaded (by its absolute
 * path, RTLD_NOLOAD first) and takes the functions of _cupti_abi.h; no CUDA header is needed to
 * build this file. Linux, CPython 3.11+ with the GIL (a free-threaded build refuses
 * to import: kname then uses the Python callback).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "_cupti_abi.h"

#if PY_VERSION_HEX < 0x030B0000
#error "kname._native_cupti needs CPython 3.11 or newer (PyFrame_GetLasti)"
#endif

#include "_native_common.h"

#define MAX_OPEN 32      /* room per thread; max_open_calls (capture's rule) may not exceed it */
#define RECENT 256       /* entries of each table of recent look-ups, a power of 2 */
#define FIRST_ROOM 4096  /* records the buffer first makes room for */
#define MAX_CBID 4096    /* callback ids per domain (CUPTI 13: 877 driver, 567 runtime) */
#define FIRST_GPU_ROOM 4096 /* GPU records the buffer first makes room for */
#define COPY_KINDS 32       /* memcpy kinds whose names are kept (CUPTI 13: 0 to 12) */

static const char FINDING[] = "finding the call site of a CUDA launch";
static const char RECORDING[] = "recording a CUDA launch for kname profile";
static const char READING[] = "reading CUPTI's activity records";

static PyObject *str_name;
/* kname.profiling.records' KERNEL, MEMCPY and MEMSET, and the memset's work name (capture.py's) */
static PyObject *str_kernel, *str_memcpy, *str_memset, *str_memset_name;

/* Set once nothing may touch Python any more: at the end of finalization. */
static atomic_int python_gone = 0;
/* Forks made since the module was imported: a recorder made before a fork records nothing in the
 * child (CUPTI does not follow a fork, nor do the owners of its locks). */
static atomic_uint forks = 0;

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
    uint64_t start, end;
    unsigned long thread;
    PyObject *site; /* NULL: no Python frame; else a name held by the recorder's `kept` */
    uint32_t correlation_id, parent;
    uint16_t api;
    uint8_t graph;
} Launch;

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

static _Thread_local ThreadCalls here;
static uint64_t next_serial = 1;

/* LaunchRecord's fields, ActivityRecord's and ExternalCorrelation's (kname.profiling.records),
 * each in the order of its constructor's arguments. */
#define FIELDS 8 /* the most of any */
static const char *const launch_fields[] = {
    "correlation_id", "thread", "site", "api", "start", "end", "graph", "parent", NULL,
};
static const char *const activity_fields[] = {
    "kind", "correlation_id", "name", "start", "end", "stream", "device", "graph_id", NULL,
};
static const char *const external_fields[] = {"correlation_id", "external_id", NULL};

/* Where a plain slots class keeps those fields, learned once per class (and again after the
 * class is changed: its version tag moves). Such a class (a slots dataclass without
 * __post_init__ or __setattr__) is made by setting its slots: what its __init__ does, without
 * running Python code for each record. Anything else is called. */
typedef struct {
    const char *const *fields; /* NULL-terminated, at most FIELDS */
    int count;
    PyTypeObject *type; /* strong */
    unsigned int version;
    int fast;
    Py_ssize_t offset[FIELDS];
} RecordLayout;

/* ------------------------------------------------------------------ GPU records */

/* What the join needs of one activity record, copied out of CUPTI's buffer. */
enum { GPU_KERNEL = 1, GPU_MEMCPY, GPU_MEMSET, GPU_EXTERNAL };

typedef struct {
    uint64_t start, end; /* GPU_EXTERNAL: `start` is the external id */
    uint32_t correlation_id, stream, device, graph_id;
    uint32_t detail; /* GPU_KERNEL: the name's index in the recorder's names; GPU_MEMCPY: the
                      * copy kind (CUpti_ActivityMemcpyKind) */
    uint8_t kind;
} GpuRecord;

/* Kernel names, each copied once (CUPTI documents its name pointer as shared by the records of a
 * kernel, not as outliving the buffer), and found again by hash, or by CUPTI's pointer when the
 * text there is still the same. Bounded in number and bytes; past that, one name for all. */
#define NAME_NONE 0       /* a kernel record without a name */
#define NAME_PAST_BOUND 1 /* a name not kept */
#define FIRST_NAME 2      /* the first of CUPTI's */
#define MAX_NAMES 100000
#define MAX_NAME_BYTES ((size_t)64 << 20)
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

/* ------------------------------------------------------------------ the join, in C */

/* kname.profiling.join.Join, for the native path where no stream log is kept: launch records
 * (moved from the recorder's buffer) and GPU records (from CUPTI's buffers) meet here, in
 * CUPTI's thread, without the GIL and without a Python object per record. join.py is the
 * specification: every table and every step below is one of its, in the same order, and
 * tests/test_native_cupti_join.py checks that both give the same Profile for the same streams.
 * Sites are the recorder's kept names (one object per name: a pointer is a name); <unattributed>
 * is the kept name given for it. Everything here runs under the recorder's activity_lock. */

/* ---- an insertion-ordered map of correlation ids (one of join.py's dicts) */

typedef struct {
    uint32_t key;
    uint32_t live;
    uint64_t a, b; /* what the map keeps for the key */
} MapEntry;

typedef struct {
    MapEntry *entries; /* in insertion order; a removed entry stays, dead, until compacted */
    size_t head, tail, capacity, live;
    uint32_t *index;   /* linear probing: an entry's position + 1 (0: empty); live ones only */
    size_t index_size; /* a power of 2, at least twice `live` */
} Map;

static inline size_t
map_home(const Map *m, uint32_t key)
{
    return (size_t)(key * 2654435761u) & (m->index_size - 1);
}

static size_t
map_slot(const Map *m, uint32_t key)
{
    size_t mask = m->index_size - 1, i = map_home(m, key);
    while (m->index[i] != 0 && m->entries[m->index[i] - 1].key != key)
        i = (i + 1) & mask;
    return i;
}

static MapEntry *
map_find(const Map *m, uint32_t key)
{
    if (m->live == 0)
        return NULL;
    uint32_t at = m->index[map_slot(m, key)];
    return at ? &m->entries[at - 1] : NULL;
}

static void
map_reindex(Map *m)
{
    memset(m->index, 0, m->index_size * sizeof *m->index);
    for (size_t p = m->head; p < m->tail; p++) {
        if (m->entries[p].live)
            m->index[map_slot(m, m->entries[p].key)] = (uint32_t)p + 1;
    }
}

/* The entry of `key`, made at the end when new (its values zero); NULL: no memory. An existing
 * key keeps its place, as in a dict. */
static MapEntry *
map_put(Map *m, uint32_t key)
{
    MapEntry *found = map_find(m, key);
    if (found != NULL)
        return found;
    if ((m->live + 1) * 2 > m->index_size) {
        size_t size = m->index_size ? 2 * m->index_size : 64;
        uint32_t *index = malloc(size * sizeof *index);
        if (index == NULL)
            return NULL;
        free(m->index);
        m->index = index;
        m->index_size = size;
        map_reindex(m);
    }
    if (m->tail == m->capacity) {
        if (m->capacity && m->live * 2 <= m->capacity) { /* half of it is dead: compacted */
            size_t to = 0;
            for (size_t p = m->head; p < m->tail; p++) {
                if (m->entries[p].live)
                    m->entries[to++] = m->entries[p];
            }
            m->head = 0;
            m->tail = to;
            map_reindex(m);
        }
        else {
            size_t capacity = m->capacity ? 2 * m->capacity : 64;
            MapEntry *grown = realloc(m->entries, capacity * sizeof *grown);
            if (grown == NULL)
                return NULL;
            m->entries = grown;
            m->capacity = capacity;
        }
    }
    MapEntry *entry = &m->entries[m->tail];
    *entry = (MapEntry){key, 1, 0, 0};
    m->index[map_slot(m, key)] = (uint32_t)m->tail + 1;
    m->tail++;
    m->live++;
    return entry;
}

/* `key`'s entry removed: 1 (its values in *out, when given), or 0 when there is none. */
static int
map_remove(Map *m, uint32_t key, MapEntry *out)
{
    if (m->live == 0)
        return 0;
    size_t mask = m->index_size - 1, i = map_slot(m, key);
    if (m->index[i] == 0)
        return 0;
    MapEntry *entry = &m->entries[m->index[i] - 1];
    if (out != NULL)
        *out = *entry;
    entry->live = 0;
    m->live--;
    /* Backward-shift deletion: each later entry of the probe run moves up unless its home
     * lies cyclically in (i, j], so that no run is broken. */
    for (size_t j = (i + 1) & mask; m->index[j] != 0; j = (j + 1) & mask) {
        size_t home = map_home(m, m->entries[m->index[j] - 1].key);
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            m->index[i] = m->index[j];
            i = j;
        }
    }
    m->index[i] = 0;
    while (m->head < m->tail && !m->entries[m->head].live)
        m->head++;
    if (m->live == 0)
        m->head = m->tail = 0;
    return 1;
}

/* The oldest entry (NULL when empty). */
static MapEntry *
map_oldest(Map *m)
{
    return m->live ? &m->entries[m->head] : NULL;
}

static void
map_free(Map *m)
{
    free(m->entries);
    free(m->index);
    memset(m, 0, sizeof *m);
}

/* ---- an insert-only table of 64-bit keys (sites, and kernels per site) */

typedef struct {
    uint64_t *keys;
    uint32_t *values; /* value + 1; 0: empty */
    size_t size, count;
} Table;

static inline size_t
table_home(const Table *t, uint64_t key)
{
    key ^= key >> 31;
    key *= 0xbf58476d1ce4e5b9u;
    key ^= key >> 29;
    return (size_t)key & (t->size - 1);
}

/* The value under `key`, or -1. */
static int64_t
table_get(const Table *t, uint64_t key)
{
    if (t->count == 0)
        return -1;
    for (size_t i = table_home(t, key);; i = (i + 1) & (t->size - 1)) {
        if (t->values[i] == 0)
            return -1;
        if (t->keys[i] == key)
            return (int64_t)t->values[i] - 1;
    }
}

static int
table_set(Table *t, uint64_t key, uint32_t value)
{
    if ((t->count + 1) * 2 > t->size) {
        Table grown = {NULL, NULL, t->size ? 2 * t->size : 64, 0};
        grown.keys = malloc(grown.size * sizeof *grown.keys);
        grown.values = calloc(grown.size, sizeof *grown.values);
        if (grown.keys == NULL || grown.values == NULL) {
            free(grown.keys);
            free(grown.values);
            return 0;
        }
        for (size_t i = 0; i < t->size; i++) {
            if (t->values[i] != 0)
                table_set(&grown, t->keys[i], t->values[i] - 1);
        }
        free(t->keys);
        free(t->values);
        *t = grown;
    }
    size_t i = table_home(t, key);
    while (t->values[i] != 0)
        i = (i + 1) & (t->size - 1);
    t->keys[i] = key;
    t->values[i] = value + 1;
    t->count++;
    return 1;
}

static void
table_free(Table *t)
{
    free(t->keys);
    free(t->values);
    memset(t, 0, sizeof *t);
}

/* ---- the join's state */

/* What a site's totals count a record under: its kernel name's index, or a copy's kind, or the
 * one name of a memset (as the record's name in join.py). */
#define WORK_MEMCPY 0x40000000u
#define WORK_MEMSET 0x80000000u

typedef struct {
    uint32_t work, next; /* next: the site's next kernel + 1 (0: the last) */
    uint64_t launches, gpu_ns;
} KernelTotal;

typedef struct {
    const void *site;
    uint64_t launches, gpu_ns;
    uint32_t first;
    uint32_t head, tail; /* the site's kernels, in the order first seen (index + 1) */
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
    Table site_of, kernel_of; /* site pointer -> site index; site index << 32 | work -> kernel */
    uint64_t dropped, launch_count, record_count;
    uint32_t first;
    int trimmed;   /* launches were dropped at the bound: said at the next report */
    int no_memory; /* something was not kept for want of memory: said too */
} Join;

static void
join_free(Join *j)
{
    map_free(&j->pending);
    map_free(&j->children);
    map_free(&j->recent);
    map_free(&j->externals);
    map_free(&j->orphans);
    map_free(&j->graphs);
    table_free(&j->site_of);
    table_free(&j->kernel_of);
    free(j->ids);
    free(j->records);
    free(j->sites);
    free(j->kernels);
    memset(j, 0, sizeof *j);
}

/* Room for one more of `count` items of `size` in *items; 0: no memory. */
static int
grow(void **items, size_t *room, size_t count, size_t size)
{
    if (count < *room)
        return 1;
    size_t more = *room ? 2 * *room : 64;
    void *grown = realloc(*items, more * size);
    if (grown == NULL)
        return 0;
    *items = grown;
    *room = more;
    return 1;
}

/* ---- lists */

static int
append_id(Join *j, MapEntry *list, uint32_t id)
{
    uint32_t node;
    if (j->id_free) {
        node = j->id_free - 1;
        j->id_free = j->ids[node].next;
    }
    else {
        if (!grow((void **)&j->ids, &j->id_room, j->id_count, sizeof *j->ids))
            return 0;
        node = (uint32_t)j->id_count++;
    }
    j->ids[node] = (IdNode){id, 0};
    if (list->a == 0)
        list->a = node + 1;
    else
        j->ids[list->b - 1].next = node + 1;
    list->b = node + 1;
    return 1;
}

static int
append_record(Join *j, MapEntry *list, const GpuRecord *record)
{
    uint32_t node;
    if (j->record_free) {
        node = j->record_free - 1;
        j->record_free = j->records[node].next;
    }
    else {
        if (!grow((void **)&j->records, &j->record_room, j->record_nodes, sizeof *j->records))
            return 0;
        node = (uint32_t)j->record_nodes++;
    }
    j->records[node] = (RecordNode){*record, 0};
    if (list->a == 0)
        list->a = node + 1;
    else
        j->records[list->b - 1].next = node + 1;
    list->b = node + 1;
    return 1;
}

/* ---- totals */

static uint32_t
work_of(const GpuRecord *g)
{
    if (g->kind == GPU_MEMCPY)
        return WORK_MEMCPY | g->detail;
    if (g->kind == GPU_MEMSET)
        return WORK_MEMSET;
    return g->detail;
}

static inline uint64_t
duration_of(const GpuRecord *g)
{
    return g->end > g->start ? g->end - g->start : 0;
}

/* The totals of `site`, made on first use (join.py's _totals); -1: no memory. */
static int64_t
site_totals(Join *j, const void *site)
{
    int64_t found = table_get(&j->site_of, (uint64_t)(uintptr_t)site);
    if (found >= 0)
        return found;
    if (!grow((void **)&j->sites, &j->site_room, j->site_count, sizeof *j->sites)
        || !table_set(&j->site_of, (uint64_t)(uintptr_t)site, (uint32_t)j->site_count))
        return -1;
    j->sites[j->site_count] = (SiteTotal){site, 0, 0, 0, 0, 0};
    return (int64_t)j->site_count++;
}

/* SiteTotals.add: one GPU record counted at `site`. */
static void
count_record(Join *j, const void *site, const GpuRecord *g)
{
    int64_t s = site_totals(j, site);
    uint32_t work = work_of(g);
    uint64_t key = ((uint64_t)s << 32) | work;
    int64_t k = s < 0 ? -1 : table_get(&j->kernel_of, key);
    if (s >= 0 && k < 0) {
        if (grow((void **)&j->kernels, &j->kernel_room, j->kernel_count, sizeof *j->kernels)
            && table_set(&j->kernel_of, key, (uint32_t)j->kernel_count)) {
            k = (int64_t)j->kernel_count++;
            j->kernels[k] = (KernelTotal){work, 0, 0, 0};
            SiteTotal *t = &j->sites[s];
            if (t->head == 0)
                t->head = (uint32_t)k + 1;
            else
                j->kernels[t->tail - 1].next = (uint32_t)k + 1;
            t->tail = (uint32_t)k + 1;
        }
    }
    if (k < 0) {
        j->no_memory = 1;
        return;
    }
    SiteTotal *t = &j->sites[s];
    uint64_t duration = duration_of(g);
    t->launches++;
    t->gpu_ns += duration;
    if (!t->first || g->correlation_id < t->first)
        t->first = g->correlation_id;
    j->kernels[k].launches++;
    j->kernels[k].gpu_ns += duration;
}

/* ---- join.py's steps */

static void
join_remember(Join *j, uint32_t id, const void *site)
{
    MapEntry *entry = map_put(&j->recent, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = (uint64_t)(uintptr_t)site;
    if ((Py_ssize_t)j->recent.live > j->recent_window)
        map_remove(&j->recent, map_oldest(&j->recent)->key, NULL);
}

static void
join_retire_one(Join *j, uint32_t id, const void *site)
{
    if (map_remove(&j->pending, id, NULL))
        join_remember(j, id, site);
}

/* The calls nested in `id` leave the children table; each is retired when `retire` is set. */
static void
join_take_children(Join *j, uint32_t id, const void *site, int retire)
{
    MapEntry list;
    if (!map_remove(&j->children, id, &list))
        return;
    for (uint32_t node = (uint32_t)list.a; node != 0;) {
        IdNode child = j->ids[node - 1];
        j->ids[node - 1].next = j->id_free;
        j->id_free = node;
        if (retire)
            join_retire_one(j, child.id, site);
        node = child.next;
    }
}

/* _retire: joined, the launch and the calls nested around it leave the pending table. */
static void
join_retire(Join *j, uint32_t id, uint32_t parent, const void *site)
{
    join_retire_one(j, id, site);
    join_take_children(j, id, site, 1);
    if (parent) {
        join_retire_one(j, parent, site);
        join_take_children(j, parent, site, 1);
    }
}

/* _site_of: the site of a record with this correlation id (NULL: not known yet). */
static const void *
join_site_of(Join *j, uint32_t id)
{
    MapEntry *launch = map_find(&j->pending, id);
    if (launch != NULL) {
        const void *site = (const void *)(uintptr_t)launch->a;
        uint32_t parent = (uint32_t)launch->b;
        if (launch->b >> 32) {
            if (map_put(&j->graphs, id) == NULL)
                j->no_memory = 1;
        }
        else
            join_retire(j, id, parent, site);
        return site;
    }
    MapEntry *recent = map_find(&j->recent, id);
    if (recent != NULL)
        return (const void *)(uintptr_t)recent->a;
    if (map_remove(&j->externals, id, NULL)) { /* no external sites here: kname tags nothing */
        join_remember(j, id, j->unattributed);
        return j->unattributed;
    }
    return NULL;
}

/* _adopt: the records parked under `id` go to the site it now has. */
static void
join_adopt(Join *j, uint32_t id)
{
    MapEntry list;
    if (!map_remove(&j->orphans, id, &list))
        return;
    for (uint32_t node = (uint32_t)list.a; node != 0;) {
        RecordNode orphan = j->records[node - 1];
        j->records[node - 1].next = j->record_free;
        j->record_free = node;
        j->orphan_count--;
        const void *site = join_site_of(j, orphan.record.correlation_id);
        count_record(j, site != NULL ? site : j->unattributed, &orphan.record);
        node = orphan.next;
    }
}

static void
join_park(Join *j, const GpuRecord *g)
{
    if ((Py_ssize_t)j->orphan_count >= j->max_pending) {
        count_record(j, j->unattributed, g); /* past the bound: counted, not kept */
        return;
    }
    MapEntry *list = map_put(&j->orphans, g->correlation_id);
    if (list == NULL || !append_record(j, list, g)) {
        if (list != NULL && list->a == 0)
            map_remove(&j->orphans, g->correlation_id, NULL);
        j->no_memory = 1;
        count_record(j, j->unattributed, g);
        return;
    }
    j->orphan_count++;
}

/* _trim: past max_pending, the oldest tenth of the pending launches goes at once. */
static void
join_trim(Join *j)
{
    Py_ssize_t excess = (Py_ssize_t)j->pending.live - j->max_pending;
    if (excess <= 0)
        return;
    Py_ssize_t count = excess > j->max_pending / 10 ? excess : j->max_pending / 10;
    for (Py_ssize_t i = 0; i < count && j->pending.live; i++) {
        uint32_t id = map_oldest(&j->pending)->key;
        map_remove(&j->pending, id, NULL);
        join_take_children(j, id, NULL, 0);
    }
    j->dropped += (uint64_t)count;
    j->trimmed = 1;
}

/* add_launch */
static void
join_launch(Join *j, const Launch *launch, const void *site)
{
    uint32_t id = launch->correlation_id;
    j->launch_count++;
    if (!j->first || id < j->first)
        j->first = id;
    MapEntry *entry = map_put(&j->pending, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = (uint64_t)(uintptr_t)site;
    entry->b = (uint64_t)launch->parent | ((uint64_t)(launch->graph != 0) << 32);
    if (launch->parent) {
        MapEntry *list = map_put(&j->children, launch->parent);
        if (list == NULL || !append_id(j, list, id)) {
            if (list != NULL && list->a == 0)
                map_remove(&j->children, launch->parent, NULL);
            j->no_memory = 1;
        }
    }
    if (j->orphans.live && map_find(&j->orphans, id) != NULL)
        join_adopt(j, id);
    if ((Py_ssize_t)j->pending.live > j->max_pending)
        join_trim(j);
}

/* add_activities, for one record */
static void
join_record(Join *j, const GpuRecord *g)
{
    j->record_count++;
    const void *site = join_site_of(j, g->correlation_id);
    if (site == NULL)
        join_park(j, g);
    else
        count_record(j, site, g);
}

/* add_externals, for one link (there are no external sites: nothing was tagged) */
static void
join_external(Join *j, uint32_t id, uint64_t external_id)
{
    if (map_find(&j->pending, id) != NULL || map_find(&j->recent, id) != NULL)
        return; /* a launch record names it already */
    MapEntry *entry = map_put(&j->externals, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = external_id;
    if ((Py_ssize_t)j->externals.live > j->recent_window)
        map_remove(&j->externals, map_oldest(&j->externals)->key, NULL);
    join_adopt(j, id);
}

/* One buffer's records, as the collector hands them to the Python join: its external
 * correlations first, then its work. */
static void
join_records(Join *j, const GpuRecord *records, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (records[i].kind == GPU_EXTERNAL)
            join_external(j, records[i].correlation_id, records[i].start);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (records[i].kind != GPU_EXTERNAL)
            join_record(j, &records[i]);
    }
}

/* ---- a snapshot of the totals (profile()) */

typedef struct {
    uint32_t work;
    uint64_t launches, gpu_ns;
} KernelCount;

typedef struct {
    const void *site;
    uint32_t first;
    size_t start, count; /* its kernels in the snapshot's `kernels` */
} SiteCount;

typedef struct {
    SiteCount *sites;
    size_t site_count;
    KernelCount *kernels;
    size_t kernel_count, kernel_room;
    SiteCount unattributed;
    uint64_t unmatched, dropped, earlier;
} Snapshot;

static void
snapshot_free(Snapshot *s)
{
    free(s->sites);
    free(s->kernels);
    memset(s, 0, sizeof *s);
}

/* One more record counted in the snapshot's last site (the unattributed one, at its end). */
static int
snapshot_count(Snapshot *s, SiteCount *site, const GpuRecord *g)
{
    uint32_t work = work_of(g);
    KernelCount *kernel = NULL;
    for (size_t i = site->start; i < site->start + site->count; i++) {
        if (s->kernels[i].work == work)
            kernel = &s->kernels[i];
    }
    if (kernel == NULL) {
        if (!grow((void **)&s->kernels, &s->kernel_room, s->kernel_count, sizeof *s->kernels))
            return 0;
        kernel = &s->kernels[s->kernel_count++];
        *kernel = (KernelCount){work, 0, 0};
        site->count++;
    }
    if (!site->first || g->correlation_id < site->first)
        site->first = g->correlation_id;
    kernel->launches++;
    kernel->gpu_ns += duration_of(g);
    return 1;
}

static int
snapshot_site(Snapshot *s, const Join *j, const SiteTotal *t, SiteCount *into)
{
    *into = (SiteCount){t->site, t->first, s->kernel_count, 0};
    for (uint32_t k = t->head; k != 0; k = j->kernels[k - 1].next) {
        if (!grow((void **)&s->kernels, &s->kernel_room, s->kernel_count, sizeof *s->kernels))
            return 0;
        const KernelTotal *kernel = &j->kernels[k - 1];
        s->kernels[s->kernel_count++] = (KernelCount){kernel->work, kernel->launches,
                                                      kernel->gpu_ns};
        into->count++;
    }
    return 1;
}

/* profile(): the sites (but <unattributed>), and <unattributed> with the records still waiting
 * for their launch, but those older than every launch seen (counted as earlier). 0: no memory. */
static int
join_snapshot(const Join *j, Snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->sites = malloc((j->site_count ? j->site_count : 1) * sizeof *s->sites);
    if (s->sites == NULL)
        return 0;
    const SiteTotal *unattributed = NULL;
    for (size_t i = 0; i < j->site_count; i++) {
        if (j->sites[i].site == j->unattributed)
            unattributed = &j->sites[i];
        else if (!snapshot_site(s, j, &j->sites[i], &s->sites[s->site_count++]))
            return 0;
    }
    s->unattributed = (SiteCount){j->unattributed, 0, s->kernel_count, 0};
    if (unattributed != NULL && !snapshot_site(s, j, unattributed, &s->unattributed))
        return 0;
    for (size_t p = j->orphans.head; p < j->orphans.tail; p++) {
        const MapEntry *list = &j->orphans.entries[p];
        for (uint32_t node = list->live ? (uint32_t)list->a : 0; node != 0;
             node = j->records[node - 1].next) {
            const GpuRecord *orphan = &j->records[node - 1].record;
            if (j->first && orphan->correlation_id >= j->first) {
                if (!snapshot_count(s, &s->unattributed, orphan))
                    return 0;
            }
            else
                s->earlier++;
        }
    }
    for (size_t p = j->pending.head; p < j->pending.tail; p++) {
        const MapEntry *launch = &j->pending.entries[p];
        int graph_seen = (launch->b >> 32) && map_find(&j->graphs, launch->key) != NULL;
        s->unmatched += launch->live && !graph_seen;
    }
    s->dropped = j->dropped;
    return 1;
}

/* ------------------------------------------------------------------ Recorder */

typedef struct {
    PyObject_HEAD
    uint64_t serial;
    PyObject *api_names; /* tuple of str, by api index */
    uint8_t *graph_of;   /* by api index */
    Py_ssize_t api_count;
    PyObject *sites, *kinds, *site_of_frame, *site_key, *no_frame, *unnamed;
    PyObject *kept; /* dict: every site name recorded, name -> name */
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

    RecordLayout record_layout, activity_layout, external_layout;
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

/* Keep a fault for take_fault(), unless one is kept already (report_fault says each kind once).
 * With the GIL: the exception set now, cleared. */
static void
note_fault(Recorder *r, const char *where)
{
    PyObject *exc = take_error();
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        r->fault = exc;
        r->fault_where = where;
        exc = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    Py_XDECREF(exc);
}

/* The same for a fault of CUPTI's, said in words (no GIL needed). */
static void
note_c_fault(Recorder *r, const char *where, const char *detail, long status)
{
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        snprintf(r->fault_detail, sizeof r->fault_detail, "%s (status %ld)", detail, status);
        r->fault_where = where;
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- the buffer: every function here runs under r->lock */

/* Room for `needed` records, growing the buffer up to max_pending. 0: no room (no memory). */
static int
make_room(Recorder *r, Py_ssize_t needed)
{
    if (needed <= r->capacity)
        return 1;
    Py_ssize_t capacity = r->capacity ? r->capacity : FIRST_ROOM;
    while (capacity < needed)
        capacity *= 2;
    if (capacity > r->max_pending)
        capacity = r->max_pending;
    Launch *grown = realloc(r->records, (size_t)capacity * sizeof(Launch));
    if (grown == NULL)
        return 0;
    r->records = grown;
    r->capacity = capacity;
    return 1;
}

/* Room for one more call to finish later: 1, or 0 when it is not to be recorded. */
static int
reserve(Recorder *r)
{
    int reserved = 0, no_memory = 0;
    pthread_mutex_lock(&r->lock);
    if (r->count + r->open >= r->max_pending)
        r->dropped++;
    else if (!make_room(r, r->count + r->open + 1))
        no_memory = 1;
    else {
        r->open++;
        reserved = 1;
    }
    pthread_mutex_unlock(&r->lock);
    if (no_memory)
        note_c_fault(r, RECORDING, "no memory for another launch record", 0);
    return reserved;
}

/* A reserved call finished: into the buffer (the room is there). */
static void
finish(Recorder *r, const Launch *launch)
{
    pthread_mutex_lock(&r->lock);
    r->records[r->count++] = *launch;
    r->open--;
    pthread_mutex_unlock(&r->lock);
}

/* The finished calls taken out of the buffer (a copy, *count of them; NULL when none, or, with
 * *count left above 0, no memory: they stay). Any thread. */
static Launch *
take_finished(Recorder *r, Py_ssize_t *count)
{
    pthread_mutex_lock(&r->lock);
    *count = r->count;
    Launch *taken = *count ? malloc((size_t)*count * sizeof(Launch)) : NULL;
    if (taken != NULL) {
        memcpy(taken, r->records, (size_t)*count * sizeof(Launch));
        r->count = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return taken;
}

/* ---- the site of a launch, with the GIL held */

/* Where `kept` holds a name equal to `name`, that one (borrowed); NULL with an error. */
static PyObject *
keep(Recorder *r, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a call site's name is a %.100s, not a str",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    PyObject *kept = PyDict_GetItemWithError(r->kept, name);
    if (kept != NULL || PyErr_Occurred())
        return kept;
    if (PyDict_SetItem(r->kept, name, name) < 0)
        return NULL;
    return name;
}

static inline RecentSite *
recent_slot(Recorder *r, void *code, int lasti)
{
    uintptr_t h = ((uintptr_t)code >> 4) * 31u ^ (uintptr_t)lasti;
    return &r->recent[(h ^ (h >> 9)) & (RECENT - 1)];
}

static inline RecentKind *
recent_kind_slot(Recorder *r, void *code)
{
    uintptr_t h = (uintptr_t)code >> 4;
    return &r->recent_kinds[(h ^ (h >> 8)) & (RECENT - 1)];
}

/* The name of sites[(id(code), f_lasti, site_key)] of `frame` (borrowed, kept); NULL without an
 * error: no such site; NULL with one: an error. */
static PyObject *
lookup(Recorder *r, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    int lasti = frame_lasti(frame);
    uint64_t generation = generation_of(r->sites);
    RecentSite *entry = recent_slot(r, code, lasti);
    if (r->remember && entry->code == (void *)code && entry->lasti == lasti
        && entry->generation == generation)
        return entry->name;
    PyObject *key = Py_BuildValue("(NiO)", PyLong_FromVoidPtr(code), lasti, r->site_key);
    if (key == NULL)
        return NULL;
    PyObject *site = Py_XNewRef(PyDict_GetItemWithError(r->sites, key));
    Py_DECREF(key);
    if (site == NULL && PyErr_Occurred())
        return NULL;
    PyObject *name = NULL;
    if (site != NULL) {
        PyObject *found = PyObject_GetAttr(site, str_name);
        Py_DECREF(site);
        if (found == NULL)
            return NULL;
        name = keep(r, found);
        Py_DECREF(found);
        if (name == NULL)
            return NULL;
    }
    if (r->remember)
        *entry = (RecentSite){code, lasti, generation, name};
    return name;
}

/* The kind kname.callsite decided for `frame`'s code: USER, LIBRARY, PLUMBING, or -1 when it has
 * not decided (or decided something else, as for kname's own wrapper); -2 on error. */
static int
kind_of(Recorder *r, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    uint64_t generation = generation_of(r->kinds);
    RecentKind *entry = recent_kind_slot(r, code);
    if (r->remember && entry->code == (void *)code && entry->generation == generation)
        return entry->kind;
    int kind = decided_kind(r->kinds, code);
    if (r->remember && kind != -2)
        *entry = (RecentKind){code, generation, kind};
    return kind;
}

/* The cached site of a launch made while `frame` runs, as capture.site_of_frame finds it: the
 * frame's own key, or, from library code, the first user frame's above. Borrowed name; NULL
 * without an error when Python must decide. */
static PyObject *
cached_site(Recorder *r, Frame *frame)
{
    PyObject *name = lookup(r, frame);
    if (name != NULL || PyErr_Occurred())
        return name;
    int kind = kind_of(r, frame);
    if (!PASSED_OVER(kind))
        return NULL; /* a user frame with no site yet, undecided, or an error */
    Frame *f = frame_back(frame);
    for (int depth = 0; f != NULL && depth < MAX_WALK; depth++) {
        kind = kind_of(r, f);
        if (kind == KIND_USER)
            return lookup(r, f);
        if (!PASSED_OVER(kind))
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* The site of a launch made now on this thread, which holds the GIL (borrowed; NULL: no Python
 * frame). Never fails: a fault is kept and the launch is named `unnamed`. */
static PyObject *
site_of_running_frame(Recorder *r)
{
    Frame *frame = frame_current(); /* no frame object made: see _native_common.h */
    if (frame == NULL)
        return NULL;
    PyObject *pending = take_error(); /* a CUDA call made while an exception is being handled */
    PyObject *name = cached_site(r, frame);
    if (name == NULL && PyErr_Occurred())
        note_fault(r, FINDING);
    if (name == NULL) {
        /* The slow path, once per call site: kname's own rules, in Python, which takes the
         * frame object (made now, if it was not yet). */
        PyObject *found = PyObject_CallOneArg(r->site_of_frame, (PyObject *)PyEval_GetFrame());
        if (found != NULL) {
            name = keep(r, found);
            Py_DECREF(found);
        }
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
                PyErr_Clear();
                PyErr_SetInterrupt(); /* not lost: raised again at the program's next check */
            }
            else
                note_fault(r, FINDING);
            name = r->unnamed;
        }
    }
    restore_error(pending);
    return name;
}

/* Whether this thread holds the GIL now. Not PyGILState_Check(): once a sub-interpreter has
 * been made, that says yes on every thread. */
static int
gil_held_here(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *current = PyThreadState_GetUnchecked();
#else
    PyThreadState *current = _PyThreadState_UncheckedGet();
#endif
    /* 3.11: the thread state holding the GIL, whichever thread's; 3.12+: this thread's. */
    return current != NULL && current->thread_id == PyThread_get_thread_ident();
}

/* The site of a launch whose call is not nested and not wrapped (borrowed; NULL: no frame). */
static PyObject *
site_here(Recorder *r, ThreadCalls *t)
{
    if (t->naming)
        return r->unnamed; /* a launch API called by kname's own naming code: not walked again */
    if (PyGILState_GetThisThreadState() == NULL)
        return NULL; /* a thread Python never ran on (a C++ worker): no frame, no GIL needed */
    int held = gil_held_here();
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    if (!held)
        gil = PyGILState_Ensure();
    t->naming = 1;
    PyObject *site = site_of_running_frame(r);
    t->naming = 0;
    if (!held)
        PyGILState_Release(gil);
    return site;
}

/* ---- enter and exit: what the CUPTI callback calls (and the test methods) */

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

/* An exit was missed: no stale outer call may name later launches. The recorded ones are kept
 * with no end time, as the Python capture keeps them. */
static void
forget_open_calls(Recorder *r, ThreadCalls *t)
{
    for (int i = 0; i < t->count; i++) {
        if (t->calls[i].recorded)
            finish(r, &t->calls[i].launch);
    }
    t->count = 0;
    pthread_mutex_lock(&r->lock);
    r->forgot_open_calls = 1;
    pthread_mutex_unlock(&r->lock);
}

static void
launch_enter(Recorder *r, uint32_t correlation_id, int api, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    if (t->count >= r->max_open)
        forget_open_calls(r, t);
    Launch launch = {timestamp, 0, PyThread_get_thread_ident(), NULL, correlation_id, 0,
                     (uint16_t)api, r->graph_of[api]};
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
        if (t->count >= r->max_open) /* Python ran meanwhile, and launched more */
            forget_open_calls(r, t);
    }
    OpenCall *call = &t->calls[t->count++];
    call->launch = launch;
    call->recorded = reserve(r);
}

static void
launch_exit(Recorder *r, uint32_t correlation_id, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    for (int i = t->count - 1; i >= 0; i--) {
        if (t->calls[i].launch.correlation_id != correlation_id)
            continue;
        OpenCall call = t->calls[i];
        memmove(&t->calls[i], &t->calls[i + 1], (size_t)(t->count - i - 1) * sizeof(OpenCall));
        t->count--;
        if (call.recorded) {
            call.launch.end = timestamp;
            finish(r, &call.launch);
        }
        return;
    }
}

static inline int
api_of(Recorder *r, kn_CallbackDomain domain, kn_CallbackId cbid)
{
    if (domain > 2 || cbid >= MAX_CBID)
        return -1;
    return (int)r->apis_of[domain][cbid] - 1;
}

/* What CUPTI calls. Never raises, never fails the CUDA call. */
static void
on_api(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *cbdata)
{
    Recorder *r = (Recorder *)userdata;
    const kn_CallbackData *data = (const kn_CallbackData *)cbdata;
    if (r == NULL || data == NULL || must_not_touch_python(r))
        return;
    uint64_t timestamp = 0;
    kn_CUptiResult status = r->get_timestamp(&timestamp);
    if (status != KN_CUPTI_SUCCESS) {
        note_c_fault(r, RECORDING, "cuptiGetTimestamp failed", (long)status);
        timestamp = 0;
    }
    if (data->callbackSite == KN_CUPTI_API_ENTER) {
        int api = api_of(r, domain, cbid);
        if (api >= 0)
            launch_enter(r, data->correlationId, api, timestamp);
    }
    else if (data->callbackSite == KN_CUPTI_API_EXIT) {
        launch_exit(r, data->correlationId, timestamp);
    }
}

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
    calls_of(r)->wrapped = kept;
    Py_RETURN_NONE;
}

static PyObject *
recorder_unmark(Recorder *r, PyObject *unused)
{
    (void)unused;
    calls_of(r)->wrapped = NULL;
    Py_RETURN_NONE;
}

/* ---- a wrapped launch's push and pop, in C */

/* push() or pop() of the launches kname wraps at one site: what capture's closures do when the
 * marks are this recorder's and no external correlation is pushed, with no Python frame and no
 * look-up per call. push: nvtx_push() (when given), then the site marked on this thread; pop: the
 * mark removed, then nvtx_pop(). An error from an NVTX call is the call's (the launch wrapper
 * says it), as from the closures. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Recorder *recorder;
    PyObject *name; /* held by the recorder's `kept` too: `wrapped` may point at it */
    PyObject *nvtx; /* NULL: no range */
    int is_pop;
} SiteCall;

static PyObject *
site_call_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)args;
    SiteCall *call = (SiteCall *)op;
    if (call->recorder == NULL) { /* cleared by the collector, yet called from a finalizer */
        PyErr_SetString(PyExc_RuntimeError, "kname site call used after it was cleared");
        return NULL;
    }
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, call->is_pop ? "pop() takes no arguments"
                                                      : "push() takes no arguments");
        return NULL;
    }
    if (call->is_pop)
        calls_of(call->recorder)->wrapped = NULL;
    if (call->nvtx != NULL) {
        PyObject *result = PyObject_CallNoArgs(call->nvtx);
        if (result == NULL)
            return NULL;
        Py_DECREF(result);
    }
    if (!call->is_pop)
        calls_of(call->recorder)->wrapped = call->name;
    Py_RETURN_NONE;
}

static int
site_call_traverse(SiteCall *call, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(call));
    Py_VISIT(call->recorder);
    Py_VISIT(call->name);
    Py_VISIT(call->nvtx);
    return 0;
}

static int
site_call_clear(SiteCall *call)
{
    Py_CLEAR(call->recorder);
    Py_CLEAR(call->name);
    Py_CLEAR(call->nvtx);
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
    return PyUnicode_FromFormat("<kname profile %s of %R>", call->is_pop ? "pop" : "push",
                                call->name);
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
    call->recorder = (Recorder *)Py_NewRef((PyObject *)r);
    call->name = Py_NewRef(name);
    call->nvtx = nvtx == Py_None ? NULL : Py_NewRef(nvtx);
    call->is_pop = is_pop;
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

/* ---- records as Python objects */

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        return 0;
    }
    int plain = 0;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        plain = member->type == MEMBER_OBJECT_EX && !(member->flags & MEMBER_READONLY);
        *offset = member->offset;
    }
    Py_DECREF(descr);
    return plain;
}

static void
learn_record_layout(RecordLayout *layout, PyTypeObject *type)
{
    Py_INCREF(type);
    Py_XSETREF(layout->type, type);
    layout->fast = type->tp_new == PyBaseObject_Type.tp_new
                   && type->tp_setattro == PyObject_GenericSetAttr
                   && !PyObject_HasAttrString((PyObject *)type, "__post_init__");
    for (int i = 0; i < layout->count; i++)
        layout->fast = layout->fast && slot_offset(type, layout->fields[i], &layout->offset[i]);
    layout->version = valid_version_tag(type); /* after the look-ups, which give it one */
    layout->fast = layout->fast && layout->version != 0;
}

static void
init_layout(RecordLayout *layout, const char *const *fields)
{
    layout->fields = fields;
    for (layout->count = 0; fields[layout->count] != NULL; layout->count++)
        ;
}

/* make_record(*args), args being layout->count references it steals; NULL (an error set) when
 * one is NULL (it failed to be made) or the record cannot be made. */
static PyObject *
make(RecordLayout *layout, PyObject *make_record, PyObject **args)
{
    int count = layout->count;
    PyObject *record = NULL;
    for (int i = 0; i < count; i++) {
        if (args[i] == NULL)
            goto done;
    }
    PyTypeObject *type = (PyTypeObject *)make_record;
    if (PyType_Check(make_record)
        && (layout->type != type || layout->version != valid_version_tag(type)))
        learn_record_layout(layout, type);
    if (layout->type == type && layout->fast) {
        record = type->tp_alloc(type, 0);
        if (record != NULL) {
            for (int i = 0; i < count; i++)
                *(PyObject **)((char *)record + layout->offset[i]) = args[i];
            return record;
        }
    }
    else {
        record = PyObject_Vectorcall(make_record, args, (size_t)count, NULL);
    }
done:
    for (int i = 0; i < count; i++)
        Py_XDECREF(args[i]);
    return record;
}

static PyObject *
record_of(Recorder *r, PyObject *make_record, const Launch *launch)
{
    PyObject *args[FIELDS] = {
        PyLong_FromUnsignedLong(launch->correlation_id),
        PyLong_FromUnsignedLong(launch->thread),
        Py_NewRef(launch->site != NULL ? launch->site : r->no_frame),
        Py_NewRef(PyTuple_GET_ITEM(r->api_names, launch->api)),
        PyLong_FromUnsignedLongLong(launch->start),
        PyLong_FromUnsignedLongLong(launch->end),
        Py_NewRef(launch->graph ? Py_True : Py_False),
        PyLong_FromUnsignedLong(launch->parent),
    };
    return make(&r->record_layout, make_record, args);
}

static PyObject *
recorder_drain(Recorder *r, PyObject *make_record)
{
    Py_ssize_t count;
    Launch *taken = take_finished(r, &count);
    if (count && taken == NULL)
        return PyErr_NoMemory(); /* the records stay for the next drain */
    PyObject *list = PyList_New(count);
    for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
        PyObject *record = record_of(r, make_record, &taken[i]);
        if (record == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, record);
    }
    free(taken);
    return list;
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
    pthread_mutex_lock(&r->lock);
    Py_ssize_t count = r->count, open = r->open;
    unsigned long long dropped = r->dropped;
    pthread_mutex_unlock(&r->lock);
    return Py_BuildValue("{snsnsK}", "finished", count, "open", open, "dropped", dropped);
}

/* ---- CUPTI */

static void *
symbol(Recorder *r, const char *name)
{
    void *found = dlsym(r->library, name);
    if (found == NULL)
        PyErr_Format(PyExc_OSError, "libcupti has no %s", name);
    return found;
}

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
    r->apis_of[domain][cbid] = (uint16_t)(api + 1); /* before CUPTI may call back with it */
    kn_CUptiResult status;
    kn_SubscriberHandle subscriber = r->subscriber;
    Py_BEGIN_ALLOW_THREADS
    status = r->enable_callback(1, subscriber, domain, cbid);
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

/* ------------------------------------------------------------------ activity buffers */

/* CUPTI's buffer callbacks take no userdata: the recorder they feed is `buffers_owner`, held (a
 * strong reference) from take_activity_buffers() to release_activity_buffers(). The lock is held
 * while a buffer is read and handed over, which takes the GIL: Python code takes the lock only
 * with the GIL released. */
static pthread_mutex_t buffers_lock = PTHREAD_MUTEX_INITIALIZER;
static Recorder *buffers_owner;
static atomic_size_t buffer_bytes;

static char name_none[] = "<unnamed kernel>";
static char name_past_bound[] = "<kname: more kernel names than it keeps>";

/* ---- kernel names: every function here runs under r->activity_lock */

static uint64_t
text_hash(const char *text, size_t length)
{
    uint64_t hash = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < length; i++) {
        hash ^= (unsigned char)text[i];
        hash *= 0x100000001b3u;
    }
    return hash;
}

static void
names_free(Names *n)
{
    for (size_t i = FIRST_NAME; i < n->count; i++)
        free(n->text[i]);
    free(n->text);
    free(n->hash);
    free(n->slots);
    memset(n, 0, sizeof *n);
}

/* The table made, with its two fixed names; 0: no memory. */
static int
names_init(Names *n)
{
    if (n->text != NULL)
        return 1;
    n->room = 1024;
    n->slot_count = 2048;
    n->text = malloc(n->room * sizeof *n->text);
    n->hash = malloc(n->room * sizeof *n->hash);
    n->slots = calloc(n->slot_count, sizeof *n->slots);
    if (n->text == NULL || n->hash == NULL || n->slots == NULL) {
        names_free(n);
        return 0;
    }
    n->text[NAME_NONE] = name_none;
    n->text[NAME_PAST_BOUND] = name_past_bound;
    n->hash[NAME_NONE] = n->hash[NAME_PAST_BOUND] = 0;
    n->count = FIRST_NAME; /* the fixed names are never looked up: not in the slots */
    return 1;
}

static void
names_place(Names *n, uint32_t index)
{
    size_t mask = n->slot_count - 1;
    size_t i = n->hash[index] & mask;
    while (n->slots[i] != 0)
        i = (i + 1) & mask;
    n->slots[i] = index + 1;
}

/* Room for one more name; 0: no memory. */
static int
names_grow(Names *n)
{
    if (n->count == n->room) {
        char **text = realloc(n->text, 2 * n->room * sizeof *text);
        if (text == NULL)
            return 0;
        n->text = text;
        uint64_t *hash = realloc(n->hash, 2 * n->room * sizeof *hash);
        if (hash == NULL)
            return 0;
        n->hash = hash;
        n->room *= 2;
    }
    if ((n->count + 1) * 2 > n->slot_count) { /* kept at most half full */
        uint32_t *slots = calloc(2 * n->slot_count, sizeof *slots);
        if (slots == NULL)
            return 0;
        free(n->slots);
        n->slots = slots;
        n->slot_count *= 2;
        for (size_t i = FIRST_NAME; i < n->count; i++)
            names_place(n, (uint32_t)i);
    }
    return 1;
}

/* The index of the kept copy of `name`, a copy made now where it is new. */
static uint32_t
intern_name(Names *n, const char *name)
{
    if (name == NULL)
        return NAME_NONE;
    size_t at = ((uintptr_t)name >> 3) & (NAME_CACHE - 1);
    if (n->recent[at].pointer == name && strcmp(n->text[n->recent[at].index], name) == 0)
        return n->recent[at].index;
    size_t length = strlen(name);
    uint64_t hash = text_hash(name, length);
    size_t mask = n->slot_count - 1;
    uint32_t index = NAME_NONE;
    for (size_t i = hash & mask; n->slots[i] != 0 && index == NAME_NONE; i = (i + 1) & mask) {
        uint32_t found = n->slots[i] - 1;
        if (n->hash[found] == hash && strcmp(n->text[found], name) == 0)
            index = found;
    }
    if (index == NAME_NONE) {
        char *copy = NULL;
        if (n->count < FIRST_NAME + MAX_NAMES && n->bytes + length + 1 <= MAX_NAME_BYTES && names_grow(n))
            copy = malloc(length + 1);
        if (copy == NULL) {
            n->past_bound++;
            return NAME_PAST_BOUND;
        }
        memcpy(copy, name, length + 1);
        index = (uint32_t)n->count++;
        n->text[index] = copy;
        n->hash[index] = hash;
        n->bytes += length + 1;
        names_place(n, index);
    }
    n->recent[at].pointer = name;
    n->recent[at].index = index;
    return index;
}

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
    } while (0)

static void
keep_record(Recorder *r, const kn_Activity *record)
{
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

/* With the join in C: the calls finished so far, then the GPU records read, joined (what the
 * collector does with a buffer on the Python join). Any thread, no GIL. */
static void
join_buffer(Recorder *r)
{
    pthread_mutex_lock(&r->activity_lock);
    if (r->join.on) {
        Py_ssize_t count;
        Launch *taken = take_finished(r, &count);
        if (count && taken == NULL)
            r->join.no_memory = 1; /* they stay for the next buffer */
        for (Py_ssize_t i = 0; i < count && taken != NULL; i++) {
            const void *site = taken[i].site != NULL ? taken[i].site : r->no_frame;
            join_launch(&r->join, &taken[i], site);
        }
        free(taken);
        join_records(&r->join, r->gpu, r->gpu_count);
        r->gpu_count = 0;
    }
    pthread_mutex_unlock(&r->activity_lock);
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
        if (r->join.on)
            join_buffer(r); /* on is set before the buffers are taken, never unset */
        else if (r->on_buffer != NULL && !must_not_touch_python(r))
            hand_over(r);
    }
    pthread_mutex_unlock(&buffers_lock);
    free(buffer);
}

/* ---- records as Python objects, with the GIL */

/* The str of kernel name `index` (a new reference), made once. */
static PyObject *
kernel_name(Recorder *r, uint32_t index)
{
    if (index >= r->name_objects_room) {
        size_t room = r->name_objects_room ? 2 * r->name_objects_room : 256;
        while (room <= index)
            room *= 2;
        PyObject **grown = realloc(r->name_objects, room * sizeof *grown);
        if (grown == NULL)
            return PyErr_NoMemory();
        memset(grown + r->name_objects_room, 0, (room - r->name_objects_room) * sizeof *grown);
        r->name_objects = grown;
        r->name_objects_room = room;
    }
    if (r->name_objects[index] == NULL) {
        pthread_mutex_lock(&r->activity_lock); /* the table may be growing: its text never moves */
        const char *text = r->names.text[index];
        pthread_mutex_unlock(&r->activity_lock);
        r->name_objects[index] = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
        if (r->name_objects[index] == NULL)
            return NULL;
    }
    return Py_NewRef(r->name_objects[index]);
}

/* memcpy_name(copy_kind) (a new reference), asked once per copy kind. */
static PyObject *
copy_name(Recorder *r, PyObject *memcpy_name, uint32_t copy_kind)
{
    if (copy_kind < COPY_KINDS && r->copy_names[copy_kind] != NULL)
        return Py_NewRef(r->copy_names[copy_kind]);
    PyObject *kind = PyLong_FromUnsignedLong(copy_kind);
    if (kind == NULL)
        return NULL;
    PyObject *name = PyObject_CallOneArg(memcpy_name, kind);
    Py_DECREF(kind);
    if (name != NULL && !PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "memcpy_name() gave a %.100s, not a str",
                     Py_TYPE(name)->tp_name);
        Py_CLEAR(name);
    }
    if (name != NULL && copy_kind < COPY_KINDS)
        r->copy_names[copy_kind] = Py_NewRef(name);
    return name;
}

static PyObject *
gpu_object(Recorder *r, const GpuRecord *g, PyObject *make_activity, PyObject *make_external,
           PyObject *memcpy_name)
{
    if (g->kind == GPU_EXTERNAL) {
        PyObject *args[FIELDS] = {
            PyLong_FromUnsignedLong(g->correlation_id),
            PyLong_FromUnsignedLongLong(g->start),
        };
        return make(&r->external_layout, make_external, args);
    }
    PyObject *kind, *name;
    if (g->kind == GPU_KERNEL) {
        kind = str_kernel;
        name = kernel_name(r, g->detail);
    }
    else if (g->kind == GPU_MEMCPY) {
        kind = str_memcpy;
        name = copy_name(r, memcpy_name, g->detail);
    }
    else {
        kind = str_memset;
        name = Py_NewRef(str_memset_name);
    }
    PyObject *args[FIELDS] = {
        Py_NewRef(kind),
        PyLong_FromUnsignedLong(g->correlation_id),
        name,
        PyLong_FromUnsignedLongLong(g->start),
        PyLong_FromUnsignedLongLong(g->end),
        PyLong_FromUnsignedLong(g->stream),
        PyLong_FromUnsignedLong(g->device),
        PyLong_FromUnsignedLong(g->graph_id),
    };
    return make(&r->activity_layout, make_activity, args);
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

/* join_in_c(max_pending, recent_window, unattributed): from now on the GPU records are joined
 * here (join.py's bounds; `unattributed`, its name for what no launch claims), not handed over;
 * take_activity_buffers() follows, with no on_buffer. */
static PyObject *
recorder_join_in_c(Recorder *r, PyObject *args)
{
    Py_ssize_t max_pending, recent_window;
    PyObject *unattributed;
    if (!PyArg_ParseTuple(args, "nnU:join_in_c", &max_pending, &recent_window, &unattributed))
        return NULL;
    if (max_pending < 1 || recent_window < 1) {
        PyErr_SetString(PyExc_ValueError, "join_in_c: max_pending and recent_window must be at "
                                          "least 1");
        return NULL;
    }
    PyObject *kept = keep(r, unattributed);
    if (kept == NULL)
        return NULL;
    pthread_mutex_lock(&r->activity_lock);
    r->join.max_pending = max_pending;
    r->join.recent_window = recent_window;
    r->join.unattributed = kept;
    r->join.on = 1;
    pthread_mutex_unlock(&r->activity_lock);
    Py_RETURN_NONE;
}

/* join_now(): the calls finished and the GPU records read so far, joined now. */
static PyObject *
recorder_join_now(Recorder *r, PyObject *unused)
{
    (void)unused;
    if (atomic_load(&forks) == r->forks) /* a forked child: its parent reports them */
        join_buffer(r);
    Py_RETURN_NONE;
}

static PyObject *
recorder_join_counts(Recorder *r, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&r->activity_lock);
    const Join *j = &r->join;
    PyObject *counts = Py_BuildValue(
        "{sKsKsKsnsnsnsnsnsnsisi}", "launches", j->launch_count, "records", j->record_count,
        "dropped", j->dropped, "pending", (Py_ssize_t)j->pending.live, "children",
        (Py_ssize_t)j->children.live, "recent", (Py_ssize_t)j->recent.live, "externals",
        (Py_ssize_t)j->externals.live, "orphans", (Py_ssize_t)j->orphan_count, "graphs",
        (Py_ssize_t)j->graphs.live, "trimmed", j->trimmed, "no_memory", j->no_memory);
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

/* (first, [(kernel name, launches, gpu_ns), ...]) of one site of the snapshot. */
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
    return kernels == NULL ? NULL : Py_BuildValue("(kN)", (unsigned long)site->first, kernels);
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
    {"site_calls", (PyCFunction)recorder_site_calls, METH_VARARGS,
     "site_calls(name, nvtx_push, nvtx_pop) -> (push, pop): a wrapped launch's calls in C, "
     "push = nvtx_push() then mark(name), pop = unmark() then nvtx_pop() (None: no NVTX call)."},
    {"drain", (PyCFunction)recorder_drain, METH_O,
     "drain(make_record) -> list: the finished calls, as make_record(correlation_id, thread, "
     "site, api, start, end, graph, parent), in the order they finished; open ones stay."},
    {"take_fault", (PyCFunction)recorder_take_fault, METH_NOARGS,
     "take_fault() -> (where, exception) the first time a fault happened, else None."},
    {"take_forgotten", (PyCFunction)recorder_take_forgotten, METH_NOARGS,
     "take_forgotten() -> bool: whether open calls were forgotten (an exit missed) since."},
    {"counts", (PyCFunction)recorder_counts, METH_NOARGS,
     "counts() -> {'finished', 'open', 'dropped'}: records waiting, calls open, calls dropped."},
    {"subscribe", (PyCFunction)recorder_subscribe, METH_VARARGS,
     "subscribe(libcupti_path) -> (status, holder or None)."},
    {"enable", (PyCFunction)recorder_enable, METH_VARARGS,
     "enable(domain, cbid, api) -> status."},
    {"unsubscribe", (PyCFunction)recorder_unsubscribe, METH_NOARGS, "unsubscribe() -> status."},
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
     "device, graph_id) and make_external(correlation_id, external_id); memcpy_name(copy_kind) "
     "names a copy (asked once per kind)."},
    {"join_in_c", (PyCFunction)recorder_join_in_c, METH_VARARGS,
     "join_in_c(max_pending, recent_window, unattributed): GPU records are joined in C from now "
     "on (kname.profiling.join's rules and bounds), not handed over."},
    {"join_now", (PyCFunction)recorder_join_now, METH_NOARGS,
     "join_now(): the finished calls, then the GPU records read so far, joined now."},
    {"join_counts", (PyCFunction)recorder_join_counts, METH_NOARGS,
     "join_counts() -> dict: the join's launches and records seen, launches dropped at the "
     "bound, the size of each of its tables, and whether it trimmed or lacked memory."},
    {"join_profile", (PyCFunction)recorder_join_profile, METH_O,
     "join_profile(memcpy_name) -> (sites, unattributed, unmatched, dropped, earlier): the join's "
     "totals: sites [(name, first, [(kernel, launches, gpu_ns)])], unattributed (first, "
     "kernels)."},
    {"activity_counts", (PyCFunction)recorder_activity_counts, METH_NOARGS,
     "activity_counts() -> {'waiting', 'dropped', 'cupti_dropped', 'names', "
     "'names_past_bound'}: GPU records waiting, not kept past the bound, dropped by CUPTI; kernel "
     "names kept, and kernel records named past their bound."},
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
    if (count > UINT16_MAX) { /* none: a recorder of activity buffers alone */
        Py_DECREF(pairs);
        PyErr_SetString(PyExc_ValueError, "Recorder: apis must be at most 65535 (name, graph) "
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
    init_layout(&r->record_layout, launch_fields);
    init_layout(&r->activity_layout, activity_fields);
    init_layout(&r->external_layout, external_fields);
    r->serial = next_serial++;
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
    Py_VISIT(r->site_key);
    Py_VISIT(r->no_frame);
    Py_VISIT(r->unnamed);
    Py_VISIT(r->kept);
    Py_VISIT(r->fault);
    Py_VISIT(r->record_layout.type);
    Py_VISIT(r->activity_layout.type);
    Py_VISIT(r->external_layout.type);
    Py_VISIT(r->on_buffer);
    for (int i = 0; i < COPY_KINDS; i++)
        Py_VISIT(r->copy_names[i]);
    return 0;
}

static int
recorder_clear(Recorder *r)
{
    /* The records point into `kept`: none may be read once it goes. */
    pthread_mutex_lock(&r->lock);
    r->count = 0;
    pthread_mutex_unlock(&r->lock);
    memset(r->recent, 0, sizeof r->recent);
    Py_CLEAR(r->api_names);
    Py_CLEAR(r->sites);
    Py_CLEAR(r->kinds);
    Py_CLEAR(r->site_of_frame);
    Py_CLEAR(r->site_key);
    Py_CLEAR(r->no_frame);
    Py_CLEAR(r->unnamed);
    Py_CLEAR(r->kept);
    Py_CLEAR(r->fault);
    Py_CLEAR(r->record_layout.type);
    Py_CLEAR(r->activity_layout.type);
    Py_CLEAR(r->external_layout.type);
    r->record_layout.fast = r->activity_layout.fast = r->external_layout.fast = 0;
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
    free(r->records);
    free(r->graph_of);
    free(r->gpu);
    free(r->name_objects);
    names_free(&r->names);
    join_free(&r->join);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->activity_lock);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.Recorder",
    .tp_doc = "Recorder(apis, sites, kinds, site_of_frame, site_key, no_frame, unnamed, "
              "max_pending, max_open_calls): kname profile's CUPTI launch callback (see "
              "kname/_native_cupti.c).",
    .tp_basicsize = sizeof(Recorder),
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)recorder_traverse,
    .tp_clear = (inquiry)recorder_clear,
    .tp_methods = recorder_methods,
    .tp_new = recorder_new,
};

/* ------------------------------------------------------------------ module */

static void
interpreter_finalized(void)
{
    atomic_store(&python_gone, 1);
}

static void
in_forked_child(void)
{
    atomic_fetch_add(&forks, 1);
    /* CUPTI's thread, which may have held it, is not in the child. */
    pthread_mutex_init(&buffers_lock, NULL);
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._native_cupti",
    .m_doc = "kname profile's CUPTI launch callback in C (see kname/_native_cupti.c).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__native_cupti(void)
{
#ifdef Py_GIL_DISABLED
    /* The recent tables, `kept` and the learned sites rely on the GIL. */
    PyErr_SetString(PyExc_ImportError,
                    "kname._native_cupti does not support free-threaded Python");
    return NULL;
#else
    static int once = 0;
    if (!once) {
        str_name = PyUnicode_InternFromString("name");
        str_kernel = PyUnicode_InternFromString("kernel");
        str_memcpy = PyUnicode_InternFromString("memcpy");
        str_memset = PyUnicode_InternFromString("memset");
        str_memset_name = PyUnicode_InternFromString("[memset]");
        if (str_name == NULL || str_kernel == NULL || str_memcpy == NULL || str_memset == NULL
            || str_memset_name == NULL || PyType_Ready(&RecorderType) < 0
            || PyType_Ready(&SiteCallType) < 0)
            return NULL;
        /* Without these (no room left), finalizing() and the collector's stop still hold. */
        (void)Py_AtExit(interpreter_finalized);
        (void)pthread_atfork(NULL, NULL, in_forked_child);
        watch_dicts();
        once = 1;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Recorder", (PyObject *)&RecorderType) < 0
        || PyModule_AddIntConstant(m, "MAX_OPEN", MAX_OPEN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
#endif
}
