/*
 * kname._native's driver hook (see driver_hook.h and docs/nsight_hook.md).
 *
 * How a library reaches a launch function, and where the hook takes it:
 *   - the CUDA runtime (shared, or linked into cuBLAS, cuDNN, CuPy) dlopen()s libcuda and
 *     dlsym()s cuGetProcAddress on that handle, then takes every driver function through it;
 *   - XLA's stubs and Triton's launcher dlsym() each function they call;
 *   - CuPy and others import cuLaunchKernel from libcuda (a GOT slot of their own).
 * A preloaded definition sees none of the first two (dlsym on a handle skips it). So the hook
 * rewrites, in every loaded object but this one, the driver's and a profiler's, the GOT slots of
 * dlsym and dlvsym (to kname's, which hand back wrapped launch functions) and of the launch
 * functions and cuGetProcAddress (to wrapped ones). Objects loaded later are patched at the next
 * dlsym through a patched slot (CPython's of PyInit_* follows each extension's load); dlopen
 * itself is not wrapped: it reads its caller's RUNPATH from its return address. A wrapped launch
 * function opens a range, calls the driver's, and closes it. Uninstalling writes every slot
 * back; pointers already handed out (the runtime keeps them) then pass straight through, after
 * one flag read.
 *
 * Linux x86-64 and aarch64 (ELF with RELA relocations, glibc's dl_iterate_phdr).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "_native_c/launch.h"
#include "_native_c/driver_hook.h"
#include "_native_c/got_slots.h"

#ifdef KNAME_DRIVER_HOOK /* got_slots.h: built with the NVTX headers, Linux x86-64 or aarch64 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#ifdef KNAME_DRIVER_HOOK

typedef int CUresult;

/* ------------------------------------------------------------------ state */

static atomic_int hook_on;   /* wrapped functions open ranges while set */
static PyObject *namer;      /* namer(frame) -> NvtxCall push or None: a new call site's range */
static _Atomic(const nvtxEventAttributes_t *) frameless; /* a GIL-less launch's range, or NULL */
static PyObject *kept;       /* every push whose attributes a cache or `frameless` points at */
static atomic_ullong launches_seen, launches_named;

/* ------------------------------------------------------------------ the wrapped functions */

enum { K_LAUNCH, K_LAUNCH_EX, K_COOPERATIVE, K_GRAPH, K_PROC1, K_PROC2, KINDS };
#define PER_KIND 8 /* distinct originals of one kind (plain, _ptsz, another libcuda...) */

static void *_Atomic originals[KINDS][PER_KIND];

typedef struct {
    const char *name;
    int kind;
} Known;

/* The names the hook takes, as dlsym and a GOT slot name them and as cuGetProcAddress is asked
 * (without the version suffix there). */
static const Known known[] = {
    {"cuLaunchKernel", K_LAUNCH},
    {"cuLaunchKernel_ptsz", K_LAUNCH},
    {"cuLaunchKernelEx", K_LAUNCH_EX},
    {"cuLaunchKernelEx_ptsz", K_LAUNCH_EX},
    {"cuLaunchCooperativeKernel", K_COOPERATIVE},
    {"cuLaunchCooperativeKernel_ptsz", K_COOPERATIVE},
    {"cuGraphLaunch", K_GRAPH},
    {"cuGraphLaunch_ptsz", K_GRAPH},
    {"cuGetProcAddress", K_PROC1},
    {"cuGetProcAddress_v2", K_PROC2},
};

static int
kind_of_name(const char *name)
{
    if (name == NULL || name[0] != 'c' || name[1] != 'u')
        return -1;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0)
            return known[i].kind;
    return -1;
}

/* ---- naming, on the launching thread */

#define SITE_SLOTS 4096
#define KIND_SLOTS 1024
/* Written under the GIL, read by any launching thread, the GIL held or not (torch releases it
 * around its ops): a slot's words are read between two equal even reads of its `sequence`. A
 * slot holds its code object, so the addresses it keys by stay that object's while it is there:
 * a reader's frame is live, so an address equal to its own is its own object. */
typedef struct {
    atomic_uint sequence;
    const void *_Atomic position; /* the first user frame's instruction */
    PyObject *_Atomic code;       /* held */
    const nvtxEventAttributes_t *_Atomic attributes;
} SiteSlot;
typedef struct {
    atomic_uintptr_t word; /* the code object's address | its kind (objects are 16-aligned) */
    PyObject *held;
} KindSlot;
static SiteSlot site_slots[SITE_SLOTS];
static KindSlot kind_slots[KIND_SLOTS];
static PyObject *kinds; /* kname.callsite's id(code) -> kind */

static inline size_t
slot_hash(const void *p, size_t slots)
{
    uintptr_t x = (uintptr_t)p;
    return (size_t)((x >> 4) ^ (x >> 16)) & (slots - 1);
}

/* The kind remembered for `code`, or -1. Any thread. */
static inline int
remembered_kind(PyCodeObject *code)
{
    uintptr_t word = atomic_load_explicit(&kind_slots[slot_hash(code, KIND_SLOTS)].word,
                                          memory_order_acquire);
    return (word & ~(uintptr_t)15) == (uintptr_t)code ? (int)(word & 15) : -1;
}

/* The kind callsite decided for `code`, remembered; -1 undecided, -2 error. Under the GIL. */
static int
code_kind(PyCodeObject *code)
{
    int kind = remembered_kind(code);
    if (kind >= 0)
        return kind;
    kind = decided_kind(kinds, code);
    if (kind >= 0 && kind < 16 && ((uintptr_t)code & 15) == 0) {
        KindSlot *slot = &kind_slots[slot_hash(code, KIND_SLOTS)];
        PyObject *old = slot->held;
        slot->held = Py_NewRef((PyObject *)code);
        atomic_store_explicit(&slot->word, (uintptr_t)code | (uintptr_t)kind,
                              memory_order_release);
        Py_XDECREF(old);
    }
    return kind;
}

/* The first user frame from `frame` up; NULL when undecided or none within MAX_WALK. `kind_of`:
 * code_kind under the GIL, remembered_kind without it. */
static inline Frame *
first_user_frame(Frame *frame, int (*kind_of)(PyCodeObject *))
{
    Frame *f = frame;
    for (int depth = 0; depth < MAX_WALK && f != NULL; depth++) {
        int kind = kind_of(frame_code(f));
        if (kind == KIND_USER)
            return f;
        if (!PASSED_OVER(kind))
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* The range remembered for the user frame `user`, or NULL. Any thread. */
static inline const nvtxEventAttributes_t *
remembered_range(Frame *user)
{
    const void *position = frame_position(user);
    SiteSlot *slot = &site_slots[slot_hash(position, SITE_SLOTS)];
    unsigned before = atomic_load_explicit(&slot->sequence, memory_order_acquire);
    if (before & 1)
        return NULL;
    const void *found = atomic_load_explicit(&slot->position, memory_order_relaxed);
    PyObject *code = atomic_load_explicit(&slot->code, memory_order_relaxed);
    const nvtxEventAttributes_t *attributes =
        atomic_load_explicit(&slot->attributes, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&slot->sequence, memory_order_relaxed) != before)
        return NULL;
    return found == position && code == (PyObject *)frame_code(user) ? attributes : NULL;
}

/* Under the GIL. */
static void
remember_range(Frame *user, const nvtxEventAttributes_t *attributes)
{
    const void *position = frame_position(user);
    SiteSlot *slot = &site_slots[slot_hash(position, SITE_SLOTS)];
    PyObject *old = atomic_load_explicit(&slot->code, memory_order_relaxed);
    atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_relaxed); /* odd: being written */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&slot->position, position, memory_order_relaxed);
    atomic_store_explicit(&slot->code, Py_NewRef((PyObject *)frame_code(user)),
                          memory_order_relaxed);
    atomic_store_explicit(&slot->attributes, attributes, memory_order_relaxed);
    atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_release); /* even: whole */
    Py_XDECREF(old);
}

/* Under the GIL. */
static void
forget_sites(void)
{
    for (size_t i = 0; i < SITE_SLOTS; i++) {
        SiteSlot *slot = &site_slots[i];
        PyObject *old = atomic_load_explicit(&slot->code, memory_order_relaxed);
        atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&slot->position, NULL, memory_order_relaxed);
        atomic_store_explicit(&slot->code, NULL, memory_order_relaxed);
        atomic_store_explicit(&slot->attributes, NULL, memory_order_relaxed);
        atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_release);
        Py_XDECREF(old);
    }
    for (size_t i = 0; i < KIND_SLOTS; i++) {
        atomic_store_explicit(&kind_slots[i].word, 0, memory_order_release);
        Py_CLEAR(kind_slots[i].held);
    }
}

/* The attributes of `push` (an NvtxCall made by nvtx_range), kept alive; NULL for anything else. */
static const nvtxEventAttributes_t *
keep_push(PyObject *push)
{
    if (push == NULL || !Py_IS_TYPE(push, &NvtxCallType) || ((NvtxCall *)push)->pop == NULL
        || PyList_Append(kept, push) < 0)
        return NULL;
    return &((NvtxCall *)push)->attributes;
}

/* A new call site, under the GIL: Python names it (kname's rules), the answer remembered under
 * its user line. */
static COLD const nvtxEventAttributes_t *
name_in_python(Frame *frame)
{
    Frame *user = first_user_frame(frame, code_kind);
    const nvtxEventAttributes_t *attributes = user == NULL ? NULL : remembered_range(user);
    if (attributes != NULL)
        return attributes;
    PyObject *error = take_error();
    PyObject *frame_object = (PyObject *)PyEval_GetFrame();
    PyObject *push = namer == NULL ? NULL : PyObject_CallOneArg(namer, frame_object);
    attributes = keep_push(push);
    Py_XDECREF(push);
    if (PyErr_Occurred())
        PyErr_Clear(); /* the namer reports its own faults; a launch never fails for kname */
    user = attributes == NULL ? NULL : first_user_frame(frame, code_kind);
    if (user != NULL)
        remember_range(user, attributes);
    restore_error(error);
    return attributes;
}

/* This thread's running Python frame, read from its thread state whether or not it holds the
 * GIL: only this thread changes its frames, and it is inside a launch. NULL: none, or a CPython
 * where it cannot be read so (then the GIL is taken). */
static inline Frame *
frame_of_thread(PyThreadState *thread, int *readable)
{
#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
    *readable = 1;
    return complete_frame(thread->current_frame);
#elif PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
    *readable = 1;
    return thread->cframe == NULL ? NULL : complete_frame(thread->cframe->current_frame);
#else
    (void)thread;
    *readable = 0;
    return NULL;
#endif
}

static inline int
is_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* The range of a launch made now on this thread, or NULL: none. */
static inline const nvtxEventAttributes_t *
range_here(void)
{
    PyThreadState *thread = PyGILState_GetThisThreadState();
    if (thread == NULL) /* a thread Python never ran on (autograd's, a runtime's worker) */
        return atomic_load_explicit(&frameless, memory_order_acquire);
    int readable;
    Frame *frame = frame_of_thread(thread, &readable);
    if (readable) {
        if (frame == NULL)
            return atomic_load_explicit(&frameless, memory_order_acquire);
        Frame *user = first_user_frame(frame, remembered_kind);
        const nvtxEventAttributes_t *attributes = user == NULL ? NULL : remembered_range(user);
        if (attributes != NULL)
            return attributes;
    }
    /* A new call site: named in Python, the GIL taken where the launch let it go (torch's ops
     * do), as kname profile's callback takes it; not while the interpreter ends. */
    if (is_finalizing())
        return NULL;
    int held = PyGILState_Check();
    PyGILState_STATE gil = held ? PyGILState_UNLOCKED : PyGILState_Ensure();
    kname_ranges_open++; /* a launch made while naming (there should be none) is not named */
    frame = frame_current();
    const nvtxEventAttributes_t *attributes =
        frame == NULL ? atomic_load_explicit(&frameless, memory_order_acquire)
                      : name_in_python(frame);
    kname_ranges_open--;
    if (!held)
        PyGILState_Release(gil);
    return attributes;
}

/* The domain of a range's attributes: those of an NvtxCall, which holds its domain. */
static inline nvtxDomainHandle_t
domain_of(const nvtxEventAttributes_t *attributes)
{
    return ((const NvtxCall *)((const char *)attributes - offsetof(NvtxCall, attributes)))->domain;
}

/* Before the driver's call: the range opened (close it after), or NULL: none. */
static inline const nvtxEventAttributes_t *
hook_open_range(void)
{
    if (!atomic_load_explicit(&hook_on, memory_order_relaxed) || kname_ranges_open > 0)
        return NULL;
    atomic_fetch_add_explicit(&launches_seen, 1, memory_order_relaxed);
    const nvtxEventAttributes_t *attributes = range_here();
    if (attributes == NULL)
        return NULL;
    atomic_fetch_add_explicit(&launches_named, 1, memory_order_relaxed);
    nvtxDomainRangePushEx(domain_of(attributes), attributes);
    kname_ranges_open++;
    return attributes;
}

static inline void
hook_close_range(const nvtxEventAttributes_t *opened)
{
    if (opened != NULL) {
        kname_ranges_open--;
        nvtxDomainRangePop(domain_of(opened));
    }
}

typedef CUresult (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void *, void **, void **);
typedef CUresult (*LaunchExFn)(const void *, void *, void **, void **);
typedef CUresult (*CooperativeFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, void *, void **);
typedef CUresult (*GraphFn)(void *, void *);
typedef CUresult (*Proc1Fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*Proc2Fn)(const char *, void **, int, unsigned long long, void *);

static void *wrapped_for(int kind, void *original);
static void *wrap_answer(const char *name, void *answer);

#define WRAPPERS(i)                                                                                \
    static CUresult launch_##i(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,        \
                               unsigned by, unsigned bz, unsigned shared, void *stream,            \
                               void **params, void **extra)                                        \
    {                                                                                              \
        const nvtxEventAttributes_t *opened = hook_open_range();                                   \
        CUresult r = ((LaunchFn)originals[K_LAUNCH][i])(f, gx, gy, gz, bx, by, bz, shared,         \
                                                        stream, params, extra);                    \
        hook_close_range(opened);                                                                  \
        return r;                                                                                  \
    }                                                                                              \
    static CUresult launch_ex_##i(const void *config, void *f, void **params, void **extra)        \
    {                                                                                              \
        const nvtxEventAttributes_t *opened = hook_open_range();                                   \
        CUresult r = ((LaunchExFn)originals[K_LAUNCH_EX][i])(config, f, params, extra);            \
        hook_close_range(opened);                                                                  \
        return r;                                                                                  \
    }                                                                                              \
    static CUresult cooperative_##i(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,   \
                                    unsigned by, unsigned bz, unsigned shared, void *stream,       \
                                    void **params)                                                 \
    {                                                                                              \
        const nvtxEventAttributes_t *opened = hook_open_range();                                   \
        CUresult r = ((CooperativeFn)originals[K_COOPERATIVE][i])(f, gx, gy, gz, bx, by, bz,       \
                                                                  shared, stream, params);         \
        hook_close_range(opened);                                                                  \
        return r;                                                                                  \
    }                                                                                              \
    static CUresult graph_##i(void *exec, void *stream)                                            \
    {                                                                                              \
        const nvtxEventAttributes_t *opened = hook_open_range();                                   \
        CUresult r = ((GraphFn)originals[K_GRAPH][i])(exec, stream);                               \
        hook_close_range(opened);                                                                  \
        return r;                                                                                  \
    }                                                                                              \
    static CUresult proc1_##i(const char *symbol, void **pfn, int version,                         \
                              unsigned long long flags)                                            \
    {                                                                                              \
        CUresult r = ((Proc1Fn)originals[K_PROC1][i])(symbol, pfn, version, flags);                \
        if (r == 0 && pfn != NULL && *pfn != NULL)                                                 \
            *pfn = wrap_answer(version >= 12000 && strcmp(symbol, "cuGetProcAddress") == 0      \
                                   ? "cuGetProcAddress_v2"                                         \
                                   : symbol,                                                       \
                               *pfn);                                                            \
        return r;                                                                                  \
    }                                                                                              \
    static CUresult proc2_##i(const char *symbol, void **pfn, int version,                         \
                              unsigned long long flags, void *status)                              \
    {                                                                                              \
        CUresult r = ((Proc2Fn)originals[K_PROC2][i])(symbol, pfn, version, flags, status);        \
        if (r == 0 && pfn != NULL && *pfn != NULL)                                                 \
            *pfn = wrap_answer(version >= 12000 && strcmp(symbol, "cuGetProcAddress") == 0      \
                                   ? "cuGetProcAddress_v2"                                         \
                                   : symbol,                                                       \
                               *pfn);                                                            \
        return r;                                                                                  \
    }

WRAPPERS(0)
WRAPPERS(1)
WRAPPERS(2)
WRAPPERS(3)
WRAPPERS(4)
WRAPPERS(5)
WRAPPERS(6)
WRAPPERS(7)

#define ROW(name) {name##_0, name##_1, name##_2, name##_3, name##_4, name##_5, name##_6, name##_7}
static void *const wrappers[KINDS][PER_KIND] = {
    ROW((void *)launch),      ROW((void *)launch_ex), ROW((void *)cooperative),
    ROW((void *)graph),       ROW((void *)proc1),     ROW((void *)proc2),
};

static int
is_wrapper(void *p)
{
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < PER_KIND; i++)
            if (wrappers[k][i] == p)
                return 1;
    return 0;
}

/* The wrapper of `original` (a driver function of `kind`), taking a free one on first sight;
 * `original` itself when all are taken. */
static void *
wrapped_for(int kind, void *original)
{
    if (original == NULL || is_wrapper(original))
        return original;
    for (int i = 0; i < PER_KIND; i++) {
        void *expected = atomic_load(&originals[kind][i]);
        if (expected == original)
            return wrappers[kind][i];
        if (expected == NULL) {
            if (atomic_compare_exchange_strong(&originals[kind][i], &expected, original)
                || expected == original)
                return wrappers[kind][i];
        }
    }
    return original;
}

/* ---- what was looked up, for the record (kname doctor, docs/nsight_hook.md) */

#define LOG_ENTRIES 256
static char lookup_log[LOG_ENTRIES][128];
static int log_count;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* `how` `name` was taken, and by which object (`address` inside it; NULL: not known). */
static void
note_lookup(const char *how, const char *name, const void *address)
{
    Dl_info info;
    const char *by = "";
    if (address != NULL && dladdr(address, &info) && info.dli_fname != NULL)
        by = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
    char entry[sizeof lookup_log[0]];
    snprintf(entry, sizeof entry, "%s %s %s", how, name, by);
    pthread_mutex_lock(&log_lock);
    int known = 0;
    for (int i = 0; i < log_count && !known; i++)
        known = strcmp(lookup_log[i], entry) == 0;
    if (!known && log_count < LOG_ENTRIES)
        memcpy(lookup_log[log_count++], entry, sizeof entry);
    pthread_mutex_unlock(&log_lock);
}

static void *
wrap_answer(const char *name, void *answer)
{
    int kind = kind_of_name(name);
    if (kind < 0)
        return answer;
    note_lookup("proc", name, NULL);
    return wrapped_for(kind, answer);
}

/* ------------------------------------------------------------------ dlsym, dlvsym */

/* dlsym as its caller would get it, with the answer wrapped. RTLD_NEXT depends on who asks:
 * that one goes through untouched (a tail call keeps the caller's return address). */
static void *
hook_dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT)
        return dlsym(handle, name);
    /* A library loaded since the last scan is patched before it looks anything up: CPython
     * looks up PyInit_* right after loading an extension, jaxlib GetPjrtApi after its plugin. */
    got_rescan();
    void *answer = dlsym(handle, name);
    int kind = kind_of_name(name);
    if (kind < 0 || answer == NULL)
        return answer;
    note_lookup("dlsym", name, __builtin_return_address(0));
    return wrapped_for(kind, answer);
}

static void *
hook_dlvsym(void *handle, const char *name, const char *version)
{
    if (handle == RTLD_NEXT)
        return dlvsym(handle, name, version);
    got_rescan();
    void *answer = dlvsym(handle, name, version);
    int kind = kind_of_name(name);
    if (kind < 0 || answer == NULL)
        return answer;
    note_lookup("dlvsym", name, __builtin_return_address(0));
    return wrapped_for(kind, answer);
}

/* A function the hook takes, found where a GOT slot of an object names it. */
static void *
replacement_for(const char *name, void *current, void *object_low, void *object_high)
{
    if (strcmp(name, "dlsym") == 0)
        return (void *)hook_dlsym;
    if (strcmp(name, "dlvsym") == 0)
        return (void *)hook_dlvsym;
    int kind = kind_of_name(name);
    if (kind < 0)
        return NULL;
    if (is_wrapper(current))
        return current;
    void *target = current;
    if ((char *)current >= (char *)object_low && (char *)current < (char *)object_high) {
        /* Not bound yet (lazy binding: the slot holds the object's own PLT stub): the driver's
         * function, where the driver is loaded; else the slot waits for a later scan. */
        void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        target = driver == NULL ? NULL : dlsym(driver, name);
        if (driver != NULL)
            dlclose(driver);
        if (target == NULL)
            return NULL;
    }
    note_lookup("got", name, object_low);
    return wrapped_for(kind, target);
}

/* ------------------------------------------------------------------ the module's functions */

static PyObject *
driver_hook_install(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *new_namer, *new_kinds;
    if (!PyArg_ParseTuple(args, "OO!:driver_hook_install", &new_namer, &PyDict_Type, &new_kinds))
        return NULL;
    Dl_info own;
    if (!dladdr((void *)driver_hook_install, &own))
        return PyUnicode_FromString("kname._native's own address is unknown");
    if (kept == NULL && (kept = PyList_New(0)) == NULL)
        return NULL;
    Py_XSETREF(namer, Py_NewRef(new_namer));
    forget_sites(); /* this install's rules may name and skip otherwise */
    Py_XSETREF(kinds, Py_NewRef(new_kinds));
    got_begin(own.dli_fbase, replacement_for);
    atomic_store(&hook_on, 1);
    if (!got_rescan())
        return PyUnicode_FromString("a GOT slot could not be written (mprotect refused)");
    return PyUnicode_FromString("");
}

static PyObject *
driver_hook_uninstall(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    atomic_store(&hook_on, 0);
    atomic_store(&frameless, NULL);
    got_restore();
    forget_sites();
    Py_CLEAR(namer);
    Py_RETURN_NONE;
}

static PyObject *
driver_hook_set_frameless(PyObject *module, PyObject *push)
{
    (void)module;
    const nvtxEventAttributes_t *attributes = NULL;
    if (push != Py_None) {
        if (kept == NULL && (kept = PyList_New(0)) == NULL)
            return NULL;
        attributes = keep_push(push);
        if (attributes == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "set_frameless takes an NVTX push or None");
            return NULL;
        }
    }
    atomic_store_explicit(&frameless, attributes, memory_order_release);
    Py_RETURN_NONE;
}

static PyObject *
driver_hook_forget(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    forget_sites();
    Py_RETURN_NONE;
}

static PyObject *
driver_hook_state(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pthread_mutex_lock(&log_lock);
    PyObject *lookups = PyList_New(log_count);
    for (int i = 0; lookups != NULL && i < log_count; i++)
        PyList_SET_ITEM(lookups, i, PyUnicode_FromString(lookup_log[i]));
    pthread_mutex_unlock(&log_lock);
    if (lookups == NULL)
        return NULL;
    int installed;
    size_t slots = got_slots_written(&installed);
    return Py_BuildValue("{s:O,s:n,s:K,s:K,s:N,s:i}", "installed", installed ? Py_True : Py_False,
                         "slots", (Py_ssize_t)slots, "launches", atomic_load(&launches_seen),
                         "named", atomic_load(&launches_named), "lookups", lookups,
                         "ranges_open", kname_ranges_open);
}

static PyMethodDef hook_methods[] = {
    {"driver_hook_install", driver_hook_install, METH_VARARGS,
     "driver_hook_install(namer, kinds) -> str: the driver hook in place ('' ), else why not; "
     "namer(frame) gives a new call site's NVTX push, kinds is kname.callsite's."},
    {"driver_hook_uninstall", driver_hook_uninstall, METH_NOARGS,
     "Every GOT slot the hook wrote written back; wrapped functions handed out pass through."},
    {"driver_hook_set_frameless", driver_hook_set_frameless, METH_O,
     "set_frameless(push or None): the range of a launch on a thread with no Python frame."},
    {"driver_hook_forget", driver_hook_forget, METH_NOARGS,
     "Forget every call site's remembered range (callsite's rules changed)."},
    {"driver_hook_state", driver_hook_state, METH_NOARGS,
     "The hook's state: installed, slots written, launches seen and named, lookups taken."},
    {NULL, NULL, 0, NULL},
};

int
driver_hook_ready(PyObject *module)
{
    return PyModule_AddFunctions(module, hook_methods);
}

#else /* no NVTX headers, or not Linux x86-64/aarch64: no hook */

int
driver_hook_ready(PyObject *module)
{
    (void)module;
    return 0;
}

#endif /* KNAME_DRIVER_HOOK */
