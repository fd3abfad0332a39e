/*
 * kname._native's shared types: the LaunchWrapper, a launch's Args, the Counter and the entries of
 * the recent table, with the inline reads that use only them. A header of no one file: launch.c,
 * callsite.c and counters.c each read these (launch.h says what the wrapper does).
 */
#ifndef KNAME_NATIVE_TYPES_H
#define KNAME_NATIVE_TYPES_H

#include "_common_c/common.h" /* first: it includes Python.h */
#include "_common_c/slots.h"

#include <stddef.h>

#if PY_VERSION_HEX < 0x030B0000
#error "kname._native needs CPython 3.11 or newer (PyFrame_GetLasti)"
#endif

/* Thread-locals read on the hot path are initial-exec: read at a fixed offset from the thread
 * pointer, where a shared library's thread-locals are otherwise found through a call into the
 * dynamic linker at each access. */
#if defined(__GNUC__)
#define INITIAL_EXEC __attribute__((tls_model("initial-exec")))
#else
#define INITIAL_EXEC
#endif

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
INTERNAL int counters_ready(PyObject *module); /* counters.c, for PyInit__native */

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
    PyObject *miss;  /* callsite.NativeMiss, or NULL: every miss named by resolve() */
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

#endif /* KNAME_NATIVE_TYPES_H */
