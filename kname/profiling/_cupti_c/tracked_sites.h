/*
 * What torch_tracker.c keeps of torch's tracked allocations (`tracked`: the events waiting, the
 * misses, the known sites, the owner), and its table of known sites: the name of a block
 * allocated at an instruction, found again without the GIL from the allocating thread's own
 * frames (known_site), and learnt under the GIL from a miss's recorded frames by the dicts
 * (chain_site, remember_known). torch_tracker.c's header comment tells the whole flow.
 */
#pragma once

#include "profiling/_cupti_c/torch_memory.h" /* first: it includes Python.h */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define CHAIN MAX_WALK     /* frames kept of a block whose line is not known yet */
#define WALK_KEPT 32       /* library frames a known site may pass to its user frame */
#define BUCKETS 256        /* buckets of known sites, a power of 2 */
#define WAYS 8             /* known sites a bucket holds: one instruction, several user lines */

typedef struct {
    uint64_t address, size;
    int64_t ns;
    PyObject *site; /* borrowed from the owner's kept; NULL: a free, or a block not named yet */
    int32_t miss;   /* 1 + its index in the misses; 0: none */
    uint8_t is_free, frameless;
} TrackedEvent;

typedef struct {
    PyThreadState *state;
    int depth, claimed;
    PyCodeObject *codes[CHAIN]; /* ids only: the frame may be gone when they are read */
    int lastis[CHAIN];
    const void *positions[CHAIN];
    PyObject *name; /* named by the pending call (kept); NULL: not yet */
} Miss;

typedef struct {
    const void *position; /* the innermost frame's instruction */
    void *code;
    uint64_t sites_generation, kinds_generation;
    int depth;              /* 0: the frame's own key; else the library frames passed */
    void *codes[WALK_KEPT]; /* those frames' codes, innermost first */
    const void *user;       /* the user frame's instruction */
    PyObject *name;         /* borrowed from the owner's kept; NULL: empty */
} KnownSite;

typedef struct {
    pthread_mutex_t lock; /* guards all but `on`, `asked`, `frameless` and `owner` */
    TrackedEvent *events;
    Py_ssize_t count, room, lost, batch;
    Miss *misses;
    Py_ssize_t missed, tried; /* misses kept; those the pending call has tried to name */
    Py_ssize_t misses_seen;   /* blocks whose line was not known, since take_misses() */
    uint64_t takes;           /* take_tracked()s and let-gos: the misses' indices start anew */
    TorchMemory *owner;      /* borrowed (memory_clear lets go); set and read under the GIL */
    PyObject *sites, *kinds; /* the owner's: their generations */
    int remember;
    atomic_int on, asked;
    _Atomic(PyObject *) frameless; /* the backward pass's name (kept), or NULL */
    KnownSite known[BUCKETS * WAYS];
    unsigned evictions; /* which way of a full bucket goes next */
} TrackedState;

INTERNAL extern TrackedState tracked;

#ifdef FRAMES_WITHOUT_GIL
/* The known site of a block allocated while `frame` runs (borrowed), or NULL. Lock held. */
INTERNAL PyObject *known_site(Frame *frame);

/* `frame` and those above it, into `miss` (the thread's own frames: read without the GIL). */
INTERNAL void record_chain(Frame *frame, Miss *miss);
#endif

/* The site of `miss` by the dicts along its frames, as cached_site finds a live frame's
 * (borrowed; NULL: not found, or an error set); `k` filled for remember_known where found. */
INTERNAL PyObject *chain_site(TorchMemory *m, const Miss *miss, KnownSite *k);

/* `k` (its name kept) into the known sites, where this owner remembers. */
INTERNAL void remember_known(TorchMemory *m, KnownSite *k, PyObject *kept);
