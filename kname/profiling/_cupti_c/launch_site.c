/*
 * The site of a launch, for kname._native_cupti's launch callback (callback.c): looked up from the
 * running Python frame as capture.site_of_frame finds a cached one, in front of a table of recent
 * look-ups; a launch made with the GIL released found again without taking it back (tables of the
 * launching thread's own); and a launch with no Python frame (the backward pass's threads).
 */
#include "profiling/_cupti_c/callback.h"

static const char FINDING[] = "finding the call site of a CUDA launch";

/* ---- the site of a launch, with the GIL held */

PyObject *
keep(Recorder *r, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a call site's name is a %.100s, not a str",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    PyObject *kept = PyDict_GetItemWithError(r->kept, name);
    if (kept != NULL || PyErr_Occurred())
        return kept;
    if (PyDict_SetItem(r->kept, name, name) < 0)
        return NULL;
    return name;
}

static inline RecentSite *
recent_slot(Recorder *r, void *code, int lasti)
{
    uintptr_t h = ((uintptr_t)code >> 4) * 31u ^ (uintptr_t)lasti;
    return &r->recent[(h ^ (h >> 9)) & (RECENT - 1)];
}

static inline RecentKind *
recent_kind_slot(Recorder *r, void *code)
{
    uintptr_t h = (uintptr_t)code >> 4;
    return &r->recent_kinds[(h ^ (h >> 8)) & (RECENT - 1)];
}

/* The name of sites[(id(code), f_lasti, site_key)] of `frame` (borrowed, kept); NULL without an
 * error: no such site; NULL with one: an error. */
static PyObject *
lookup(Recorder *r, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    int lasti = frame_lasti(frame);
    uint64_t generation = generation_of(r->sites);
    RecentSite *entry = recent_slot(r, code, lasti);
    if (r->remember && entry->code == (void *)code && entry->lasti == lasti
        && entry->generation == generation)
        return entry->name;
    PyObject *key = Py_BuildValue("(NiO)", PyLong_FromVoidPtr(code), lasti, r->site_key);
    if (key == NULL)
        return NULL;
    PyObject *site = Py_XNewRef(PyDict_GetItemWithError(r->sites, key));
    Py_DECREF(key);
    if (site == NULL && PyErr_Occurred())
        return NULL;
    PyObject *name = NULL;
    if (site != NULL) {
        PyObject *found = PyObject_GetAttr(site, str_name);
        Py_DECREF(site);
        if (found == NULL)
            return NULL;
        name = keep(r, found);
        Py_DECREF(found);
        if (name == NULL)
            return NULL;
    }
    if (r->remember)
        *entry = (RecentSite){code, lasti, generation, name};
    return name;
}

/* The kind kname.callsite decided for `frame`'s code: USER, LIBRARY, PLUMBING, or -1 when it has
 * not decided (or decided something else, as for kname's own wrapper); -2 on error. */
static int
kind_of(Recorder *r, Frame *frame)
{
    PyCodeObject *code = frame_code(frame);
    uint64_t generation = generation_of(r->kinds);
    RecentKind *entry = recent_kind_slot(r, code);
    if (r->remember && entry->code == (void *)code && entry->generation == generation)
        return entry->kind;
    int kind = decided_kind(r->kinds, code);
    if (r->remember && kind != -2)
        *entry = (RecentKind){code, generation, kind};
    return kind;
}

/* The cached site of a launch made while `frame` runs, as capture.site_of_frame finds it: the
 * frame's own key, or, from library code, the first user frame's above. Borrowed name; NULL
 * without an error when Python must decide. *own: found under `frame`'s own key. `walk` (NULL:
 * not wanted): a site found by the walk, with what it read (its depth left 0 otherwise). */
static PyObject *
cached_site(Recorder *r, Frame *frame, int *own, WalkedSite *walk)
{
    PyObject *name = lookup(r, frame);
    *own = name != NULL;
    if (name != NULL || PyErr_Occurred())
        return name;
    int kind = kind_of(r, frame);
    if (!PASSED_OVER(kind))
        return NULL; /* a user frame with no site yet, undecided, or an error */
    Frame *f = frame_back(frame);
    for (int depth = 0; f != NULL && depth < MAX_WALK; depth++) {
        if (walk != NULL && depth < WALKED_DEPTH)
            walk->codes[depth] = frame_code(f);
        kind = kind_of(r, f);
        if (kind == KIND_USER) {
            name = lookup(r, f);
            if (walk != NULL && name != NULL && depth < WALKED_DEPTH) {
                walk->depth = depth + 1;
                walk->user = frame_position(f);
                walk->name = name;
            }
            return name;
        }
        if (!PASSED_OVER(kind))
            return NULL;
        f = frame_back(f);
    }
    return NULL;
}

/* ---- a launch made with the GIL released (torch's ops and CuPy's launches release it): its
 * site found again without taking the GIL, from this thread's own table of the sites it found
 * with the GIL taken under their frame's own key. The frame read is this thread's, stopped in
 * the launch call: no other thread changes it, and only this thread writes the table. The
 * dicts' generation is one aligned word their writers change under the GIL, read whole: a stale
 * read answers as the table did a moment before, as a launch racing a change of rules would. */

#ifdef FRAMES_WITHOUT_GIL

/* The entry of `t`'s table (ThreadCalls.sites: started afresh with its calls) for `position`. */
static inline ThreadSite *
thread_site_slot(ThreadCalls *t, const void *position)
{
    uintptr_t h = (uintptr_t)position >> 1;
    return &t->sites[(h ^ (h >> 7)) & (THREAD_SITES - 1)];
}

/* The same for the sites found by a walk (ThreadCalls.walked). */
static inline WalkedSite *
walked_slot(ThreadCalls *t, const void *position)
{
    uintptr_t h = (uintptr_t)position >> 1;
    return &t->walked[(h ^ (h >> 7)) & (WALKED_SITES - 1)];
}

/* The site this thread found for `state`'s running frame under its own key, while the dicts are
 * unchanged; NULL: not found here (the GIL is then taken). */
static PyObject *
site_without_gil(Recorder *r, ThreadCalls *t, PyThreadState *state)
{
    if (!r->remember)
        return NULL;
    Frame *frame = frame_of_state(state);
    if (frame == NULL)
        return NULL;
    const void *position = frame_position(frame);
    ThreadSite *entry = thread_site_slot(t, position);
    uint64_t sites_generation = generation_of(r->sites);
    if (entry->position == position && entry->code == (void *)frame_code(frame)
        && entry->generation == sites_generation)
        return entry->name;
    /* Found by a walk from here before: the same frames above, to the same user instruction. */
    const WalkedSite *walked = walked_slot(t, position);
    if (walked->depth == 0 || walked->position != position
        || walked->code != (void *)frame_code(frame)
        || walked->sites_generation != sites_generation
        || walked->kinds_generation != generation_of(r->kinds))
        return NULL;
    Frame *f = frame;
    for (int depth = 0; depth < walked->depth; depth++) {
        f = frame_back(f);
        if (f == NULL || (void *)frame_code(f) != walked->codes[depth])
            return NULL;
    }
    return frame_position(f) == walked->user ? walked->name : NULL;
}

/* `name`, found with the GIL under the running frame's own key (`walk` NULL) or by the walk
 * `walk` says, kept for site_without_gil. */
static void
remember_for_thread(Recorder *r, ThreadCalls *t, PyObject *name, WalkedSite *walk)
{
    Frame *frame = frame_current();
    if (!r->remember || frame == NULL || name == NULL)
        return;
    const void *position = frame_position(frame);
    if (walk == NULL) {
        *thread_site_slot(t, position) =
            (ThreadSite){position, (void *)frame_code(frame), generation_of(r->sites), name};
        return;
    }
    walk->position = position;
    walk->code = (void *)frame_code(frame);
    walk->sites_generation = generation_of(r->sites);
    walk->kinds_generation = generation_of(r->kinds);
    *walked_slot(t, position) = *walk;
}
#else
static PyObject *
site_without_gil(Recorder *r, ThreadCalls *t, PyThreadState *state)
{
    (void)r;
    (void)t;
    (void)state;
    return NULL;
}

static void
remember_for_thread(Recorder *r, ThreadCalls *t, PyObject *name, WalkedSite *walk)
{
    (void)r;
    (void)t;
    (void)name;
    (void)walk;
}
#endif

/* The site of a launch made now on this thread, which holds the GIL (borrowed; NULL: no Python
 * frame). Never fails: a fault is kept and the launch is named `unnamed`. *own: found cached
 * under the running frame's own key; `walk` (NULL: not wanted): as cached_site says. */
static PyObject *
site_of_running_frame(Recorder *r, int *own, WalkedSite *walk)
{
    *own = 0;
    Frame *frame = frame_current(); /* no frame object made: see _common_c/common.h */
    if (frame == NULL)
        return NULL;
    PyObject *pending = take_error(); /* a CUDA call made while an exception is being handled */
    PyObject *name = cached_site(r, frame, own, walk);
    if (name == NULL && PyErr_Occurred())
        note_fault(r, FINDING);
    if (name == NULL) {
        /* The slow path, once per call site: kname's own rules, in Python, which takes the
         * frame object (made now, if it was not yet). */
        PyObject *found = PyObject_CallOneArg(r->site_of_frame, (PyObject *)PyEval_GetFrame());
        if (found != NULL) {
            name = keep(r, found);
            Py_DECREF(found);
        }
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
                PyErr_Clear();
                PyErr_SetInterrupt(); /* not lost: raised again at the program's next check */
            }
            else
                note_fault(r, FINDING);
            name = r->unnamed;
        }
    }
    restore_error(pending);
    return name;
}

/* Whether this thread (`t`'s) holds the GIL now. Not PyGILState_Check(): once a sub-interpreter
 * has been made, that says yes on every thread. */
static int
gil_held_here(const ThreadCalls *t)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *current = PyThreadState_GetUnchecked();
#else
    PyThreadState *current = _PyThreadState_UncheckedGet();
#endif
    /* 3.11: the thread state holding the GIL, whichever thread's; 3.12+: this thread's. */
    return current != NULL && current->thread_id == t->thread;
}

/* The site of a launch whose call is not nested and not wrapped (borrowed; NULL: no frame). */
PyObject *
site_here(Recorder *r, ThreadCalls *t)
{
    if (t->naming)
        return r->unnamed; /* a launch API called by kname's own naming code: not walked again */
    PyThreadState *state = PyGILState_GetThisThreadState();
    if (state == NULL)
        return NULL; /* a thread Python never ran on (a C++ worker): no frame, no GIL needed */
    int held = gil_held_here(t);
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    if (!held) {
        PyObject *found = site_without_gil(r, t, state);
        if (found != NULL)
            return found;
        gil = PyGILState_Ensure();
    }
    t->naming = 1;
    int own;
    WalkedSite walk = {0};
    PyObject *site = site_of_running_frame(r, &own, held ? NULL : &walk);
    t->naming = 0;
    if (!held) {
        if (own || walk.depth > 0)
            remember_for_thread(r, t, site, own ? NULL : &walk);
        PyGILState_Release(gil);
    }
    return site;
}

/* The site of a launch with no Python frame (borrowed): set_frameless's name (the backward pass
 * running; NULL: none), or, with a namer set, namer(that name), asked under the GIL: the
 * forward line of the autograd node running here (kname.profiling.backward). A fault is kept
 * and the launch keeps the pass's name. */
PyObject *
frameless_site(Recorder *r, ThreadCalls *t)
{
    PyObject *frameless = atomic_load_explicit(&r->frameless, memory_order_acquire);
    if (frameless == NULL || t->naming || !atomic_load(&r->has_frameless_namer)
        || must_not_touch_python(r))
        return frameless;
    int held = gil_held_here(t);
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    if (!held)
        gil = PyGILState_Ensure();
    PyObject *name = frameless;
    PyObject *namer = r->frameless_namer; /* read under the GIL: set_frameless_namer holds it */
    if (namer != NULL) {
        t->naming = 1;
        PyObject *pending = take_error();
        PyObject *found = PyObject_CallOneArg(namer, frameless);
        PyObject *kept = found != NULL ? keep(r, found) : NULL;
        Py_XDECREF(found);
        if (kept != NULL)
            name = kept;
        else
            note_fault(r, FINDING);
        restore_error(pending);
        t->naming = 0;
    }
    if (!held)
        PyGILState_Release(gil);
    return name;
}
