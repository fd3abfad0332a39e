/*
 * kname._native's NVTX ranges: a call site's push and pop as C objects that call the NVTX C API
 * straight, with the attributes built once. The launch wrapper calls them without a Python call;
 * anything else (kname profile's site calls, the pure-Python wrapper) calls them as it calls
 * any callable. Against the nvtx package's module-level push_range and pop_range, bound with
 * functools.partial, this drops two Python calls with their argument handling from each launch
 * made under a profiler. The type and the module's functions are in ranges.c.
 *
 * Built where the NVTX v3 headers were found at build time (setup.py: the nvidia-nvtx wheel, a
 * build requirement, else $CUDA_HOME/include); KNAME_NVTX is then defined. The headers are
 * NVTX's own implementation: this module gets its own NVTX function table (one for all its
 * files: NVTX defines it once per shared object), which loads the tool named by
 * NVTX_INJECTION64_PATH (Nsight's, say) at its first call, as every library that includes them
 * does. Without them, nvtx_range is absent and kname.ranges uses the nvtx package.
 *
 *   nvtx_domain(name) -> bool: opens the domain `name` in this module's table (at install, so
 *       that NVTX loads its tool then, not at a first launch); False when no tool is attached.
 *   nvtx_range(domain, message, argb, category) -> (push, pop), or None when no tool is attached:
 *       `message` registered in the domain, `category` named there (ids from 1 in first-use
 *       order, as the nvtx package numbers them), the colour as ARGB.
 */
#ifndef KNAME_NATIVE_NVTX_H
#define KNAME_NATIVE_NVTX_H

#include "_common_c/common.h"

/* The kname ranges open on this thread now (every push of kname's adds one, its pop takes it
 * away): the driver hook (driver_hook.h) wraps no launch while it is above 0. */
INTERNAL extern _Thread_local int kname_ranges_open;

#ifdef KNAME_NVTX
#include <nvtx3/nvToolsExt.h>

/* What a launch reads comes first: a push is known, and its range opened and closed, from the
 * object's first 40 bytes. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    nvtxDomainHandle_t domain;
    PyObject *pop; /* a push: the pop made with it (same domain); a pop: NULL */
    PyObject *message;                /* for repr */
    nvtxEventAttributes_t attributes; /* push only */
} NvtxCall;

INTERNAL extern PyTypeObject NvtxCallType;

/* The range's NVTX call, made now. NVTX's own calls report nothing: there is no error to pass. */
static inline void
nvtx_call_now(NvtxCall *call)
{
    if (call->pop == NULL) {
        kname_ranges_open--; /* the driver hook names no launch inside a kname range */
        nvtxDomainRangePop(call->domain);
    } else {
        nvtxDomainRangePushEx(call->domain, &call->attributes);
        kname_ranges_open++;
    }
}

/* call() for a site's push or pop: the NVTX call itself when it is an NvtxCall. */
static inline PyObject *
call_range(PyObject *call)
{
    if (Py_IS_TYPE(call, &NvtxCallType)) {
        nvtx_call_now((NvtxCall *)call);
        Py_RETURN_NONE;
    }
    return PyObject_CallNoArgs(call);
}

#else /* no NVTX headers at build time: the nvtx package's calls */

static inline PyObject *
call_range(PyObject *call)
{
    return PyObject_CallNoArgs(call);
}

#endif /* KNAME_NVTX */

/* At the module's import: NvtxCall, nvtx_domain and nvtx_range added to `module` (nothing
 * without the NVTX headers). */
INTERNAL int nvtx_ready(PyObject *module);

#endif /* KNAME_NATIVE_NVTX_H */
