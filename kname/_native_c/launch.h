/*
 * kname._native: the per-launch wrapper of kname.launch, in C (plain CPython C API, vectorcall).
 * This header is the launch itself (the cached launch inline); its types are in types.h and the
 * site finding it reads in callsite.h; docs/architecture.md has the table of the files and their
 * jobs.
 *
 * LaunchWrapper(original, kernel, switch, sites, resolve, fault, kinds, launchers, miss) does, per
 * call, what the pure-Python closure of kname.launch.make_launch_wrapper does, in the same order:
 *   1. `switch.on` false: the original, nothing else;
 *   2. the kernel: `original` itself (kernel None), args[i] or getattr(args[i], attribute)
 *      (kernel a tuple (i, attribute or None): no Python call; None when args is shorter), or
 *      kernel(args) (a callable); None means "not a launch";
 *   3. the caller's frame (a C call pushes no frame of its own; read without making a frame
 *      object, see _common_c/common.h) and the key (id(code), f_lasti, id(kernel)), looked up in
 *      `sites` (kname.callsite.sites, shared with the Python path). Where the caller is library
 *      code, the first user frame above it is found with `kinds` (kname.callsite._kinds,
 *      id(code) -> USER 0 / LIBRARY 1) and its key looked up too, as callsite.resolve would; a
 *      miss straight from a user's line is named in C by Python's rules (miss.c, `miss`: a
 *      callsite.NativeMiss) and built by NativeMiss.build; any other miss calls
 *      resolve(frame, kernel) (Python);
 *   4. next(site.counter); site.launch (rename mode) in place of the original when not None;
 *      site.push() when not None; the call; site.pop() on every way out.
 * The common launch (the switch on, the site a recent hit, no rename, its range NVTX's own calls
 * or none) is known from one entry of the recent table, which remembers all it reads (see
 * Recent), and takes these steps with no reference taken and no error possible; launch_in_full
 * takes every step for any other. Through kname's C slot on CuPy's kernels (direct_call), the
 * common launch is shorter still: it reads no field of the wrapper.
 * Exceptions in steps 2-4 (not the launch's) go to fault(frame, kernel, site, exc, where, again)
 * (callsite.pass_through), after steps 2-3 are taken once more, uncounted, for `again`: kname's
 * own faults (they recur; kname.faults) are said once and the launch runs unnamed; an exception
 * raised into kname from outside (by a signal handler, or another thread: only while kname calls
 * Python code, as resolve, a Python kernel_of, push or pop) propagates before the launch, and
 * so do BaseExceptions that are not Exceptions (KeyboardInterrupt), as from the Python wrapper.
 * The launch's own result and exceptions pass through unchanged.
 *
 * Nesting: the Python wrapper's frame on the stack marks a launch in progress (callsite's walk
 * stops at it). This wrapper has no frame, so each thread keeps the caller frame of the innermost
 * launch it is running (is_launch_caller(frame), asked by callsite's walk): a walk that reaches
 * that frame before any user frame is beneath a launch, as one reaching the Python wrapper's
 * frame is.
 *
 * A library's own types are in its unit's folder (kname/targets/<lib>/_native_<lib>.c, named in
 * its Library.c_sources): Triton's SkipBeneath, which guards its launch hooks (beneath a
 * LaunchWrapper's launch, with only library code between, the hook is not called), and
 * SubscriptLaunch, a `__getitem__` whose `obj[key](...)` calls `launch` with no Python frame
 * between (`kernel[grid](...)`); CuPy's BaseCall(base), which calls a C class's own __call__ slot
 * directly (the original of the launch wrapper on kname's subclasses of CuPy's Cython kernels),
 * and use_direct_call(cls), which gives such a subclass a C __call__ slot that hands its launch
 * wrapper the caller's argument tuple and dict, which reach CuPy's slot uncopied.
 *
 * CPython 3.11+ with the GIL: a free-threaded build refuses to import (kname uses its Python
 * path). Every object read on the hot path is read while the GIL is held and never released.
 */
#ifndef KNAME_NATIVE_LAUNCH_H
#define KNAME_NATIVE_LAUNCH_H

#include "_native_c/callsite.h" /* first: it includes Python.h */
#include "_native_c/ranges.h"

/* The KNAME_TARGETS launchers (LaunchWrappers made with LAUNCHER) running on this thread. */
INTERNAL extern _Thread_local int launchers_running INITIAL_EXEC; /* launch.c */

/* ------------------------------------------------------------------ the launch */

/* In launch.c, but the inline steps below. */

/* run(self, *tuple, **kwargs) through vectorcall (a rename-mode launch, say). */
INTERNAL COLD PyObject *call_with_dict(PyObject *run, const Args *a);

/* A launch with every step taken as the Python wrapper takes it. */
INTERNAL NOINLINE PyObject *launch_in_full(LaunchWrapper *w, const Args *a, Frame *caller,
                                           Frame **in_progress);

/* Bind like a function: a method, `Class.__call__`, classmethod() and staticmethod() work. */
INTERNAL PyObject *bind_like_a_function(PyObject *self, PyObject *obj, PyObject *type);

/* A __dict__: kname's mark and the original's name, module and doc (patching.mark_wrapper). */
INTERNAL extern PyGetSetDef dict_getset[];

/* run(self, *tuple, **kwargs) for the slot form; CuPy's own slot straight when `run` is the
 * BaseCall whose slot direct_call found (the launch wrapper's original, not a rename-mode
 * launch). Any other BaseCall checks `self` and raises as CPython's slot wrapper does. */
static inline PyObject *
call_slot_form(PyObject *run, const Args *a)
{
    if (a->base_slot != NULL && run == a->slot_owner)
        return a->base_slot(a->self, a->tuple, a->kwargs);
    return call_with_dict(run, a);
}

/* The launch, marked on this thread as in progress from `caller`. `in_progress` is
 * &launch_caller, taken once per launch. */
static inline PyObject *
run_launch(PyObject *run, Frame *caller, const Args *a, Frame **in_progress)
{
    Frame *outer = *in_progress;
    *in_progress = caller;
    PyObject *result = a->self == NULL ? PyObject_Vectorcall(run, a->args, a->nargsf, a->kwnames)
                                       : call_slot_form(run, a);
    *in_progress = outer;
    return result;
}

/* ------------------------------------------------------------------ the cached launch */

/* The kernel of a launch that may be a cached one (the original or a positional argument, as
 * remember_launch allows), read in place; NULL: any other. */
static inline PyObject *
cached_kernel(LaunchWrapper *w, const Args *a)
{
    if (w->kernel_mode == KERNEL_ORIGINAL)
        return w->original;
    if (w->kernel_mode == KERNEL_ARG && w->attribute == NULL && w->index < args_count(a))
        return args_item(a, w->index);
    return NULL;
}

/* The recent entry of a cached launch of `w` with `kernel` from `caller`, NULL where the full
 * path decides: nested (called from C inside a launch from the same caller), no Python caller,
 * a kernel not read in place, or no entry that remembers this launch as a cached one. */
/* Whether a launch of `w` now is inside a KNAME_TARGETS launcher, so not one of its own (a
 * launcher's own wrapper decides that in launch_as_launcher, before it counts itself). */
static inline int
unnamed_in_launcher(const LaunchWrapper *w)
{
    return w->launchers == UNNAMED_IN_LAUNCHERS && launchers_running > 0;
}

static inline const Recent *
cached_entry(LaunchWrapper *w, Frame *caller, Frame *in_progress, PyObject *kernel)
{
    if (caller == NULL || caller == in_progress || kernel == NULL || unnamed_in_launcher(w))
        return NULL;
    const void *position = frame_position(caller);
    const Recent *entry = recent_slot(position, kernel);
    if (entry->counter == NULL || !recent_answers(entry, w, w->sites, position, kernel))
        return NULL;
    return entry;
}

/* A cached launch's range, copied from its recent entry before the launch: the launch itself may
 * run Python code, which may change the site (another thread's give-up frees its range) and so
 * the entry. */
typedef struct {
    const void *attributes; /* NULL: no range */
    void *domain;
} CachedRange;

/* The common launch's steps before the call, as its recent entry remembers them: no reference
 * taken (but kname profile's push, held until the pop), no error of kname's possible. */
static inline CachedRange
open_cached(const Recent *entry)
{
    entry->counter->next++;
    CachedRange range = {entry->attributes, entry->domain};
    if (range.attributes != NULL) {
        if (range.domain == &profiled_range)
            open_profiled(range.attributes);
#ifdef KNAME_NVTX
        else {
            nvtxDomainRangePushEx((nvtxDomainHandle_t)range.domain,
                                  (const nvtxEventAttributes_t *)range.attributes);
            kname_ranges_open++;
        }
#endif
    }
    return range;
}

static inline void
close_cached(CachedRange range)
{
    if (range.attributes != NULL) {
        if (range.domain == &profiled_range)
            close_profiled(range.attributes);
#ifdef KNAME_NVTX
        else {
            kname_ranges_open--;
            nvtxDomainRangePop((nvtxDomainHandle_t)range.domain);
        }
#endif
    }
}

static inline PyObject *
run_cached(LaunchWrapper *w, const Args *a, Frame *caller, Frame **in_progress,
           const Recent *entry)
{
    CachedRange range = open_cached(entry);
    PyObject *result = run_launch(w->original, caller, a, in_progress);
    close_cached(range);
    return result;
}

static inline PyObject *
launch_named(LaunchWrapper *w, const Args *a)
{
    Frame *caller = frame_current();
    Frame **in_progress = &launch_caller;
#if defined(__GNUC__)
    /* Keep that address: left to itself the compiler works it out again at each use. */
    __asm__("" : "+r"(in_progress));
#endif
    const Recent *entry = cached_entry(w, caller, *in_progress, cached_kernel(w, a));
    if (entry != NULL)
        return run_cached(w, a, caller, in_progress, entry);
    return launch_in_full(w, a, caller, in_progress);
}

/* A KNAME_TARGETS launcher's launch: the launches inside it are marked on this thread as its.
 * (launch.c) */
INTERNAL PyObject *launch_as_launcher(LaunchWrapper *w, const Args *a);

static inline PyObject *
launch(LaunchWrapper *w, const Args *a)
{
    if (w->launchers & LAUNCHER)
        return launch_as_launcher(w, a);
    return launch_named(w, a);
}

/* ------------------------------------------------------------------ the module */

/* For PyInit__native (module.c): each file's types made ready and added to the module, with its
 * functions. 0, or -1 with an error. */
INTERNAL int launch_ready(PyObject *module);   /* launch.c */

/* A library unit's C (kname/targets/<lib>/_native_<lib>.c) registers its own ready function,
 * KNAME_UNIT(<lib>_ready), as the shared object is loaded (a constructor: it stores a pointer and
 * runs no Python); the module's init readies every unit registered (units.c). No file of the
 * extension's own names a unit, nor calls into one. */
typedef int (*unit_ready)(PyObject *module);
INTERNAL void register_unit(unit_ready ready); /* units.c */
INTERNAL int units_ready(PyObject *module);    /* units.c */
#if defined(__GNUC__)
#define KNAME_UNIT(ready)                                                                          \
    __attribute__((constructor)) static void register_##ready(void)                                \
    {                                                                                              \
        register_unit(ready);                                                                      \
    }
#else
#error "kname._native's library units register themselves with a constructor (GCC or Clang)"
#endif

#endif /* KNAME_NATIVE_LAUNCH_H */
