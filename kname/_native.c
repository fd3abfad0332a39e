/*
 * kname._native: the per-launch wrapper of kname.launch, in C (plain CPython C API, vectorcall).
 *
 * LaunchWrapper(original, kernel, switch, sites, resolve, fault, kinds) does, per call, what the
 * pure-Python closure of kname.launch.make_launch_wrapper does, in the same order:
 *   1. `switch.on` false: the original, nothing else;
 *   2. the kernel: `original` itself (kernel None), args[i] or getattr(args[i], attribute)
 *      (kernel a tuple (i, attribute or None): no Python call; None when args is shorter), or
 *      kernel(args) (a callable); None means "not a launch";
 *   3. the caller's frame (a C call pushes no frame of its own; read without making a frame
 *      object, see _native_common.h) and the key (id(code), f_lasti, id(kernel)), looked up in
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
 * kname's own Exceptions (steps 2-4, not the launch's) go to fault(where, exc, frame, args) and
 * the launch runs unnamed; BaseExceptions that are not Exceptions (KeyboardInterrupt) propagate,
 * as from the Python wrapper. The launch's own result and exceptions pass through unchanged.
 *
 * Nesting: the Python wrapper's frame on the stack marks a launch in progress (callsite's walk
 * stops at it). This wrapper has no frame, so each thread keeps the caller frame of the innermost
 * launch it is running (is_launch_caller(frame), asked by callsite's walk): a walk that reaches
 * that frame before any user frame is beneath a launch, as one reaching the Python wrapper's
 * frame is.
 *
 * SkipBeneath(hook, kinds) guards a library's launch hooks (Triton's): beneath a LaunchWrapper's
 * launch, with only library code between, the hook is not called. SubscriptLaunch(launch, ...)
 * is a `__getitem__` whose `obj[key](...)` calls `launch` with no Python frame between
 * (Triton's `kernel[grid](...)`). BaseCall(base) calls a C class's own __call__ slot directly (the
 * original of the launch wrapper on kname's subclasses of CuPy's Cython kernels), and
 * use_direct_call(cls) gives such a subclass a C __call__ slot that hands its launch wrapper the
 * caller's argument tuple and dict, which reach CuPy's slot uncopied.
 *
 * CPython 3.11+ with the GIL: a free-threaded build refuses to import (kname uses its Python
 * path). Every object read on the hot path is read while the GIL is held and never released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

#if PY_VERSION_HEX < 0x030B0000
#error "kname._native needs CPython 3.11 or newer (PyFrame_GetLasti)"
#endif

#include "_native_common.h"
#include "_native_nvtx.h"

/* As kname.launch's wrapper says them to callsite.pass_through. */
static const char FINDING[] = "finding a launch's name";
static const char OPENING[] = "opening a launch's NVTX range";
static const char CLOSING[] = "closing a launch's NVTX range";

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
static _Thread_local Frame *launch_caller INITIAL_EXEC = NULL;

static PyObject *str_on, *str_counter, *str_launch, *str_push, *str_pop;
static PyObject *str_finding, *str_opening, *str_closing;

/* ------------------------------------------------------------------ slots read in place */

/* Where a type keeps some __slots__ members, learned once per type (and again after the type is
 * changed: its stamp moves, see _native_common.h). Reading the slot is what getattr does for a
 * plain slot of a type with generic attribute access: data descriptors come first in that
 * look-up. */
#define MAX_FIELDS 4

typedef struct {
    PyTypeObject *type; /* strong: its address cannot be reused while learned */
    uint64_t stamp;     /* NO_STAMP: the slots are read through getattr */
    int offset[MAX_FIELDS]; /* 32 bytes in all: a learned layout and the fields it reads share
                             * cache lines with the wrapper's other hot fields */
} Layout;

static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    Py_ssize_t offset = -1;
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == MEMBER_OBJECT_EX && !(member->flags & READONLY))
            offset = member->offset;
    }
    Py_DECREF(descr);
    return offset;
}

static COLD void
learn_layout(Layout *layout, PyTypeObject *type, PyObject *const *names, int count)
{
    Py_INCREF(type);
    Py_XSETREF(layout->type, type);
    int fast = type->tp_getattro == PyObject_GenericGetAttr;
    for (int i = 0; i < count; i++) {
        Py_ssize_t offset = slot_offset(type, names[i]);
        layout->offset[i] = offset < 0 || offset > INT_MAX ? -1 : (int)offset;
        if (layout->offset[i] < 0)
            fast = 0;
    }
    layout->stamp = fast ? follow_type(type) : NO_STAMP; /* after the look-ups: see follow_type */
}

static inline int
layout_fits(Layout *layout, PyObject *obj)
{
    return Py_TYPE(obj) == layout->type && layout->stamp == type_stamp(layout->type);
}

/* `layout` made `obj`'s class's, learned again where it is another's: whether obj's fields can
 * now be read in place (else read_field reads them through getattr). */
static int
fit_layout(Layout *layout, PyObject *obj, PyObject *const *names, int count)
{
    if (!layout_fits(layout, obj))
        learn_layout(layout, Py_TYPE(obj), names, count);
    return layout_fits(layout, obj);
}

/* Slot i of `obj`, which layout_fits: borrowed, NULL when the slot is empty. */
static inline PyObject *
slot_value(const Layout *layout, PyObject *obj, int i)
{
    return *(PyObject **)((char *)obj + layout->offset[i]);
}

/* obj.<names[i]> as a new reference, NULL with AttributeError when the slot is empty. */
static PyObject *
read_field(Layout *layout, PyObject *obj, PyObject *const *names, int i)
{
    if (layout_fits(layout, obj)) {
        PyObject *value = slot_value(layout, obj, i);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, names[i]);
}

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

static PyObject *
counter_next(Counter *c)
{
    return PyLong_FromSsize_t(c->next++);
}

static PyObject *
counter_repr(Counter *c)
{
    return PyUnicode_FromFormat("count(%zd)", c->next);
}

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *no_names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Counter", no_names))
        return NULL;
    return type->tp_alloc(type, 0); /* zeroed: counts from 0 */
}

static PyMemberDef counter_members[] = {
    {"value", MEMBER_SSIZE, offsetof(Counter, next), MEMBER_READONLY, "launches counted so far"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.Counter",
    .tp_doc = "Counts launches as itertools.count() does; the C wrapper adds one in place.",
    .tp_basicsize = sizeof(Counter),
    .tp_repr = (reprfunc)counter_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)counter_next,
    .tp_members = counter_members,
    .tp_new = counter_new,
};

/* next(counter) with the result dropped: 0, or -1 with an error (StopIteration where the
 * iterator ended, as next() raises). */
static int
advance(PyObject *counter)
{
    if (Py_IS_TYPE(counter, &CounterType)) {
        ((Counter *)counter)->next++;
        return 0;
    }
    PyObject *count = PyIter_Next(counter);
    if (count == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_StopIteration);
        return -1;
    }
    Py_DECREF(count);
    return 0;
}

/* ------------------------------------------------------------------ recent look-ups */

/* A direct-mapped table of recent hits in a wrapper's `sites` dict, so that a launch builds no
 * key tuple and hashes nothing. An entry answers for (wrapper, caller's position, kernel) while
 * the dict is unchanged since the hit (a dict watcher's count on 3.12+, the dict's version tag on
 * 3.11): the dict would then give the same site. The site is borrowed: the unchanged dict holds
 * it, and it holds its code object, so no other code can be at that position meanwhile. (A known
 * miss may outlive its code: a code object made since in that memory has keys that the unchanged
 * dict, last changed while the memory was the old code's, does not have either.)
 *
 * An entry also remembers what a cached launch reads (remember_launch): that the switch was on,
 * and the site's counter and NVTX range. Sites and switches tell of every change to them or to
 * their classes (kname._watched calls forget_launches, below), which makes every entry stale; so
 * does a wrapper's clearing or freeing. One entry is one cache line. */
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

static Recent recent[RECENT];
static RecentKind recent_kinds[RECENT];

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

/* Every entry stale at once: their generations no longer read the same (see generation_of). */
static PyObject *
forget_launches(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    forget_all();
    Py_RETURN_NONE;
}

/* Every entry emptied: a wrapper freed may leave its address to a new one. */
static void
empty_recent(void)
{
    memset(recent, 0, sizeof recent);
}

static inline RecentKind *
recent_kind_slot(void *code)
{
    uintptr_t h = (uintptr_t)code >> 4;
    return &recent_kinds[(h ^ (h >> 8)) & (RECENT - 1)];
}

/* ------------------------------------------------------------------ LaunchWrapper */

enum { KERNEL_ORIGINAL, KERNEL_ARG, KERNEL_CALL };
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
    short remember; /* look-ups of `sites` may go in the recent table */
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

static PyObject *switch_names[1];
static PyObject *site_names[4];

/* 1: on, 0: off, -1: error. */
static int
switch_is_on(LaunchWrapper *w)
{
    fit_layout(&w->switch_layout, w->switch_, switch_names, 1);
    PyObject *on = read_field(&w->switch_layout, w->switch_, switch_names, 0);
    if (on == NULL)
        return -1;
    int result = on == Py_True ? 1 : on == Py_False ? 0 : PyObject_IsTrue(on);
    Py_DECREF(on);
    return result;
}

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

static PyObject *
args_tuple(PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    return tuple;
}

/* kernel(args) for a callable `kernel`: new reference, or NULL with an error. */
static COLD PyObject *
kernel_from_call(LaunchWrapper *w, const Args *a)
{
    Py_ssize_t nargs = args_count(a);
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args_item(a, i)));
    PyObject *kernel = PyObject_CallOneArg(w->kernel, tuple);
    Py_DECREF(tuple);
    return kernel;
}

/* The launched kernel (new reference; Py_None: not a launch), or NULL with an error. */
static PyObject *
kernel_of(LaunchWrapper *w, const Args *a)
{
    if (w->kernel_mode == KERNEL_ORIGINAL)
        return Py_NewRef(w->original);
    Py_ssize_t nargs = args_count(a);
    if (w->kernel_mode == KERNEL_ARG) {
        if (w->index >= nargs)
            return Py_NewRef(Py_None);
        if (w->attribute == NULL)
            return Py_NewRef(args_item(a, w->index));
        return PyObject_GetAttr(args_item(a, w->index), w->attribute);
    }
    return kernel_from_call(w, a);
}

static PyObject *
site_key(PyCodeObject *code, int code_lasti, PyObject *kernel_key)
{
    PyObject *code_id = PyLong_FromVoidPtr(code); /* the site keeps the code, so its id, alive */
    if (code_id == NULL)
        return NULL;
    PyObject *lasti = PyLong_FromLong(code_lasti);
    if (lasti == NULL) {
        Py_DECREF(code_id);
        return NULL;
    }
    PyObject *key = PyTuple_New(3);
    if (key == NULL) {
        Py_DECREF(code_id);
        Py_DECREF(lasti);
        return NULL;
    }
    PyTuple_SET_ITEM(key, 0, code_id);
    PyTuple_SET_ITEM(key, 1, lasti);
    PyTuple_SET_ITEM(key, 2, Py_NewRef(kernel_key));
    return key;
}

/* The classes whose instances, and which themselves, tell of every change (kname._watched's
 * Watched, given by watch_changes_of): a cached launch may remember what it reads of them. */
static PyTypeObject *watched_class;

static int
tells_of_changes(PyObject *obj)
{
    return watched_class != NULL && PyObject_TypeCheck(obj, watched_class);
}

/* The switch's `on` read in place (no Python code runs): 1 on, 0 off or not readable so. */
static int
switch_reads_on(LaunchWrapper *w)
{
    return fit_layout(&w->switch_layout, w->switch_, switch_names, 1)
           && slot_value(&w->switch_layout, w->switch_, 0) == Py_True;
}

/* What a launch of `w` that finds `site` in `entry` will read, remembered there where that launch
 * is the common one: the switch on; the site's counter kname's own, its launch the original (no
 * rename) and its range NVTX's own calls (or none); all read in place, from a switch and a site
 * that tell of their changes. Anything else leaves the entry's counter NULL: that launch takes
 * every step (launch_in_full), as does one whose kernel is not read in place (cached_kernel). */
static void
remember_launch(LaunchWrapper *w, PyObject *site, Recent *entry)
{
    entry->counter = NULL;
    /* A wrapper the collector has cleared remembers nothing: its clearing emptied the table, and
     * direct_call's short path trusts an entry of it to mean it is whole. */
    if (site == NULL || w->original == NULL || !tells_of_changes(site)
        || !tells_of_changes(w->switch_) || !switch_reads_on(w))
        return;
    if (!fit_layout(&w->site_layout, site, site_names, 4))
        return;
    const Layout *fields = &w->site_layout;
    PyObject *counter = slot_value(fields, site, F_COUNTER);
    PyObject *push = slot_value(fields, site, F_PUSH), *pop = slot_value(fields, site, F_POP);
    if (counter == NULL || !Py_IS_TYPE(counter, &CounterType)
        || slot_value(fields, site, F_LAUNCH) != Py_None)
        return;
    if (push == Py_None && pop == Py_None) {
        entry->attributes = entry->domain = NULL;
        entry->counter = (Counter *)counter;
        return;
    }
#ifdef KNAME_NVTX
    /* A push's own pop closes the push's domain: the pop is known without being read. */
    if (push != NULL && Py_IS_TYPE(push, &NvtxCallType) && ((NvtxCall *)push)->pop != NULL
        && pop == ((NvtxCall *)push)->pop) {
        entry->attributes = &((NvtxCall *)push)->attributes;
        entry->domain = ((NvtxCall *)push)->domain;
        entry->counter = (Counter *)counter;
    }
#endif
}

/* lookup() past the recent table: the dict itself, the answer remembered in `entry`. */
static COLD PyObject *
lookup_in_dict(LaunchWrapper *w, Frame *frame, PyObject *kernel, PyObject **kernel_id,
               Recent *entry)
{
    uint64_t generation = generation_of(w->sites); /* before the look-up, which may change it */
    if (*kernel_id == NULL && (*kernel_id = PyLong_FromVoidPtr(kernel)) == NULL)
        return NULL;
    PyObject *key = site_key(frame_code(frame), frame_lasti(frame), *kernel_id);
    if (key == NULL)
        return NULL;
    PyObject *site = Py_XNewRef(PyDict_GetItemWithError(w->sites, key));
    Py_DECREF(key);
    if (w->remember && (site != NULL || !PyErr_Occurred())) {
        *entry = (Recent){w, frame_position(frame), kernel, generation, site, NULL, NULL, NULL};
        remember_launch(w, site, entry);
    }
    return site;
}

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

/* The kind kname.callsite decided for `frame`'s code: USER, LIBRARY, PLUMBING, or -1 when it
 * has not decided (or decided something else): -2 on error. */
static int
kind_of(PyObject *kinds, int remember, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    uint64_t generation = generation_of(kinds);
    RecentKind *entry = recent_kind_slot(code);
    if (remember && entry->kinds == kinds && entry->code == (void *)code
        && entry->generation == generation)
        return entry->kind;
    PyObject *code_id = PyLong_FromVoidPtr(code);
    if (code_id == NULL)
        return -2;
    PyObject *found = PyDict_GetItemWithError(kinds, code_id); /* borrowed */
    Py_DECREF(code_id);
    int kind = -1;
    if (found == NULL && PyErr_Occurred())
        return -2;
    if (found != NULL && PyLong_CheckExact(found)) {
        long value = PyLong_AsLong(found);
        if (value == -1 && PyErr_Occurred())
            return -2;
        if (value == KIND_USER || PASSED_OVER(value))
            kind = (int)value;
    }
    if (remember)
        *entry = (RecentKind){kinds, code, generation, kind};
    return kind;
}

/* The site of a launch whose library-code caller is `frame`, keyed by the first user frame above
 * it, as callsite.resolve finds it when it is cached (depth 1). New reference; Py_None for a
 * launch beneath another kname launch; NULL without an error when resolve() must decide, NULL
 * with one on error. */
static PyObject *
walked_site(LaunchWrapper *w, Frame *frame, PyObject *kernel, PyObject **kernel_id)
{
    Frame *f = frame;
    for (int depth = 0; depth < MAX_WALK && f != NULL; depth++) {
        if (f == launch_caller)
            return Py_NewRef(Py_None);
        int kind = kind_of(w->kinds, w->remember, f);
        if (kind == KIND_USER)
            return lookup(w, f, kernel, kernel_id);
        if (!PASSED_OVER(kind)) /* not decided yet, or an error */
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* find_site() past a miss of the caller's own key: new reference, or NULL (with an error, or
 * none when resolve() was not asked). */
static COLD PyObject *
find_missed_site(LaunchWrapper *w, Frame *caller, PyObject *kernel, PyObject **kernel_id)
{
    /* Called from library code, the site may be cached under a user frame above. */
    PyObject *site = NULL;
    int kind = kind_of(w->kinds, w->remember, caller);
    Frame *back = PASSED_OVER(kind) ? frame_back(caller) : NULL;
    if (back != NULL)
        site = walked_site(w, back, kernel, kernel_id);
    if (site == NULL && kind != -2 && !PyErr_Occurred()) {
        /* Python decides, from the caller's frame object (made now, if it was not yet). */
        PyObject *resolve_args[2] = {(PyObject *)PyEval_GetFrame(), kernel};
        site = PyObject_Vectorcall(w->resolve, resolve_args, 2, NULL);
    }
    return site;
}

/* The site for a launch of `kernel` called from `caller`, the running frame: new reference,
 * Py_None when unnamed (nested), NULL on error. */
static inline PyObject *
find_site(LaunchWrapper *w, Frame *caller, PyObject *kernel)
{
    PyObject *kernel_id = NULL;
    PyObject *site = lookup(w, caller, kernel, &kernel_id);
    if (site == NULL && !PyErr_Occurred())
        site = find_missed_site(w, caller, kernel, &kernel_id);
    Py_XDECREF(kernel_id);
    return site;
}

/* After kname's own error (set): hand it to fault(frame, kernel, site, exc, where), which says it
 * once and makes the line launch as if kname were off (callsite.pass_through); `frame` is the
 * caller's, the running one. 0: the launch is to go on; -1: the error is not an Exception
 * (KeyboardInterrupt, SystemExit), still set, and propagates as from the Python wrapper. */
static COLD int
handle_fault(LaunchWrapper *w, PyObject *where, PyObject *kernel, PyObject *site)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *exc = take_error();
    PyFrameObject *frame = PyEval_GetFrame(); /* made now, if it was not yet */
    PyObject *fault_args[5] = {frame ? (PyObject *)frame : Py_None, kernel ? kernel : Py_None,
                               site ? site : Py_None, exc ? exc : Py_None, where};
    PyObject *r = PyObject_Vectorcall(w->fault, fault_args, 5, NULL);
    Py_XDECREF(exc);
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear(); /* reporting a fault failed: the launch still runs */
    }
    Py_XDECREF(r);
    return 0;
}

#define SMALL_STACK 8

/* run(self, *tuple, **kwargs) through vectorcall (a rename-mode launch, say). */
static COLD PyObject *
call_with_dict(PyObject *run, const Args *a)
{
    Py_ssize_t n = args_count(a);
    PyObject *small[SMALL_STACK];
    PyObject **stack = n <= SMALL_STACK ? small : PyMem_New(PyObject *, n);
    if (stack == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++)
        stack[i] = args_item(a, i); /* borrowed: the caller holds self, tuple and dict */
    PyObject *result = PyObject_VectorcallDict(run, stack, n, a->kwargs);
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

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

/* pop() as the wrapper is left, however it is left (the Python wrapper's `finally:`). The way out
 * (`result`, or the error set) comes back unchanged, unless pop raised a BaseException that is
 * not an Exception: that replaces it, with the error it replaced as its context, as a `finally:`
 * that raises does. */
static PyObject *
pop_after(LaunchWrapper *w, PyObject *pop, PyObject *result, PyObject *kernel, PyObject *site)
{
    PyObject *pending = result == NULL ? take_error() : NULL;
    PyObject *r = call_range(pop);
    if (r == NULL && handle_fault(w, str_closing, kernel, site) < 0) {
        Py_XDECREF(result);
        if (pending != NULL) {
            PyObject *raised = take_error();
            PyException_SetContext(raised, pending); /* steals pending */
            restore_error(raised);
        }
        return NULL;
    }
    Py_XDECREF(r);
    restore_error(pending);
    return result;
}

/* A launch with every step taken as the Python wrapper takes it: the switch read through getattr
 * where need be, the kernel found by any means, the site found or made, faults handed over. */
static NOINLINE PyObject *
launch_in_full(LaunchWrapper *w, const Args *a, Frame *caller, Frame **in_progress)
{
    PyObject *kernel = NULL, *site = NULL, *result = NULL;

    if (w->original == NULL) { /* cleared by the collector, yet called from a finalizer */
        PyErr_SetString(PyExc_RuntimeError, "kname launch wrapper called after it was cleared");
        return NULL;
    }
    int on = switch_is_on(w);
    if (on < 0)
        return NULL;
    if (!on) /* still a launch in progress, as the Python wrapper's frame says: nothing below names */
        return run_launch(w->original, caller, a, in_progress);

    /* Finding the site and counting the launch: a fault here runs the original, unnamed. */
    kernel = kernel_of(w, a);
    if (kernel == NULL)
        goto finding_fault;
    /* Not a launch; no Python caller; or called straight from the caller of a launch in progress
     * (from C inside that launch, where the Python wrapper's caller would be its own frame). */
    if (kernel == Py_None || caller == NULL || caller == *in_progress)
        goto unnamed;
    site = find_site(w, caller, kernel);
    if (site == NULL)
        goto finding_fault;
    if (site == Py_None) /* beneath another kname launch: that one names it */
        goto unnamed;
    fit_layout(&w->site_layout, site, site_names, 4);
    {
        PyObject *counter = read_field(&w->site_layout, site, site_names, F_COUNTER);
        int counted = counter == NULL ? -1 : advance(counter);
        Py_XDECREF(counter);
        if (counted < 0)
            goto finding_fault;
    }

    /* The site's launch (rename mode) and its range, read together (another thread's give-up
     * clears both). Read as the Python wrapper reads them: an error there is not a fault. */
    PyObject *run = read_field(&w->site_layout, site, site_names, F_LAUNCH);
    if (run == NULL)
        goto done;
    if (run == Py_None)
        Py_SETREF(run, Py_NewRef(w->original));
    PyObject *push = read_field(&w->site_layout, site, site_names, F_PUSH);
    PyObject *pop = push == NULL ? NULL : read_field(&w->site_layout, site, site_names, F_POP);
    if (pop == NULL) {
        Py_XDECREF(push);
        Py_DECREF(run);
        goto done;
    }
    if (push == Py_None) {
        result = run_launch(run, caller, a, in_progress);
    }
    else {
        PyObject *r = call_range(push);
        if (r == NULL && handle_fault(w, str_opening, kernel, site) == 0)
            r = Py_NewRef(Py_None); /* said once; the launch runs, its range still closed */
        if (r != NULL) {
            Py_DECREF(r);
            result = run_launch(run, caller, a, in_progress);
        }
        /* A KeyboardInterrupt in push: no launch, the range closed all the same. */
        result = pop_after(w, pop, result, kernel, site);
    }
    Py_DECREF(push);
    Py_DECREF(pop);
    Py_DECREF(run);
    goto done;

finding_fault:
    if (handle_fault(w, str_finding, kernel, site) < 0)
        goto done;
unnamed:
    result = run_launch(w->original, caller, a, in_progress);
done:
    Py_XDECREF(kernel);
    Py_XDECREF(site);
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
static inline const Recent *
cached_entry(LaunchWrapper *w, Frame *caller, Frame *in_progress, PyObject *kernel)
{
    if (caller == NULL || caller == in_progress || kernel == NULL)
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
 * taken, no error of kname's possible. */
static inline CachedRange
open_cached(const Recent *entry)
{
    entry->counter->next++;
    CachedRange range = {entry->attributes, entry->domain};
#ifdef KNAME_NVTX
    if (range.attributes != NULL)
        nvtxDomainRangePushEx((nvtxDomainHandle_t)range.domain,
                              (const nvtxEventAttributes_t *)range.attributes);
#endif
    return range;
}

static inline void
close_cached(CachedRange range)
{
#ifdef KNAME_NVTX
    if (range.attributes != NULL)
        nvtxDomainRangePop((nvtxDomainHandle_t)range.domain);
#else
    (void)range;
#endif
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
launch(LaunchWrapper *w, const Args *a)
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

static PyObject *
launch_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Args a = {args, nargsf, kwnames, NULL, NULL, NULL, NULL, NULL};
    return launch((LaunchWrapper *)op, &a);
}

static PyObject *
launch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"original", "kernel", "switch", "sites", "resolve", "fault", "kinds",
                            NULL};
    PyObject *original, *kernel, *switch_, *sites, *resolve, *fault, *kinds, *attribute = NULL;
    Py_ssize_t index = 0;
    int mode;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!OOO!:LaunchWrapper", names, &original,
                                     &kernel, &switch_, &PyDict_Type, &sites, &resolve, &fault,
                                     &PyDict_Type, &kinds))
        return NULL;
    if (!PyCallable_Check(original) || !PyCallable_Check(resolve) || !PyCallable_Check(fault)) {
        PyErr_SetString(PyExc_TypeError,
                        "LaunchWrapper: original, resolve and fault must be callable");
        return NULL;
    }
    if (kernel == Py_None) {
        mode = KERNEL_ORIGINAL;
    }
    else if (PyTuple_CheckExact(kernel) && PyTuple_GET_SIZE(kernel) == 2
             && PyLong_CheckExact(PyTuple_GET_ITEM(kernel, 0))
             && (PyTuple_GET_ITEM(kernel, 1) == Py_None
                 || PyUnicode_CheckExact(PyTuple_GET_ITEM(kernel, 1)))) {
        mode = KERNEL_ARG;
        index = PyLong_AsSsize_t(PyTuple_GET_ITEM(kernel, 0));
        if (index < 0 || index > INT_MAX) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError,
                                "LaunchWrapper: the index must be from 0 to 2**31 - 1");
            return NULL;
        }
        if (PyTuple_GET_ITEM(kernel, 1) != Py_None)
            attribute = PyTuple_GET_ITEM(kernel, 1);
    }
    else if (PyCallable_Check(kernel)) {
        mode = KERNEL_CALL;
    }
    else {
        PyErr_SetString(PyExc_TypeError, "LaunchWrapper: kernel must be None, a tuple (index, "
                                         "attribute or None) or a callable of the args tuple");
        return NULL;
    }
    LaunchWrapper *w = (LaunchWrapper *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->vectorcall = launch_vectorcall;
    w->original = Py_NewRef(original);
    w->kernel = Py_NewRef(kernel);
    if (attribute != NULL) {
        w->attribute = Py_NewRef(attribute);
        PyUnicode_InternInPlace(&w->attribute);
    }
    w->switch_ = Py_NewRef(switch_);
    w->sites = Py_NewRef(sites);
    w->resolve = Py_NewRef(resolve);
    w->fault = Py_NewRef(fault);
    w->kinds = Py_NewRef(kinds);
    w->index = (int)index;
    w->kernel_mode = mode;
    w->remember = follow_changes(sites) && follow_changes(kinds);
    return (PyObject *)w;
}

static int
launch_traverse(LaunchWrapper *w, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(w));
    Py_VISIT(w->original);
    Py_VISIT(w->kernel);
    Py_VISIT(w->attribute);
    Py_VISIT(w->switch_);
    Py_VISIT(w->sites);
    Py_VISIT(w->resolve);
    Py_VISIT(w->fault);
    Py_VISIT(w->kinds);
    Py_VISIT(w->dict);
    Py_VISIT(w->switch_layout.type);
    Py_VISIT(w->site_layout.type);
    return 0;
}

static int
launch_clear(LaunchWrapper *w)
{
    /* First: no entry may answer for this wrapper, nor for one made at its address. The clearing
     * below may run Python code that launches through it (a finalizer), which must then take
     * every step (w->original is NULL), not read fields cleared already. */
    empty_recent();
    Py_CLEAR(w->original);
    Py_CLEAR(w->kernel);
    Py_CLEAR(w->attribute);
    Py_CLEAR(w->switch_);
    Py_CLEAR(w->sites);
    Py_CLEAR(w->resolve);
    Py_CLEAR(w->fault);
    Py_CLEAR(w->kinds);
    Py_CLEAR(w->dict);
    Py_CLEAR(w->switch_layout.type);
    Py_CLEAR(w->site_layout.type);
    w->switch_layout.stamp = w->site_layout.stamp = NO_STAMP;
    return 0;
}

static void
launch_dealloc(LaunchWrapper *w)
{
    PyObject_GC_UnTrack(w);
    if (w->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)w);
    launch_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Bind like a function: a method, `Class.__call__`, classmethod() and staticmethod() work. */
static PyObject *
bind_like_a_function(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
launch_repr(LaunchWrapper *w)
{
    if (w->original == NULL)
        return PyUnicode_FromString("<kname launch wrapper (cleared)>");
    return PyUnicode_FromFormat("<kname launch wrapper of %R>", w->original);
}

/* A __dict__: kname's mark and the original's name, module and doc (patching.mark_wrapper). */
static PyGetSetDef dict_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaunchWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.LaunchWrapper",
    .tp_doc = "LaunchWrapper(original, kernel, switch, sites, resolve, fault, kinds): kname's "
              "per-launch wrapper (see kname/_native.c).",
    .tp_basicsize = sizeof(LaunchWrapper),
    .tp_dealloc = (destructor)launch_dealloc,
    .tp_vectorcall_offset = offsetof(LaunchWrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)launch_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)launch_traverse,
    .tp_clear = (inquiry)launch_clear,
    .tp_weaklistoffset = offsetof(LaunchWrapper, weakrefs),
    .tp_getset = dict_getset,
    .tp_descr_get = bind_like_a_function,
    .tp_dictoffset = offsetof(LaunchWrapper, dict),
    .tp_new = launch_new,
};

/* ------------------------------------------------------------------ the launch in progress */

static PyObject *
is_launch_caller(PyObject *module, PyObject *frame)
{
    (void)module;
    if (!PyFrame_Check(frame)) {
        PyErr_Format(PyExc_TypeError, "is_launch_caller() takes a frame, not %s",
                     Py_TYPE(frame)->tp_name);
        return NULL;
    }
    return PyBool_FromLong(launch_caller != NULL
                           && frame_of((PyFrameObject *)frame) == launch_caller);
}

/* Whether `frame` runs inside the launch of a LaunchWrapper with no user frame between: a walk up
 * from it reaches launch_caller first, through frames `kinds` says are passed over. 1, 0 (also
 * when unsure: a frame not classified yet), -1 on error. */
static int
is_beneath_launch(PyObject *kinds, int remember, Frame *frame)
{
    if (launch_caller == NULL)
        return 0;
    Frame *f = frame;
    for (int depth = 0; depth < MAX_WALK && f != NULL; depth++) {
        if (f == launch_caller)
            return 1;
        int kind = kind_of(kinds, remember, f);
        if (kind == -2)
            return -1;
        if (!PASSED_OVER(kind))
            return 0;
        f = frame_back(f);
    }
    return 0;
}

/* ------------------------------------------------------------------ SkipBeneath */

/* SkipBeneath(hook, kinds): calls hook(*args, **kwargs), except beneath a LaunchWrapper's launch
 * (is_beneath_launch from its caller's frame), where it returns None at once. For a library's
 * launch hooks (Triton's): a launch that kname's wrapper names already costs them nothing. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *hook, *kinds;
    int remember;
} SkipBeneath;

static PyObject *
skip_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SkipBeneath *g = (SkipBeneath *)op;
    if (g->hook == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname hook guard called after it was cleared");
        return NULL;
    }
    int beneath = is_beneath_launch(g->kinds, g->remember, frame_current());
    if (beneath > 0)
        Py_RETURN_NONE;
    if (beneath < 0)
        PyErr_Clear(); /* unsure: the hook decides, as without this guard */
    return PyObject_Vectorcall(g->hook, args, nargsf, kwnames);
}

static PyObject *
skip_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"hook", "kinds", NULL};
    PyObject *hook, *kinds;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!:SkipBeneath", names, &hook, &PyDict_Type,
                                     &kinds))
        return NULL;
    if (!PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "SkipBeneath: hook must be callable");
        return NULL;
    }
    SkipBeneath *g = (SkipBeneath *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    g->vectorcall = skip_vectorcall;
    g->hook = Py_NewRef(hook);
    g->kinds = Py_NewRef(kinds);
    g->remember = follow_changes(kinds);
    return (PyObject *)g;
}

static int
skip_traverse(SkipBeneath *g, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(g));
    Py_VISIT(g->hook);
    Py_VISIT(g->kinds);
    return 0;
}

static int
skip_clear(SkipBeneath *g)
{
    Py_CLEAR(g->hook);
    Py_CLEAR(g->kinds);
    return 0;
}

static void
skip_dealloc(SkipBeneath *g)
{
    PyObject_GC_UnTrack(g);
    skip_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
skip_repr(SkipBeneath *g)
{
    if (g->hook == NULL)
        return PyUnicode_FromString("<kname hook guard (cleared)>");
    return PyUnicode_FromFormat("<kname hook guard of %R>", g->hook);
}

static PyMemberDef skip_members[] = {
    {"__wrapped__", MEMBER_OBJECT_EX, offsetof(SkipBeneath, hook), READONLY, "the hook"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SkipBeneathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.SkipBeneath",
    .tp_doc = "SkipBeneath(hook, kinds): hook, except beneath a kname launch (returns None).",
    .tp_basicsize = sizeof(SkipBeneath),
    .tp_dealloc = (destructor)skip_dealloc,
    .tp_vectorcall_offset = offsetof(SkipBeneath, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)skip_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)skip_traverse,
    .tp_clear = (inquiry)skip_clear,
    .tp_members = skip_members,
    .tp_new = skip_new,
};

/* ------------------------------------------------------------------ SubscriptLaunch */

/* SubscriptLaunch(launch, method, key_keyword, fixed): a `__getitem__` for a class whose
 * `obj[key](*args, **kwargs)` is a launch (Triton's `kernel[grid](...)`): obj[key] is a
 * BoundLaunch, and calling it calls
 *     launch(obj.<method>, *args, **kwargs, <key_keyword>=key, **fixed)
 * with no Python frame between the caller's line and `launch` (a LaunchWrapper of
 * operator.call), where Triton's own `__getitem__` and its lambda are a frame each. */
#define KW_CACHE 16 /* kwargs name tuples remembered: they are constants of the callers' code */

typedef struct {
    PyObject *given;    /* the caller's kwnames (held: its address stays unique) */
    PyObject *combined; /* given + the index's own names */
} KwNames;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *launch, *method;
    PyObject *names;  /* (key_keyword, *fixed names) */
    PyObject *values; /* the fixed values, in the same order after the key */
    PyObject *dict;
    KwNames kwnames[KW_CACHE];
} SubscriptLaunch;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    SubscriptLaunch *index;
    PyObject *bound; /* obj.<method> */
    PyObject *key;
} BoundLaunch;

static PyTypeObject BoundLaunchType;

/* The caller's kwnames followed by the index's own (new reference), remembered. */
static PyObject *
combined_kwnames(SubscriptLaunch *s, PyObject *given)
{
    if (given == NULL)
        return Py_NewRef(s->names);
    KwNames *entry = &s->kwnames[((uintptr_t)given >> 4) % KW_CACHE];
    if (entry->given == given)
        return Py_NewRef(entry->combined);
    PyObject *combined = PySequence_Concat(given, s->names);
    if (combined == NULL)
        return NULL;
    Py_XSETREF(entry->given, Py_NewRef(given));
    Py_XSETREF(entry->combined, Py_NewRef(combined));
    return combined;
}

static PyObject *
bound_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    BoundLaunch *b = (BoundLaunch *)op;
    SubscriptLaunch *s = b->index;
    if (s == NULL || s->launch == NULL) { /* cleared by the collector, yet called */
        PyErr_SetString(PyExc_RuntimeError, "kname launch called after it was cleared");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t given = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t own = PyTuple_GET_SIZE(s->names);
    Py_ssize_t total = 1 + nargs + given + own;
    PyObject *small[16];
    PyObject **stack = total <= 16 ? small : PyMem_Malloc(total * sizeof(PyObject *));
    if (stack == NULL)
        return PyErr_NoMemory();
    PyObject *names = combined_kwnames(s, kwnames);
    PyObject *result = NULL;
    if (names != NULL) {
        stack[0] = b->bound;
        for (Py_ssize_t i = 0; i < nargs + given; i++)
            stack[1 + i] = args[i];
        stack[1 + nargs + given] = b->key;
        for (Py_ssize_t i = 1; i < own; i++)
            stack[1 + nargs + given + i] = PyTuple_GET_ITEM(s->values, i - 1);
        result = PyObject_Vectorcall(s->launch, stack, 1 + nargs, names);
        Py_DECREF(names);
    }
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

/* index(obj, key): obj[key]. */
static PyObject *
subscript_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SubscriptLaunch *s = (SubscriptLaunch *)op;
    if (s->launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname subscript launch called after it was cleared");
        return NULL;
    }
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "__getitem__ takes exactly one key");
        return NULL;
    }
    PyObject *bound = PyObject_GetAttr(args[0], s->method);
    if (bound == NULL)
        return NULL;
    BoundLaunch *b = PyObject_GC_New(BoundLaunch, &BoundLaunchType);
    if (b == NULL) {
        Py_DECREF(bound);
        return NULL;
    }
    b->vectorcall = bound_vectorcall;
    b->index = (SubscriptLaunch *)Py_NewRef(op);
    b->bound = bound;
    b->key = Py_NewRef(args[1]);
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static PyObject *
subscript_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"launch", "method", "key_keyword", "fixed", NULL};
    PyObject *launch, *method, *key_keyword, *fixed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUUO!:SubscriptLaunch", names, &launch, &method,
                                     &key_keyword, &PyDict_Type, &fixed))
        return NULL;
    PyObject *own = PyList_New(1), *values = PyList_New(0);
    if (own == NULL || values == NULL)
        goto fail;
    PyList_SET_ITEM(own, 0, Py_NewRef(key_keyword));
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fixed, &pos, &name, &value)) {
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "SubscriptLaunch: fixed keywords must be str");
            goto fail;
        }
        if (PyList_Append(own, name) < 0 || PyList_Append(values, value) < 0)
            goto fail;
    }
    SubscriptLaunch *s = (SubscriptLaunch *)type->tp_alloc(type, 0);
    if (s == NULL)
        goto fail;
    s->vectorcall = subscript_vectorcall;
    s->launch = Py_NewRef(launch);
    s->method = Py_NewRef(method);
    s->names = PyList_AsTuple(own);
    s->values = PyList_AsTuple(values);
    Py_DECREF(own);
    Py_DECREF(values);
    if (s->names == NULL || s->values == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
fail:
    Py_XDECREF(own);
    Py_XDECREF(values);
    return NULL;
}

static int
subscript_traverse(SubscriptLaunch *s, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(s));
    Py_VISIT(s->launch);
    Py_VISIT(s->method);
    Py_VISIT(s->names);
    Py_VISIT(s->values);
    Py_VISIT(s->dict);
    for (int i = 0; i < KW_CACHE; i++) {
        Py_VISIT(s->kwnames[i].given);
        Py_VISIT(s->kwnames[i].combined);
    }
    return 0;
}

static int
subscript_clear(SubscriptLaunch *s)
{
    Py_CLEAR(s->launch);
    Py_CLEAR(s->method);
    Py_CLEAR(s->names);
    Py_CLEAR(s->values);
    Py_CLEAR(s->dict);
    for (int i = 0; i < KW_CACHE; i++) {
        Py_CLEAR(s->kwnames[i].given);
        Py_CLEAR(s->kwnames[i].combined);
    }
    return 0;
}

static void
subscript_dealloc(SubscriptLaunch *s)
{
    PyObject_GC_UnTrack(s);
    subscript_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *
subscript_repr(SubscriptLaunch *s)
{
    if (s->launch == NULL)
        return PyUnicode_FromString("<kname subscript launch (cleared)>");
    return PyUnicode_FromFormat("<kname subscript launch through %R>", s->launch);
}

static PyTypeObject SubscriptLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.SubscriptLaunch",
    .tp_doc = "SubscriptLaunch(launch, method, key_keyword, fixed): a __getitem__ whose "
              "obj[key](*a, **k) calls launch(obj.<method>, *a, **k, <key_keyword>=key, **fixed).",
    .tp_basicsize = sizeof(SubscriptLaunch),
    .tp_dealloc = (destructor)subscript_dealloc,
    .tp_vectorcall_offset = offsetof(SubscriptLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)subscript_repr,
    /* METHOD_DESCRIPTOR: `obj[key]` calls it unbound with obj first, no bound method made. */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)subscript_traverse,
    .tp_clear = (inquiry)subscript_clear,
    .tp_descr_get = bind_like_a_function, /* `k.__getitem__` */
    .tp_getset = dict_getset,
    .tp_dictoffset = offsetof(SubscriptLaunch, dict),
    .tp_new = subscript_new,
};

static int
bound_traverse(BoundLaunch *b, visitproc visit, void *arg)
{
    Py_VISIT(b->index);
    Py_VISIT(b->bound);
    Py_VISIT(b->key);
    return 0;
}

static int
bound_clear(BoundLaunch *b)
{
    Py_CLEAR(b->index);
    Py_CLEAR(b->bound);
    Py_CLEAR(b->key);
    return 0;
}

static void
bound_dealloc(BoundLaunch *b)
{
    PyObject_GC_UnTrack(b);
    bound_clear(b);
    PyObject_GC_Del(b);
}

static PyTypeObject BoundLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.BoundLaunch",
    .tp_doc = "obj[key] of a SubscriptLaunch: call it to launch.",
    .tp_basicsize = sizeof(BoundLaunch),
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_vectorcall_offset = offsetof(BoundLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
};

/* ------------------------------------------------------------------ BaseCall */

/* A BaseCall holds the class whose own __call__ slot it calls. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *base;
} BaseCall;

/* BaseCall(base): base.__call__(self, *args, **kwargs) for a class whose __call__ is a C slot
 * (CuPy's Cython kernels), without the slot wrapper's two argument tuples: the original of the
 * launch wrapper that kname's Python subclass of such a class has as its __call__. */
static PyObject *
base_call_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    BaseCall *c = (BaseCall *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (c->base == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kname base call used after it was cleared");
        return NULL;
    }
    if (nargs < 1 || !PyObject_TypeCheck(args[0], c->base)) {
        PyErr_Format(PyExc_TypeError, "descriptor '__call__' requires a '%s' object but received %s",
                     c->base->tp_name, nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    PyObject *tuple = args_tuple(args + 1, nargs - 1);
    if (tuple == NULL)
        return NULL;
    PyObject *kwargs = NULL;
    Py_ssize_t given = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (given && (kwargs = PyDict_New()) != NULL) {
        for (Py_ssize_t i = 0; i < given; i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_CLEAR(kwargs);
                break;
            }
        }
    }
    PyObject *result = NULL;
    if (!given || kwargs != NULL)
        result = c->base->tp_call(args[0], tuple, kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}

static PyObject *
base_call_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"base", NULL};
    PyTypeObject *base;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:BaseCall", names, &PyType_Type, &base))
        return NULL;
    if (base->tp_call == NULL) {
        PyErr_Format(PyExc_TypeError, "BaseCall: '%s' objects are not callable", base->tp_name);
        return NULL;
    }
    BaseCall *c = (BaseCall *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->vectorcall = base_call_vectorcall;
    c->base = (PyTypeObject *)Py_NewRef(base);
    return (PyObject *)c;
}

static int
base_call_traverse(BaseCall *c, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(c));
    Py_VISIT(c->base);
    return 0;
}

static int
base_call_clear(BaseCall *c)
{
    Py_CLEAR(c->base);
    return 0;
}

static void
base_call_dealloc(BaseCall *c)
{
    PyObject_GC_UnTrack(c);
    base_call_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *
base_call_repr(BaseCall *c)
{
    if (c->base == NULL)
        return PyUnicode_FromString("<kname base call (cleared)>");
    return PyUnicode_FromFormat("<kname call of %s's own __call__>", c->base->tp_name);
}

static PyMemberDef base_call_members[] = {
    {"base", MEMBER_OBJECT_EX, offsetof(BaseCall, base), READONLY, "the class"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BaseCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.BaseCall",
    .tp_doc = "BaseCall(base): base.__call__(self, *args, **kwargs), straight to base's C slot.",
    .tp_basicsize = sizeof(BaseCall),
    .tp_dealloc = (destructor)base_call_dealloc,
    .tp_vectorcall_offset = offsetof(BaseCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)base_call_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)base_call_traverse,
    .tp_clear = (inquiry)base_call_clear,
    .tp_members = base_call_members,
    .tp_new = base_call_new,
};

/* ------------------------------------------------------------------ the C __call__ slot */

/* kname's subclass of a CuPy kernel class has a Python-level __call__ (a LaunchWrapper), so
 * CPython gives it its generic slot: a look-up, then the arguments copied onto a stack with the
 * instance first, then BaseCall copying them back into a tuple for CuPy's slot. This slot does
 * the look-up and calls the wrapper with the tuple and dict it got (see Args). */
static PyObject *str_dunder_call;

/* CuPy's own slot, where `call` is a launch wrapper of BaseCall(base) and `type` derives from
 * base: call_slot_form then calls it straight. NULL otherwise. */
static ternaryfunc
base_slot_of(PyTypeObject *type, PyObject *call)
{
    if (call == NULL || !Py_IS_TYPE(call, &LaunchWrapperType))
        return NULL;
    PyObject *original = ((LaunchWrapper *)call)->original;
    if (original == NULL || !Py_IS_TYPE(original, &BaseCallType))
        return NULL;
    PyTypeObject *base = ((BaseCall *)original)->base;
    return base != NULL && PyType_IsSubtype(type, base) ? base->tp_call : NULL;
}

/* Whether a launch of `w` through the slot launches the instance it is called on (CuPy's
 * kernels): its recent entries are then keyed by that instance. */
static int
kernel_is_self(LaunchWrapper *w)
{
    return w->kernel_mode == KERNEL_ARG && w->attribute == NULL && w->index == 0;
}

/* Looks up `type`'s __call__ for direct_call and remembers it in `hot`. Runs no Python code: the
 * class remembered before comes back, for the caller to release once it no longer reads `hot`. */
static COLD PyTypeObject *
remember_call(PyTypeObject *type)
{
    PyTypeObject *before = hot.call_type;
    PyObject *found = _PyType_Lookup(type, str_dunder_call); /* borrowed, no error */
    hot.call_type = (PyTypeObject *)Py_NewRef(type);
    hot.call_stamp = follow_type(type); /* after the look-up: see follow_type */
    hot.call = found;
    hot.call_base_slot = base_slot_of(type, found);
    hot.call_short = hot.call_base_slot != NULL && kernel_is_self((LaunchWrapper *)found)
                         ? found : NULL;
    return before;
}

/* Any launch through the slot: the class's __call__ looked up anew where the class has changed,
 * whatever it is now called. */
static NOINLINE PyObject *
direct_call_in_full(PyObject *self, PyObject *args, PyObject *kwargs)
{
    /* The class's __call__ as last looked up (`hot`, see _native_common.h), good while the class
     * keeps its stamp: it moves whenever the class's attributes or bases change (a base's too).
     * So is the base's slot found for it: a wrapper's original never changes. */
    PyTypeObject *type = Py_TYPE(self), *released = NULL;
    if (type != hot.call_type || type_stamp(type) != hot.call_stamp)
        released = remember_call(type);
    PyObject *call = Py_XNewRef(hot.call); /* the class may be changed during the launch */
    ternaryfunc base_slot = hot.call_base_slot;
    PyObject *result;
    if (call == NULL) {
        result = PyErr_Format(PyExc_TypeError, "'%.200s' object is not callable", type->tp_name);
    }
    else if (Py_IS_TYPE(call, &LaunchWrapperType) && ((LaunchWrapper *)call)->original != NULL) {
        PyObject *original = ((LaunchWrapper *)call)->original;
        Args a = {NULL, 0, NULL, self, args, kwargs, original, base_slot};
        result = launch((LaunchWrapper *)call, &a);
    }
    else { /* something else is the class's __call__ now: call it as CPython's slot would */
        descrgetfunc get = Py_TYPE(call)->tp_descr_get;
        PyObject *bound = get == NULL ? Py_NewRef(call) : get(call, self, (PyObject *)type);
        result = bound == NULL ? NULL : PyObject_Call(bound, args, kwargs);
        Py_XDECREF(bound);
    }
    Py_XDECREF(call);
    Py_XDECREF(released);
    return result;
}

/* The slot. A cached launch of a CuPy kernel takes a short path: the class's remembered
 * __call__ and the recent entry are all it reads, and the launch itself is CuPy's slot, called
 * straight with the caller's tuple and dict. The wrapper needs no reference: nothing of it is
 * read once CuPy is called. The same steps as launch()'s cached launch, in fewer instructions,
 * because a launch inside CuPy fetches them anew each time. */
static PyObject *
direct_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyTypeObject *type = Py_TYPE(self);
    LaunchWrapper *w = (LaunchWrapper *)hot.call_short;
    if (w != NULL && type == hot.call_type && type_stamp(type) == hot.call_stamp) {
        Frame *caller = frame_current();
        Frame **in_progress = &launch_caller;
        const Recent *entry = cached_entry(w, caller, *in_progress, self);
        if (entry != NULL) {
            ternaryfunc base_slot = hot.call_base_slot;
            CachedRange range = open_cached(entry);
            Frame *outer = *in_progress;
            *in_progress = caller;
            PyObject *result = base_slot(self, args, kwargs);
            *in_progress = outer;
            close_cached(range);
            return result;
        }
    }
    return direct_call_in_full(self, args, kwargs);
}

static PyObject *
use_direct_call(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls) || !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return PyErr_Format(PyExc_TypeError, "use_direct_call: a class made in Python, not %R",
                            cls);
    PyObject *own = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, str_dunder_call);
    if (own == NULL || !Py_IS_TYPE(own, &LaunchWrapperType)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "use_direct_call: %R's own __call__ is not a kname "
                         "launch wrapper", cls);
        return NULL;
    }
    /* CPython sets the slot again whenever __call__ is set or deleted on the class (disable()
     * and enable() do), which undoes this: the caller calls it after each time it sets one. */
    ((PyTypeObject *)cls)->tp_call = direct_call;
    Py_RETURN_NONE;
}

static PyObject *
has_direct_call(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "has_direct_call: a class, not %R", cls);
    return PyBool_FromLong(((PyTypeObject *)cls)->tp_call == direct_call);
}

/* ------------------------------------------------------------------ module */

static PyObject *
watch_changes_of(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "watch_changes_of: a class, not %R", cls);
    Py_XSETREF(watched_class, (PyTypeObject *)Py_NewRef(cls));
    forget_all();
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"forget_launches", forget_launches, METH_NOARGS,
     "Forget what every cached launch remembers: a site or a switch, or its class, changed."},
    {"watch_changes_of", watch_changes_of, METH_O,
     "watch_changes_of(cls): instances of cls, and cls, call forget_launches() at every change; "
     "cached launches may remember what they read of them."},
    {"is_launch_caller", is_launch_caller, METH_O,
     "Whether `frame` called the innermost LaunchWrapper launch running on this thread."},
    {"use_direct_call", use_direct_call, METH_O,
     "use_direct_call(cls): instances of cls call its own __call__, a LaunchWrapper, from a C slot "
     "(no argument copies); setting or deleting cls.__call__ later gives CPython's slot back."},
    {"has_direct_call", has_direct_call, METH_O,
     "has_direct_call(cls): whether instances of cls are called through use_direct_call's slot."},
    NVTX_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._native",
    .m_doc = "kname's per-launch wrapper in C (see kname/_native.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int
intern_all(void)
{
    struct {
        PyObject **target;
        const char *text;
    } strings[] = {
        {&str_on, "on"},         {&str_counter, "counter"}, {&str_launch, "launch"},
        {&str_push, "push"},     {&str_pop, "pop"},         {&str_finding, FINDING},
        {&str_opening, OPENING},  {&str_closing, CLOSING},  {&str_dunder_call, "__call__"},
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (*strings[i].target == NULL) {
            *strings[i].target = PyUnicode_InternFromString(strings[i].text);
            if (*strings[i].target == NULL)
                return -1;
        }
    }
    switch_names[0] = str_on;
    site_names[F_COUNTER] = str_counter;
    site_names[F_LAUNCH] = str_launch;
    site_names[F_PUSH] = str_push;
    site_names[F_POP] = str_pop;
    return 0;
}

PyMODINIT_FUNC
PyInit__native(void)
{
#ifdef Py_GIL_DISABLED
    /* The thread-local launch caller is safe, but the learned layouts and the reads of `sites`
     * and of the site's fields rely on the GIL. */
    PyErr_SetString(PyExc_ImportError, "kname._native does not support free-threaded Python");
    return NULL;
#else
    if (intern_all() < 0 || PyType_Ready(&LaunchWrapperType) < 0
        || PyType_Ready(&SkipBeneathType) < 0 || PyType_Ready(&SubscriptLaunchType) < 0
        || PyType_Ready(&BoundLaunchType) < 0 || PyType_Ready(&BaseCallType) < 0
        || PyType_Ready(&CounterType) < 0)
        return NULL;
    watch_dicts();
    watch_types();
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "LaunchWrapper", (PyObject *)&LaunchWrapperType) < 0
        || PyModule_AddObjectRef(m, "SkipBeneath", (PyObject *)&SkipBeneathType) < 0
        || PyModule_AddObjectRef(m, "SubscriptLaunch", (PyObject *)&SubscriptLaunchType) < 0
        || PyModule_AddObjectRef(m, "BaseCall", (PyObject *)&BaseCallType) < 0
        || PyModule_AddObjectRef(m, "Counter", (PyObject *)&CounterType) < 0
        || PyModule_AddIntConstant(m, "USER", KIND_USER) < 0
        || PyModule_AddIntConstant(m, "LIBRARY", KIND_LIBRARY) < 0 || nvtx_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
#endif
}
