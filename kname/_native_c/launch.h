/*
 * kname._native: the per-launch wrapper of kname.launch, in C (plain CPython C API, vectorcall).
 * This header is what the extension's files share of it; docs/architecture.md has the table of
 * the files and their jobs.
 *
 * LaunchWrapper(original, kernel, switch, sites, resolve, fault, kinds) does, per call, what the
 * pure-Python closure of kname.launch.make_launch_wrapper does, in the same order:
 *   1. `switch.on` false: the original, nothing else;
 *   2. the kernel: `original` itself (kernel None), args[i] or getattr(args[i], attribute)
 *      (kernel a tuple (i, attribute or None): no Python call; None when args is shorter), or
 *      kernel(args) (a callable); None means "not a launch";
 *   3. the caller's frame (a C call pushes no frame of its own; read without making a frame
 *      object, see _common_c/common.h) and the key (id(code), f_lasti, id(kernel)), looked up in
 *      `sites` (kname.callsite.sites, shared with the Python path). Where the caller is library
 *      code, the first user frame above it is found with `kinds` (kname.callsite._kinds,
 *      id(code) -> USER 0 / LIBRARY 1) and its key looked up too, as callsite.resolve would; a
 *      miss calls resolve(frame, kernel) (Python);
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

#include "_common_c/common.h" /* first: it includes Python.h */
#include "_native_c/ranges.h"
#include "_common_c/profiled.h"
#include "_common_c/slots.h"

#include <stddef.h>

#if PY_VERSION_HEX < 0x030B0000
#error "kname._native needs CPython 3.11 or newer (PyFrame_GetLasti)"
#endif

/* The caller frame of the innermost launch a LaunchWrapper is running on this thread (borrowed:
 * that frame is suspended in the call, so it lives until the call returns). Initial-exec: read at
 * a fixed offset from the thread pointer, where a shared library's thread-locals are otherwise
 * found through a call into the dynamic linker at each launch. Its 8 bytes come from the static
 * TLS space glibc keeps for libraries loaded later; were it used up, the import fails and kname
 * takes its Python path (kname doctor says why). */
#if defined(__GNUC__)
#define INITIAL_EXEC __attribute__((tls_model("initial-exec")))
#else
#define INITIAL_EXEC
#endif
INTERNAL extern _Thread_local Frame *launch_caller INITIAL_EXEC; /* callsite.c */
/* The KNAME_TARGETS launchers (LaunchWrappers made with LAUNCHER) running on this thread. */
INTERNAL extern _Thread_local int launchers_running INITIAL_EXEC; /* launch.c */

/* ------------------------------------------------------------------ Counter */

/* Counter(): the launches under one name, counted as itertools.count() counts them (next() gives
 * 0, 1, 2, ...; its repr shows the next value), with `value` to read. The wrapper adds one in
 * place, without making the int next() would return. Made by kname.callsite once this
 * extension is imported; read and advanced with the GIL held, so no count is lost. (A Py_ssize_t
 * does not run out: 2**63 launches at one a nanosecond take 292 years.) */
typedef struct {
    PyObject_HEAD
    Py_ssize_t next;
} Counter;

INTERNAL extern PyTypeObject CounterType;

/* ------------------------------------------------------------------ recent look-ups */

/* A direct-mapped table of recent hits in a wrapper's `sites` dict, so that a launch builds no
 * key tuple and hashes nothing. An entry answers for (wrapper, caller's position, kernel) while
 * the dict is unchanged since the hit (a dict watcher's count on 3.12+, the dict's version tag on
 * 3.11): the dict would then give the same site. The site is borrowed: the unchanged dict holds
 * it, and it leaves the dict as its code object is freed (kname.callsite's weak references), so
 * no other code can be at that position while the dict is unchanged. (A known
 * miss may outlive its code: a code object made since in that memory has keys that the unchanged
 * dict, last changed while the memory was the old code's, does not have either.)
 *
 * An entry also remembers what a cached launch reads (remember_launch): that the switch was on,
 * and the site's counter and NVTX range. Sites and switches tell of every change to them or to
 * their classes (kname._watched calls forget_launches, in callsite.c), which makes every
 * entry stale; so does a wrapper's clearing or freeing. One entry is one cache line. */
#define RECENT 256 /* a power of 2 */

typedef struct {
    _Alignas(64) void *wrapper; /* compared only */
    const void *position;       /* frame_position() of the caller */
    void *kernel;
    uint64_t generation; /* generation_of(wrapper->sites) at the hit */
    PyObject *site;      /* NULL: the dict has no such key */
    /* The cached launch: NULL when a launch from here must take every step. */
    Counter *counter;
    const void *attributes; /* the NVTX range's event attributes; NULL: no range */
    void *domain;           /* its NVTX domain */
} Recent;

/* The kind callsite decided for a code object, as recent look-ups of `kinds`. */
typedef struct {
    PyObject *kinds;
    void *code;
    uint64_t generation;
    int kind;
} RecentKind;

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

/* ------------------------------------------------------------------ LaunchWrapper */

enum { KERNEL_ORIGINAL, KERNEL_ARG, KERNEL_CALL };
/* LaunchWrapper's `launchers` (kname.targets.Options.nesting): a launch inside a KNAME_TARGETS
 * launcher is not one of its own (UNNAMED_IN_LAUNCHERS); the wrapper is a launcher's (LAUNCHER). */
enum { UNNAMED_IN_LAUNCHERS = 1, LAUNCHER = 2 };
enum { F_COUNTER, F_LAUNCH, F_PUSH, F_POP };

/* The fields a cached launch reads come first, together, so that they span as few cache lines as
 * they can: inside a library's launch they are fetched anew each time. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original;
    PyObject *sites;     /* dict, shared with the Python path */
    PyObject *attribute; /* KERNEL_ARG: str or NULL */
    int index;           /* KERNEL_ARG */
    short kernel_mode;
    char remember;  /* look-ups of `sites` may go in the recent table */
    char launchers; /* UNNAMED_IN_LAUNCHERS, LAUNCHER: 0 unless launchers are chosen */
    /* Read off the cached launch only (its recent entry remembers the switch on). */
    PyObject *switch_;
    Layout switch_layout, site_layout;
    PyObject *kernel; /* as given: None, (index, attribute) or a callable */
    PyObject *resolve;
    PyObject *fault;
    PyObject *kinds; /* dict */
    PyObject *dict;
    PyObject *weakrefs;
} LaunchWrapper;

/* The names of the fields a launch reads: the switch's `on`, the site's by F_* (callsite.c). */
INTERNAL extern PyObject *switch_names[1];
INTERNAL extern PyObject *site_names[4];

INTERNAL extern PyTypeObject LaunchWrapperType;

/* A launch's arguments as the wrapper got them: a vectorcall (`self` NULL), or, through the C
 * __call__ slot kname gives its CuPy subclasses (direct_call), the instance, a tuple and a dict.
 * The second form reaches CuPy's own slot with that same tuple and dict: no copy. */
typedef struct {
    PyObject *const *args;
    size_t nargsf;
    PyObject *kwnames;
    PyObject *self, *tuple, *kwargs;
    /* The slot form only: CuPy's own __call__ slot, where direct_call knows that `slot_owner`
     * (the wrapper's original) is a BaseCall of a class `self` derives from (NULL: not known). */
    PyObject *slot_owner;
    ternaryfunc base_slot;
} Args;

static inline Py_ssize_t
args_count(const Args *a)
{
    return a->self == NULL ? PyVectorcall_NARGS(a->nargsf) : 1 + PyTuple_GET_SIZE(a->tuple);
}

/* Positional argument i < args_count(a), borrowed. */
static inline PyObject *
args_item(const Args *a, Py_ssize_t i)
{
    if (a->self == NULL)
        return a->args[i];
    return i == 0 ? a->self : PyTuple_GET_ITEM(a->tuple, i - 1);
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

/* A remembered range whose `domain` is this is kname profile's site calls (_common_c/profiled.h):
 * `attributes` is the push's KnameProfiled. Out of line: not the common launch without kname
 * profile. (callsite.c) */
INTERNAL extern char profiled_range;
INTERNAL void open_profiled(const void *profiled);
INTERNAL void close_profiled(const void *profiled);

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
INTERNAL int counters_ready(PyObject *module); /* counters.c */
INTERNAL int sites_ready(PyObject *module);    /* callsite.c */

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
