/*
 * kname._native_cupti's TorchMemory, shared by its two files: torch_memory.c (the events of
 * torch's GPU trace, called by torch under the GIL, and the type itself) and torch_tracker.c (the
 * events of torch's allocator trace tracker, called inside torch's allocator lock, without the
 * GIL, kept until a call under the GIL names and hands them over). Both name a block's line by the
 * same cached look-ups, kept here.
 */
#ifndef KNAME_TORCH_MEMORY_H
#define KNAME_TORCH_MEMORY_H

#include "_common_c/common.h" /* first: it includes Python.h */

#include <stdint.h>

#define SITES_KEPT 256 /* entries of each table of recent look-ups, a power of 2 */

typedef struct {
    uintptr_t address;
    PyObject *site; /* strong; NULL: a free */
    int64_t ns;     /* CLOCK_REALTIME, as time.time_ns() */
} MemoryEvent;

typedef struct {
    void *code;
    int lasti;
    uint64_t generation;
    PyObject *name; /* strong */
} SiteEntry;

typedef struct {
    void *code;
    uint64_t generation;
    int kind;
} KindEntry;

typedef struct {
    PyObject_HEAD
    PyObject *sites, *kinds, *site_key, *site_of_frame, *unnamed, *settle;
    PyObject *kept; /* {name: name}: every name a tracked event or known site points to */
    MemoryEvent *events;
    Py_ssize_t count, room, batch, lost;
    int on, settling, remember;
    PyObject *fault; /* (where, exception): the first */
    SiteEntry recent[SITES_KEPT];
    KindEntry recent_kinds[SITES_KEPT];
} TorchMemory;

INTERNAL extern PyTypeObject TorchMemoryType;

/* The error set now kept as m's first fault (a Ctrl-C raised again at the next check), cleared. */
INTERNAL void memory_fault(TorchMemory *m, const char *where);

/* The name of sites[(id(code), lasti, site_key)] (borrowed); NULL without an error: none. */
INTERNAL PyObject *own_site_at(TorchMemory *m, PyCodeObject *code, int lasti);

/* kname.callsite's decision on `code` (KIND_USER...; -1: none; -2: an error). */
INTERNAL int kind_of_code(TorchMemory *m, PyCodeObject *code);

/* The site of an allocation made now on this thread, which holds the GIL (a new reference; never
 * NULL: a fault is kept and the block named `unnamed`). */
INTERNAL PyObject *site_now(TorchMemory *m);

/* CLOCK_REALTIME in ns, as time.time_ns(): an event's time. */
INTERNAL int64_t now_ns(void);

/* `name` kept in m->kept (borrowed from there: alive while m is); NULL with an error. */
INTERNAL PyObject *keep_name(TorchMemory *m, PyObject *name);

/* What torch_memory.c tells torch_tracker.c (which sets these at its ready: no call from here
 * into it): m->on and m->batch changed; m let go of (memory_clear). NULL: not told. */
typedef struct {
    void (*set)(TorchMemory *m);
    void (*let_go)(TorchMemory *m);
} TrackerCalls;

INTERNAL extern TrackerCalls tracker_calls;

/* torch_tracker.c's methods added to TorchMemory, and tracker_calls set (module.c calls it). */
INTERNAL int tracker_ready(PyTypeObject *type);

/* In a forked child (pthread_atfork): no event kept, the buffer's mutex made anew (a thread of
 * the parent's may have held it at the fork). */
INTERNAL void tracker_in_forked_child(void);

#endif
