/*
 * kname._native's site finding, as the launch reads it (callsite.c): the recent table and its
 * inline look-ups (the cached launch's, so inline), the launch in progress on each thread, and
 * kname profile's ranges. The types are types.h's.
 */
#ifndef KNAME_NATIVE_CALLSITE_H
#define KNAME_NATIVE_CALLSITE_H

#include "_native_c/types.h" /* first: it includes Python.h */
#include "_native_c/ranges.h"
#include "_common_c/profiled.h"

/* The caller frame of the innermost launch a LaunchWrapper is running on this thread (borrowed:
 * that frame is suspended in the call, so it lives until the call returns). Initial-exec: read at
 * a fixed offset from the thread pointer, where a shared library's thread-locals are otherwise
 * found through a call into the dynamic linker at each launch. Its 8 bytes come from the static
 * TLS space glibc keeps for libraries loaded later; were it used up, the import fails and kname
 * takes its Python path (kname doctor says why). */
INTERNAL extern _Thread_local Frame *launch_caller INITIAL_EXEC; /* callsite.c */

INTERNAL extern Recent recent[RECENT];          /* callsite.c */
INTERNAL extern RecentKind recent_kinds[RECENT]; /* callsite.c */

/* Whether `entry` answers for this key: remembered by this wrapper (only one that may remember
 * does), its `sites` unchanged since. */
static inline int
recent_answers(const Recent *entry, void *wrapper, PyObject *sites, const void *position,
               void *kernel)
{
    return entry->wrapper == wrapper && entry->position == position && entry->kernel == kernel
           && entry->generation == generation_of(sites);
}

static inline Recent *
recent_slot(const void *position, void *kernel)
{
    uintptr_t h = ((uintptr_t)position >> 1) * 31u ^ ((uintptr_t)kernel >> 4);
    return &recent[(h ^ (h >> 9)) & (RECENT - 1)];
}

static inline RecentKind *
recent_kind_slot(void *code)
{
    uintptr_t h = (uintptr_t)code >> 4;
    return &recent_kinds[(h ^ (h >> 8)) & (RECENT - 1)];
}

/* ------------------------------------------------------------------ finding the site */

/* In callsite.c, but lookup(). */

/* lookup() past the recent table: the dict itself, the answer remembered in `entry`. */
INTERNAL COLD PyObject *lookup_in_dict(LaunchWrapper *w, Frame *frame, PyObject *kernel,
                                       PyObject **kernel_id, Recent *entry);

/* sites[(id(code), f_lasti, id(kernel))] of `frame` as a new reference; NULL: a miss (no error)
 * or an error. `kernel_id`: id(kernel), made here when needed. */
static inline PyObject *
lookup(LaunchWrapper *w, Frame *frame, PyObject *kernel, PyObject **kernel_id)
{
    const void *position = frame_position(frame);
    Recent *entry = recent_slot(position, kernel);
    if (recent_answers(entry, w, w->sites, position, kernel))
        return Py_XNewRef(entry->site); /* NULL, no error: a known miss */
    return lookup_in_dict(w, frame, kernel, kernel_id, entry);
}

/* kind_of() past the recent table: `kinds` itself, the answer remembered in `entry`. */
INTERNAL int kind_in_dict(PyObject *kinds, int remember, PyCodeObject *code, uint64_t generation,
                          RecentKind *entry);

/* The kind kname.callsite decided for `frame`'s code: USER, LIBRARY, PLUMBING, or -1 when it
 * has not decided (or decided something else): -2 on error. */
static inline int
kind_of(PyObject *kinds, int remember, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    uint64_t generation = generation_of(kinds);
    RecentKind *entry = recent_kind_slot(code);
    if (remember && entry->kinds == kinds && entry->code == (void *)code
        && entry->generation == generation)
        return entry->kind;
    return kind_in_dict(kinds, remember, code, generation, entry);
}

/* find_site() past a miss of the caller's own key: new reference, or NULL (with an error, or
 * none when resolve() was not asked). */
INTERNAL COLD PyObject *find_missed_site(LaunchWrapper *w, Frame *caller, PyObject *kernel,
                                         PyObject **kernel_id);

/* Every entry of the recent table emptied: a wrapper freed may leave its address to a new one. */
INTERNAL void empty_recent(void);

/* A remembered range whose `domain` is this is kname profile's site calls (_common_c/profiled.h):
 * `attributes` is the push's KnameProfiled. Out of line: not the common launch without kname
 * profile. (callsite.c) */
INTERNAL extern char profiled_range;
INTERNAL void open_profiled(const void *profiled);
INTERNAL void close_profiled(const void *profiled);

/* For PyInit__native (module.c): the file's functions added to the module. 0, or -1 with an
 * error. */
INTERNAL int sites_ready(PyObject *module);

#endif /* KNAME_NATIVE_CALLSITE_H */
