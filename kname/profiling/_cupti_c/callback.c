/*
 * kname._native_cupti's launch callback (see recorder.h): what CUPTI calls at the enter and
 * the exit of each launch API call (on_api), on the launching thread: the calls open on each
 * thread, the site of the running Python frame (looked up as capture.site_of_frame finds a
 * cached one, in front of a table of recent look-ups), the buffer the finished calls wait in,
 * and the first fault, kept for take_fault(). And what it calls at CUPTI's graph resource
 * callbacks (graph_event): the node's ids and, for a node made, its site.
 */
#include "profiling/_cupti_c/callback.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char FINDING[] = "finding the call site of a CUDA launch";
static const char RECORDING[] = "recording a CUDA launch for kname profile";
static const char GRAPHING[] = "recording a CUDA graph node for kname profile";

_Thread_local ThreadCalls *here = NULL;

/* ------------------------------------------------------------------ faults */

void
note_fault(Recorder *r, const char *where)
{
    PyObject *exc = take_error();
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        r->fault = exc;
        r->fault_where = where;
        exc = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    Py_XDECREF(exc);
}

void
note_c_fault(Recorder *r, const char *where, const char *detail, long status)
{
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        snprintf(r->fault_detail, sizeof r->fault_detail, "%s (status %ld)", detail, status);
        r->fault_where = where;
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- each thread's buffer of finished calls (types.h: ThreadBuffer). Its thread appends
 * without a lock; everything else here runs under r->lock. */

static pthread_key_t thread_end;

/* One holder lets `b` go: the last frees it. Any thread, no lock. */
static void
let_go(ThreadBuffer *b)
{
    if (b != NULL && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free(b->records);
        free(b);
    }
}

/* This thread's calls' hold of their buffer let go (the records stay for the drain). */
static void
let_buffer_go(ThreadCalls *t)
{
    if (t->buffer != NULL)
        let_go(t->buffer);
    t->buffer = NULL;
    t->records = NULL;
    t->written = t->capacity = 0;
}

/* The thread holding `calls` ended: its buffer let go, its calls freed. A launch call made after
 * this on the same thread (from another library's destructor) makes them anew. */
static void
thread_ended(void *calls)
{
    ThreadCalls *t = (ThreadCalls *)calls;
    let_buffer_go(t);
    if (here == t)
        here = NULL;
    free(t);
}

int
thread_end_ready(void)
{
    static int made = 0;
    if (made)
        return 0;
    int failed = pthread_key_create(&thread_end, thread_ended);
    if (failed) {
        errno = failed;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    made = 1;
    return 0;
}

ThreadCalls *
calls_start(Recorder *r)
{
    ThreadCalls *t = here;
    if (t == NULL) {
        t = malloc(sizeof *t);
        if (t == NULL || pthread_setspecific(thread_end, t) != 0) {
            free(t);
            note_c_fault(r, RECORDING, "no memory for a thread's launch calls", 0);
            return NULL;
        }
        t->buffer = NULL;
        here = t;
    }
    else
        let_buffer_go(t); /* another recorder's: its list keeps it while it has records */
    memset(t, 0, offsetof(ThreadCalls, calls));
    t->owner = r->serial;
    t->thread = PyThread_get_thread_ident();
    return t;
}

/* A buffer for this thread, on r's list (NULL: no memory). Under r->lock. */
static ThreadBuffer *
new_buffer(Recorder *r, ThreadCalls *t)
{
    ThreadBuffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    atomic_store(&b->refs, 2);
    b->next = r->buffers;
    r->buffers = b;
    t->buffer = b;
    return b;
}

/* Room for one more record in `b`, full: the drained part's room, else more room, up to
 * max_pending made over every thread. 0: none (no memory: *no_memory). Under r->lock. */
static int
more_room(Recorder *r, ThreadBuffer *b, int *no_memory)
{
    Py_ssize_t count = atomic_load_explicit(&b->count, memory_order_relaxed);
    if (count < b->capacity)
        return 1;
    if (b->consumed > 0) { /* the drained part's room used again: the rest moved down */
        count -= b->consumed;
        memmove(b->records, &b->records[b->consumed], (size_t)count * sizeof(Launch));
        b->consumed = 0;
        atomic_store_explicit(&b->count, count, memory_order_relaxed);
        return 1;
    }
    Py_ssize_t capacity = b->capacity ? 2 * b->capacity : FIRST_ROOM;
    if (capacity - b->capacity > r->max_pending - r->room)
        capacity = b->capacity + (r->max_pending - r->room);
    if (capacity <= b->capacity)
        return 0;
    Launch *grown = realloc(b->records, (size_t)capacity * sizeof(Launch));
    if (grown == NULL) {
        *no_memory = 1;
        return 0;
    }
    r->room += capacity - b->capacity;
    b->records = grown;
    b->capacity = capacity;
    return 1;
}

/* `launch` into this thread's buffer, past its room: under r->lock, a buffer made or room made
 * (or the call dropped, counted). */
static void
append_slowly(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    int no_memory = 0;
    pthread_mutex_lock(&r->lock);
    ThreadBuffer *b = t->buffer != NULL ? t->buffer : new_buffer(r, t);
    if (b != NULL && more_room(r, b, &no_memory)) {
        Py_ssize_t count = atomic_load_explicit(&b->count, memory_order_relaxed);
        b->records[count] = *launch;
        atomic_store_explicit(&b->count, count + 1, memory_order_release);
    }
    else {
        no_memory |= b == NULL;
        r->dropped++;
    }
    if (b != NULL) { /* this thread's view of it, for append() */
        t->records = b->records;
        t->written = atomic_load_explicit(&b->count, memory_order_relaxed);
        t->capacity = b->capacity;
    }
    pthread_mutex_unlock(&r->lock);
    if (no_memory)
        note_c_fault(r, RECORDING, "no memory for another launch record", 0);
}

/* A finished call into this thread's buffer: without a lock while it has room (this thread's
 * view of the buffer is read, the buffer's count only written). */
static inline void
append(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    Py_ssize_t written = t->written;
    if (written < t->capacity) {
        t->records[written] = *launch;
        t->written = written + 1;
        atomic_store_explicit(&t->buffer->count, written + 1, memory_order_release);
        return;
    }
    append_slowly(r, t, launch);
}

/* Calls open on `t` to be recorded at their exit: `delta` more (its thread alone writes it;
 * counts() reads it). 0: no buffer for them (no memory): such a call is not recorded. */
static int
open_calls_change(Recorder *r, ThreadCalls *t, int delta)
{
    ThreadBuffer *b = t->buffer;
    if (b == NULL) {
        pthread_mutex_lock(&r->lock);
        b = new_buffer(r, t);
        pthread_mutex_unlock(&r->lock);
        if (b == NULL) {
            note_c_fault(r, RECORDING, "no memory for another launch record", 0);
            return 0;
        }
    }
    t->open += delta;
    atomic_store_explicit(&b->open, t->open, memory_order_relaxed);
    return 1;
}

/* A call recorded at its exit finished (or was forgotten): into this thread's buffer. */
static void
finish(Recorder *r, ThreadCalls *t, const Launch *launch)
{
    open_calls_change(r, t, -1);
    append(r, t, launch);
}

/* The records `b` holds for the drain, from `consumed`. */
static inline Py_ssize_t
waiting_in(ThreadBuffer *b)
{
    return atomic_load_explicit(&b->count, memory_order_acquire) - b->consumed;
}

/* The buffers of threads that ended, drained, taken off the list and let go. */
static void
drop_ended_buffers(Recorder *r)
{
    for (ThreadBuffer **at = &r->buffers; *at != NULL;) {
        ThreadBuffer *b = *at;
        if (atomic_load_explicit(&b->refs, memory_order_acquire) == 1 && waiting_in(b) == 0) {
            *at = b->next;
            r->room -= b->capacity;
            let_go(b);
        }
        else
            at = &b->next;
    }
}

void
waiting_calls(Recorder *r, Py_ssize_t *finished, Py_ssize_t *open)
{
    *finished = *open = 0;
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next) {
        *finished += waiting_in(b);
        *open += atomic_load_explicit(&b->open, memory_order_relaxed);
    }
}

/* A thread's records waiting for the drain, from `at` to `end`. */
typedef struct {
    const Launch *at, *end;
} Run;

/* The runs, a min-heap by their first record's correlation id: runs[i] sifted down. */
static void
sift_down(Run *runs, size_t n, size_t i)
{
    for (;;) {
        size_t least = i, left = 2 * i + 1, right = left + 1;
        if (left < n && runs[left].at->correlation_id < runs[least].at->correlation_id)
            least = left;
        if (right < n && runs[right].at->correlation_id < runs[least].at->correlation_id)
            least = right;
        if (least == i)
            return;
        Run swap = runs[i];
        runs[i] = runs[least];
        runs[least] = swap;
        i = least;
    }
}

/* The threads' runs merged into `out`, as they would have finished one after the other: each
 * thread's in its own order, the next taken from the thread whose next call entered first
 * (CUPTI numbers the calls as they enter, over every thread). `runs` is used up. */
static void
merge_runs(Run *runs, size_t n, Launch *out)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(runs, n, i);
    while (n > 0) {
        *out++ = *runs[0].at++;
        if (runs[0].at == runs[0].end)
            runs[0] = runs[--n];
        sift_down(runs, n, 0);
    }
}

Launch *
take_finished(Recorder *r, Py_ssize_t *count)
{
    pthread_mutex_lock(&r->lock);
    size_t threads = 0;
    Py_ssize_t total = 0;
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next, threads++)
        total += waiting_in(b);
    Launch *taken = total ? malloc((size_t)total * sizeof(Launch)) : NULL;
    Run *runs = total ? malloc(threads * sizeof(Run)) : NULL;
    *count = total;
    if (taken != NULL && runs != NULL) {
        size_t n = 0;
        Py_ssize_t at = 0;
        for (ThreadBuffer *b = r->buffers; b != NULL && at < total; b = b->next) {
            Py_ssize_t end = atomic_load_explicit(&b->count, memory_order_acquire);
            if (end - b->consumed > total - at) /* written since it was counted */
                end = b->consumed + (total - at);
            if (end > b->consumed)
                runs[n++] = (Run){&b->records[b->consumed], &b->records[end]};
            at += end - b->consumed;
            b->consumed = end;
        }
        merge_runs(runs, n, taken);
    }
    else if (taken != NULL) {
        free(taken);
        taken = NULL;
    }
    if (total == 0 || taken != NULL) /* all drained: the buffers of threads that ended go */
        drop_ended_buffers(r);
    pthread_mutex_unlock(&r->lock);
    free(runs);
    return taken;
}

void
forget_finished(Recorder *r)
{
    pthread_mutex_lock(&r->lock);
    for (ThreadBuffer *b = r->buffers; b != NULL; b = b->next)
        b->consumed = atomic_load_explicit(&b->count, memory_order_acquire);
    drop_ended_buffers(r);
    pthread_mutex_unlock(&r->lock);
}

void
free_buffers(Recorder *r)
{
    pthread_mutex_lock(&r->lock);
    ThreadBuffer *b = r->buffers;
    r->buffers = NULL;
    r->room = 0;
    pthread_mutex_unlock(&r->lock);
    while (b != NULL) {
        ThreadBuffer *next = b->next;
        let_go(b);
        b = next;
    }
}

NodeEvent *
take_node_events(Recorder *r, Py_ssize_t *count)
{
    pthread_mutex_lock(&r->lock);
    *count = r->node_event_count;
    NodeEvent *taken = *count ? malloc((size_t)*count * sizeof(NodeEvent)) : NULL;
    if (taken != NULL) {
        memcpy(taken, r->node_events, (size_t)*count * sizeof(NodeEvent));
        r->node_event_count = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return taken;
}

/* A graph node event into its buffer, up to max_pending (past that, or with no memory, counted
 * in node_events_dropped). */
static void
keep_node_event(Recorder *r, const NodeEvent *e)
{
    pthread_mutex_lock(&r->lock);
    if (r->node_event_count == r->node_event_capacity && r->node_event_count < r->max_pending) {
        Py_ssize_t capacity = r->node_event_capacity ? 2 * r->node_event_capacity : 256;
        if (capacity > r->max_pending)
            capacity = r->max_pending;
        NodeEvent *grown = realloc(r->node_events, (size_t)capacity * sizeof *grown);
        if (grown != NULL) {
            r->node_events = grown;
            r->node_event_capacity = capacity;
        }
    }
    if (r->node_event_count < r->node_event_capacity)
        r->node_events[r->node_event_count++] = *e;
    else
        r->node_events_dropped++;
    pthread_mutex_unlock(&r->lock);
}

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

#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)

/* The running frame of `state`, a thread state of this thread whose GIL is released. */
static inline Frame *
frame_of_state(PyThreadState *state)
{
#if PY_VERSION_HEX >= 0x030D0000
    return complete_frame(state->current_frame);
#else
    return complete_frame(state->cframe->current_frame);
#endif
}

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
static PyObject *
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
static PyObject *
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

/* ---- enter and exit: what the CUPTI callback calls (and the test methods) */

/* An exit was missed: no stale outer call may name later launches. The recorded ones are kept
 * with no end time, as the Python capture keeps them. */
static void
forget_open_calls(Recorder *r, ThreadCalls *t)
{
    for (int i = 0; i < t->count; i++) {
        if (t->calls[i].recorded)
            finish(r, t, &t->calls[i].launch);
    }
    t->count = 0;
    pthread_mutex_lock(&r->lock);
    r->forgot_open_calls = 1;
    pthread_mutex_unlock(&r->lock);
}

/* A launch API call starts on this thread (`t`): its site, and the call open until its exit.
 * `graph`: the api launches a graph. With `at_enter` it is recorded now (nothing at its exit
 * needs it: no end time is taken), and its exit only closes it; else it is recorded at its
 * exit. */
static void
enter_call(Recorder *r, ThreadCalls *t, uint32_t correlation_id, int api, int graph,
           uint64_t timestamp, int at_enter)
{
    if (t->count >= r->max_open)
        forget_open_calls(r, t);
    Launch launch = {timestamp, 0, t->thread, NULL, correlation_id, 0, (uint16_t)api,
                     (uint8_t)graph};
    if (t->count > 0) {
        const Launch *outer = &t->calls[t->count - 1].launch;
        launch.site = outer->site;
        launch.parent = outer->correlation_id;
    }
    else if (t->wrapped != NULL) {
        launch.site = t->wrapped; /* inside a launch kname wraps: its push said the site */
    }
    else {
        launch.site = site_here(r, t);
        if (launch.site == NULL) /* no Python frame: autograd's threads, in a backward pass */
            launch.site = frameless_site(r, t);
        if (t->count >= r->max_open) /* Python ran meanwhile, and launched more */
            forget_open_calls(r, t);
    }
    OpenCall *call = &t->calls[t->count++];
    call->launch = launch;
    if (at_enter) {
        append(r, t, &launch);
        call->recorded = 0; /* in the buffer already: its exit has nothing to add */
    }
    else
        call->recorded = open_calls_change(r, t, 1);
    atomic_store_explicit(&r->last_correlation_id, correlation_id, memory_order_relaxed);
}

void
launch_enter(Recorder *r, uint32_t correlation_id, int api, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    if (t != NULL)
        enter_call(r, t, correlation_id, api, r->graph_of[api], timestamp, 0);
}

/* The open call `correlation_id` of this thread, taken off its list (the innermost, as calls
 * nest, without a copy: read it before the thread's next enter); NULL: none open. */
static inline OpenCall *
take_open_call(ThreadCalls *t, uint32_t correlation_id)
{
    int last = t->count - 1;
    if (last >= 0 && t->calls[last].launch.correlation_id == correlation_id) {
        t->count = last;
        return &t->calls[last];
    }
    for (int i = last - 1; i >= 0; i--) { /* an exit out of order: its call moved to the top */
        if (t->calls[i].launch.correlation_id != correlation_id)
            continue;
        OpenCall call = t->calls[i];
        memmove(&t->calls[i], &t->calls[i + 1], (size_t)(last - i) * sizeof(OpenCall));
        t->calls[last] = call;
        t->count = last;
        return &t->calls[last];
    }
    return NULL;
}

void
launch_exit(Recorder *r, uint32_t correlation_id, uint64_t timestamp)
{
    ThreadCalls *t = calls_of(r);
    OpenCall *call = t != NULL ? take_open_call(t, correlation_id) : NULL;
    if (call != NULL && call->recorded) {
        call->launch.end = timestamp;
        finish(r, t, &call->launch);
    }
}

/* cuptiGetTimestamp, or 0 when it fails (kept as a fault). */
static uint64_t
timestamp_now(Recorder *r)
{
    uint64_t timestamp = 0;
    kn_CUptiResult status = r->get_timestamp(&timestamp);
    if (status != KN_CUPTI_SUCCESS) {
        note_c_fault(r, RECORDING, "cuptiGetTimestamp failed", (long)status);
        return 0;
    }
    return timestamp;
}

/* Whether a launch call entering now on `t` gets a CPU timestamp: every call for a trace or a
 * stream log (`timed`); else, for the launch-bound verdict (`timed_outer`), an outermost one
 * only (the driver's call inside the runtime's is part of the outer call's time). */
static inline int
stamps_enter(Recorder *r, ThreadCalls *t)
{
    return atomic_load_explicit(&r->timed, memory_order_relaxed)
           || (atomic_load_explicit(&r->timed_outer, memory_order_relaxed) && t->count == 0);
}

/* The enter of a launch call, timed (where stamps_enter says) once kname's own work for it is
 * done: its CPU time is the launch API's, not the site's look-up (0: not timed). A call not
 * timed is recorded at its enter: its exit then touches nothing but this thread's list, and
 * the buffer's lock is taken once a call, not twice. */
static void
launch_enter_now(Recorder *r, uint32_t correlation_id, int api, int graph)
{
    ThreadCalls *t = calls_of(r);
    if (t == NULL)
        return;
    int stamped = stamps_enter(r, t);
    enter_call(r, t, correlation_id, api, graph, 0, !stamped);
    if (stamped && t->count > 0 && t->calls[t->count - 1].launch.correlation_id == correlation_id)
        t->calls[t->count - 1].launch.start = timestamp_now(r);
}

/* The exit of a launch call: timed as its enter was (an outermost call timed at its enter). */
static void
launch_exit_now(Recorder *r, uint32_t correlation_id)
{
    ThreadCalls *t = calls_of(r);
    OpenCall *call = t != NULL ? take_open_call(t, correlation_id) : NULL;
    if (call == NULL || !call->recorded)
        return;
    int timed = atomic_load_explicit(&r->timed, memory_order_relaxed);
    if (timed || (call->launch.start != 0 && call->launch.parent == 0))
        call->launch.end = timestamp_now(r);
    finish(r, t, &call->launch);
}

/* ---- CUDA graphs: what the callback calls at CUPTI's graph resource callbacks */

/* An id through one of CUPTI's functions (0 for a null handle, or when it fails: said once). */
#define GRAPH_ID(r, get, handle, id)                                                           \
    do {                                                                                       \
        if ((handle) != NULL && (get) != NULL) {                                               \
            kn_CUptiResult status = (get)((handle), (id));                                     \
            if (status != KN_CUPTI_SUCCESS) {                                                  \
                note_c_fault((r), GRAPHING, #get " failed", (long)status);                     \
                *(id) = 0;                                                                     \
            }                                                                                  \
        }                                                                                      \
    } while (0)

void
graph_event(Recorder *r, int event, const kn_ResourceData *data)
{
    const kn_GraphData *graph = (const kn_GraphData *)data->resourceDescriptor;
    if (graph == NULL)
        return;
    NodeEvent e;
    memset(&e, 0, sizeof e);
    e.event = (uint8_t)event;
    GRAPH_ID(r, r->get_graph_node_id, graph->node, &e.node);
    GRAPH_ID(r, r->get_graph_node_id, graph->originalNode, &e.original);
    GRAPH_ID(r, r->get_graph_id, graph->graph, &e.graph);
    GRAPH_ID(r, r->get_graph_exec_id, graph->graphExec, &e.graph_exec);
    if (event == NODE_CREATED) {
        /* Made during stream capture: inside the launch call captured, which has its site. */
        ThreadCalls *t = calls_of(r);
        if (t == NULL)
            e.site = r->unnamed;
        else if (t->count > 0)
            e.site = t->calls[t->count - 1].launch.site;
        else if (t->wrapped != NULL)
            e.site = t->wrapped;
        else
            e.site = site_here(r, t); /* added explicitly: the line that added it */
    }
    e.correlation_id = atomic_load_explicit(&r->last_correlation_id, memory_order_relaxed);
    keep_node_event(r, &e);
}

/* The api index + 1 and GRAPH_API of a launch API (0: not recorded). */
static inline unsigned
api_of(Recorder *r, kn_CallbackDomain domain, kn_CallbackId cbid)
{
    if (domain > 2 || cbid >= MAX_CBID)
        return 0;
    return r->apis_of[domain][cbid];
}

void
on_api(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *cbdata)
{
    Recorder *r = (Recorder *)userdata;
    const kn_CallbackData *data = (const kn_CallbackData *)cbdata;
    if (r == NULL || data == NULL)
        return;
    if (domain != KN_CUPTI_CB_DOMAIN_RESOURCE && data->callbackSite == KN_CUPTI_API_EXIT) {
        /* An exit touches no Python (this thread's list, the buffer): only whether the recorder
         * stopped, or this is a forked child, is read, not the interpreter's state. */
        if (!atomic_load_explicit(&r->stopped, memory_order_relaxed)
            && atomic_load_explicit(&forks, memory_order_relaxed) == r->forks)
            launch_exit_now(r, data->correlationId);
        return;
    }
    if (must_not_touch_python(r))
        return;
    if (domain == KN_CUPTI_CB_DOMAIN_RESOURCE) { /* its data is a kn_ResourceData */
        int event = cbid < MAX_RESOURCE_CBID ? r->graph_events[cbid] : 0;
        if (event)
            graph_event(r, event, (const kn_ResourceData *)cbdata);
        return;
    }
    if (data->callbackSite == KN_CUPTI_API_ENTER) {
        unsigned api = api_of(r, domain, cbid);
        if (api != 0)
            launch_enter_now(r, data->correlationId, (int)(api & MAX_APIS) - 1,
                             (api & GRAPH_API) != 0);
    }
}


