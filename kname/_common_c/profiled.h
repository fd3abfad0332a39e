/*
 * What kname's two extensions share of a launch kname wraps while kname profile collects: the
 * push and pop kname._native_cupti makes for its site (SiteCall: the NVTX call, then the site
 * marked for the CUPTI callback on this thread; the mark removed, then the NVTX call) begin with
 * this head, so that kname._native's cached launch runs them without calling them, as it runs a
 * site's NVTX range (_native_c/launch.h's open_cached), with no Python call per launch.
 *
 * kname._native knows a SiteCall by its type's name and `magic`; a push and its pop are one
 * site's when they have one `owner` (the recorder). When it remembers the launch, it fills
 * `nvtx_attributes` and `nvtx_domain` of the push from its NVTX push (an NvtxCall of its own,
 * whose pop is the pop's); a SiteCall whose NVTX calls are anything else is called as before.
 */
#ifndef KNAME_NATIVE_PROFILED_H
#define KNAME_NATIVE_PROFILED_H

#include <Python.h>
#include <stdint.h>

#define KNAME_PROFILED_TYPE "kname._native_cupti.SiteCall"
#define KNAME_PROFILED_MAGIC 0x64656c69666f7270ULL /* "profiled" */

typedef struct KnameProfiled KnameProfiled;
struct KnameProfiled {
    uint64_t magic;
    void (*mark)(const KnameProfiled *);   /* the push's site marked on this thread */
    void (*unmark)(const KnameProfiled *); /* the mark removed */
    const void *owner;                     /* the recorder: a push and its pop have the same */
    PyObject *nvtx;                        /* its NVTX call (push or pop), or NULL: no range */
    int is_pop;
    /* Filled by kname._native (its NvtxCall's): the range opened and closed, NULL: none. */
    const void *nvtx_attributes;
    void *nvtx_domain;
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    KnameProfiled profiled;
} KnameProfiledCall;

/* `object`'s head, where it is a SiteCall; else NULL. */
static inline KnameProfiledCall *
profiled_call(PyObject *object)
{
    if (object == NULL || strcmp(Py_TYPE(object)->tp_name, KNAME_PROFILED_TYPE) != 0
        || Py_TYPE(object)->tp_basicsize < (Py_ssize_t)sizeof(KnameProfiledCall))
        return NULL;
    KnameProfiledCall *call = (KnameProfiledCall *)object;
    return call->profiled.magic == KNAME_PROFILED_MAGIC ? call : NULL;
}

#endif /* KNAME_NATIVE_PROFILED_H */
