/*
 * kname._native's driver hook (driver_hook.c, docs/nsight_hook.md): under an NVTX tool,
 * every kernel launch that no kname range holds already runs inside a range named after the
 * launching thread's first user line, whichever library made it (the CUDA runtime, cuBLAS,
 * XLA, CuPy's compiled launches). The hook sits in the driver's entry points as the libraries
 * find them: the GOT slots of `dlsym` and `dlvsym` (libraries loaded later are patched at their
 * first look-up) and of the launch functions themselves in every loaded object (got_slots.h),
 * and the answers of cuGetProcAddress.
 *
 * kname_ranges_open (ranges.h) counts, per thread, the kname ranges open now: every range
 * kname's own wrappers open (an NvtxCall's push, a cached launch's) adds one, its pop takes it
 * away; a launch the hook sees while it is above 0 is already named, and is not wrapped again.
 */
#ifndef KNAME_NATIVE_DRIVER_HOOK_H
#define KNAME_NATIVE_DRIVER_HOOK_H

/* At the module's import: the hook's functions added to `module` (driver_hook_install, ...). */
INTERNAL int driver_hook_ready(PyObject *module);

#endif /* KNAME_NATIVE_DRIVER_HOOK_H */
