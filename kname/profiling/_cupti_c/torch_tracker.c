/*
 * TorchMemory's tracked events: torch's caching allocator calls the C++ trackers attached to it
 * (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) at every block it hands out and
 * every free asked of it, on the calling thread, inside its per-device lock, with the GIL held
 * or not (Python's refcounting frees tensors with it held). kname's tracker (kname/profiling/
 * _torch_tracker/tracker.cpp, compiled against the torch in use) hands each to tracker_event,
 * which runs no Python and never takes the GIL (another thread may hold it while it waits for
 * that lock): it reads the thread's running frame as launch_site.c does without the GIL (the
 * thread is stopped in the allocation: only it changes its frames), names the block from a
 * table of the sites found before (KnownSite: by the running instruction, in buckets of ways
 * told apart by the frames up to the user's, as one library instruction serves many lines),
 * and keeps
 * (address, size, time, name) in a buffer guarded by a mutex of its own. A block whose line is
 * not known yet keeps the codes and offsets of its frames (a Miss); a block with no Python
 * frame (torch's autograd threads) takes the running backward pass's name (set_frameless).
 *
 * Under the GIL: a pending call (Py_AddPendingCall needs no GIL) runs on the main thread at its
 * next check, which CPython makes as the allocating call instruction ends, in the frame that
 * made it: it names the misses made from that frame by kname's rules (site_now, as the GPU
 * trace's hook does), tries the others once by the dicts (a line whose launch kname named
 * since), and settles every `batch` events. take_tracked() names what is left by the dicts
 * along each miss's recorded frames (their code objects are only ever used as ids; what stays
 * unknown, a thread other than the main one at a line kname never named, is `unnamed`) and
 * hands every event over. The buffer's mutex is never held while Python runs or torch is
 * called: the order is torch's lock, then this one. The state and the table of known sites are
 * tracked_sites.c's.
 */
#include "profiling/_cupti_c/tracked_sites.h" /* first: it includes Python.h */
#include "profiling/_cupti_c/ledger.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MISSES 4096       /* misses waiting; past that, a block's line may be left unnamed */
#define MAX_TRACKED (1 << 21) /* events waiting; past that (nothing settles), they are lost */

enum { TRACKED_ALLOC = 1, TRACKED_FREE = 2 }; /* tracker.cpp's actions */

static const char NAMING[] = "finding the line of a torch allocation";
static const char SETTLING[] = "settling torch's tracked allocations";

/* ------------------------------------------------------------------ without the GIL */

#ifdef FRAMES_WITHOUT_GIL

/* A miss kept for a block allocated while `frame` runs on `state`'s thread: 1 + its index, or 0
 * where no room is left. Lock held. */
static int32_t
note_miss(PyThreadState *state, Frame *frame)
{
    if (tracked.misses == NULL)
        tracked.misses = malloc(MAX_MISSES * sizeof(Miss));
    if (tracked.misses == NULL || tracked.missed >= MAX_MISSES)
        return 0;
    Miss *miss = &tracked.misses[tracked.missed];
    miss->state = state;
    miss->claimed = 0;
    miss->name = NULL;
    record_chain(frame, miss);
    return (int32_t)++tracked.missed;
}

/* Room for one more event; 0 where none. Lock held. */
static int
tracked_room(void)
{
    if (tracked.count < tracked.room)
        return 1;
    Py_ssize_t room = tracked.room ? 2 * tracked.room : 1024;
    if (room > MAX_TRACKED)
        return 0;
    TrackedEvent *grown = realloc(tracked.events, (size_t)room * sizeof(TrackedEvent));
    if (grown == NULL)
        return 0;
    tracked.events = grown;
    tracked.room = room;
    return 1;
}

static int tracked_call(void *unused);
static void tracker_let_go(TorchMemory *m);

/* What tracker.cpp calls for each block: `action` TRACKED_ALLOC or TRACKED_FREE. Any thread, any
 * lock, the GIL held or not: no Python object is touched but the frames of this thread. */
static void
tracker_event(int action, uint64_t address, uint64_t size)
{
    if (!atomic_load_explicit(&tracked.on, memory_order_acquire)
        || (action != TRACKED_ALLOC && action != TRACKED_FREE))
        return;
    int64_t ns = now_ns();
    PyThreadState *state = NULL;
    Frame *frame = NULL;
    if (action == TRACKED_ALLOC) {
        state = PyGILState_GetThisThreadState(); /* NULL: a thread Python never ran on */
        frame = state != NULL ? frame_of_state(state) : NULL;
    }
    int ask = 0;
    pthread_mutex_lock(&tracked.lock);
    if (!atomic_load(&tracked.on)) {
        pthread_mutex_unlock(&tracked.lock);
        return;
    }
    if (!tracked_room()) {
        tracked.lost++;
        pthread_mutex_unlock(&tracked.lock);
        return;
    }
    TrackedEvent *e = &tracked.events[tracked.count++];
    *e = (TrackedEvent){.address = address, .size = size, .ns = ns,
                        .is_free = action == TRACKED_FREE};
    if (action == TRACKED_ALLOC && frame == NULL) {
        e->frameless = 1;
        e->site = atomic_load(&tracked.frameless);
    }
    else if (action == TRACKED_ALLOC && (e->site = known_site(frame)) == NULL) {
        e->miss = note_miss(state, frame);
        tracked.misses_seen++;
        ask = 1;
    }
    ask |= tracked.count >= tracked.batch;
    pthread_mutex_unlock(&tracked.lock);
    if (ask && !atomic_exchange(&tracked.asked, 1) && Py_AddPendingCall(tracked_call, NULL) < 0)
        atomic_store(&tracked.asked, 0); /* CPython's queue is full: asked again next time */
}
#endif

/* ------------------------------------------------------------------ under the GIL */

/* The name of `miss`'s block (borrowed from m->kept), or NULL (an error noted): the pending call's
 * where it named it, else by the dicts. */
static PyObject *
miss_site(TorchMemory *m, Miss *miss)
{
    if (miss->name != NULL)
        return miss->name;
    KnownSite k;
    PyObject *name = chain_site(m, miss, &k);
    PyObject *kept = name != NULL ? keep_name(m, name) : NULL;
    if (kept == NULL && PyErr_Occurred())
        memory_fault(m, NAMING);
    if (kept != NULL)
        remember_known(m, &k, kept);
    return kept;
}

#ifdef FRAMES_WITHOUT_GIL
/* The misses made from the running frame of this thread (the main one), named now by kname's
 * rules, and the site remembered for the next blocks from there. */
static void
name_misses_here(TorchMemory *m)
{
    Frame *frame = frame_current();
    if (frame == NULL)
        return;
    PyThreadState *me = PyThreadState_Get();
    const void *position = frame_position(frame);
    void *code = frame_code(frame);
    int found = 0;
    pthread_mutex_lock(&tracked.lock);
    for (Py_ssize_t i = tracked.tried; i < tracked.missed; i++) {
        Miss *miss = &tracked.misses[i];
        if (!miss->claimed && miss->state == me && miss->positions[0] == position
            && (void *)miss->codes[0] == code)
            found = miss->claimed = 1;
    }
    pthread_mutex_unlock(&tracked.lock);
    if (!found)
        return;
    PyObject *name = site_now(m); /* may run Python: no lock held */
    PyObject *kept = keep_name(m, name);
    Py_DECREF(name);
    if (kept == NULL) {
        memory_fault(m, NAMING);
        return;
    }
    Miss here;
    KnownSite k;
    record_chain(frame, &here);
    PyObject *cached = chain_site(m, &here, &k);
    if (cached == kept || (cached != NULL && PyUnicode_Compare(cached, kept) == 0))
        remember_known(m, &k, kept);
    PyErr_Clear(); /* a look-up's error: the misses are named all the same */
    pthread_mutex_lock(&tracked.lock);
    for (Py_ssize_t i = tracked.tried; i < tracked.missed; i++) {
        Miss *miss = &tracked.misses[i];
        if (miss->claimed == 1 && miss->state == me && miss->positions[0] == position
            && (void *)miss->codes[0] == code) {
            miss->name = kept;
            miss->claimed = 2;
        }
    }
    pthread_mutex_unlock(&tracked.lock);
}
#else
static void
name_misses_here(TorchMemory *m)
{
    (void)m;
}
#endif

/* The misses the pending call has not tried yet, named by the dicts where they can be (a line
 * whose launch kname has named since, as an operator's), each tried once here: the next blocks
 * from their frames are then known. The lock is not held while the dicts are read. */
static void
name_misses_by_dicts(TorchMemory *m)
{
    for (;;) {
        pthread_mutex_lock(&tracked.lock);
        if (tracked.tried >= tracked.missed) {
            pthread_mutex_unlock(&tracked.lock);
            return;
        }
        Py_ssize_t index = tracked.tried++;
        uint64_t takes = tracked.takes;
        Miss miss = tracked.misses[index];
        pthread_mutex_unlock(&tracked.lock);
        PyObject *kept = miss.name == NULL ? miss_site(m, &miss) : NULL;
        if (kept == NULL)
            continue;
        pthread_mutex_lock(&tracked.lock);
        if (tracked.takes == takes && index < tracked.missed)
            tracked.misses[index].name = kept;
        pthread_mutex_unlock(&tracked.lock);
    }
}

/* The pending call: the misses named here, and the events settled when `batch` wait. */
static int
tracked_call(void *unused)
{
    (void)unused;
    atomic_store(&tracked.asked, 0);
    TorchMemory *m = tracked.owner;
    if (m == NULL || m->settling)
        return 0;
    Py_INCREF(m);
    PyObject *pending = take_error();
    name_misses_here(m);
    name_misses_by_dicts(m);
    pthread_mutex_lock(&tracked.lock);
    int due = tracked.count >= tracked.batch;
    pthread_mutex_unlock(&tracked.lock);
    if (due && m->settle != NULL && tracked.owner == m) {
        m->settling = 1;
        PyObject *result = PyObject_CallNoArgs(m->settle);
        m->settling = 0;
        if (result == NULL)
            memory_fault(m, SETTLING);
        Py_XDECREF(result);
    }
    restore_error(pending);
    Py_DECREF(m);
    return 0;
}

/* ------------------------------------------------------------------ methods */

/* track(batch) -> the address of tracker_event, for tracker.cpp: this TorchMemory's events now
 * come from torch's allocator trace tracker too, settled every `batch`. */
static PyObject *
memory_track(TorchMemory *m, PyObject *args)
{
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "n:track", &batch))
        return NULL;
#ifdef FRAMES_WITHOUT_GIL
    if (batch < 1) {
        PyErr_SetString(PyExc_ValueError, "track: batch must be >= 1");
        return NULL;
    }
    if (tracked.owner != NULL && tracked.owner != m)
        tracker_let_go(tracked.owner);
    pthread_mutex_lock(&tracked.lock);
    tracked.owner = m;
    tracked.sites = m->sites;
    tracked.kinds = m->kinds;
    tracked.remember = m->remember;
    tracked.batch = batch;
    pthread_mutex_unlock(&tracked.lock);
    atomic_store(&tracked.on, m->on);
    return PyLong_FromVoidPtr((void *)tracker_event);
#else
    (void)m;
    (void)batch;
    PyErr_SetString(PyExc_RuntimeError,
                    "this Python's frames cannot be read without the GIL (CPython 3.11-3.13)");
    return NULL;
#endif
}

static void
tracker_set(TorchMemory *m)
{
    if (tracked.owner != m)
        return;
    pthread_mutex_lock(&tracked.lock);
    tracked.batch = m->batch;
    pthread_mutex_unlock(&tracked.lock);
    atomic_store(&tracked.on, m->on);
}

static void
tracker_let_go(TorchMemory *m)
{
    if (tracked.owner != m)
        return;
    atomic_store(&tracked.on, 0);
    atomic_store(&tracked.frameless, NULL);
    pthread_mutex_lock(&tracked.lock);
    tracked.owner = NULL;
    tracked.remember = 0;
    free(tracked.events);
    free(tracked.misses);
    tracked.events = NULL;
    tracked.misses = NULL;
    tracked.count = tracked.room = tracked.missed = tracked.tried = tracked.lost = 0;
    tracked.misses_seen = 0;
    tracked.takes++;
    memset(tracked.known, 0, sizeof tracked.known);
    pthread_mutex_unlock(&tracked.lock);
}

/* set_frameless(name or None): what a block with no Python frame is named from now on. */
static PyObject *
memory_set_frameless(TorchMemory *m, PyObject *name)
{
    PyObject *kept = NULL;
    if (name != Py_None) {
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "set_frameless: a str or None");
            return NULL;
        }
        kept = keep_name(m, name);
        if (kept == NULL)
            return NULL;
    }
    if (tracked.owner == m)
        atomic_store(&tracked.frameless, kept);
    Py_RETURN_NONE;
}

/* The name of a block allocated with no Python frame and no pass running (borrowed, kept). */
static PyObject *
no_frame_site(TorchMemory *m)
{
    PyObject *found = PyObject_CallOneArg(m->site_of_frame, Py_None);
    PyObject *kept = found != NULL && PyUnicode_Check(found) ? keep_name(m, found) : NULL;
    Py_XDECREF(found);
    if (kept == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "site_of_frame(None) gave no str");
        memory_fault(m, NAMING);
    }
    return kept;
}

/* The tracked events so far, taken (the buffer emptied); under the GIL. */
typedef struct {
    TrackedEvent *events;
    Py_ssize_t count;
    Miss *misses;
} Taken;

static Taken
take_buffer(TorchMemory *m)
{
    pthread_mutex_lock(&tracked.lock);
    Taken taken = {tracked.events, tracked.count, tracked.misses};
    m->lost += tracked.lost;
    tracked.events = NULL;
    tracked.misses = NULL;
    tracked.count = tracked.room = tracked.missed = tracked.tried = tracked.lost = 0;
    tracked.takes++;
    pthread_mutex_unlock(&tracked.lock);
    return taken;
}

/* The name of `e`'s block (borrowed, kept; NULL: a free), naming it now where C could not
 * (a miss, by the dicts along its frames; no frame and no pass, by kname's rules: `no_frame`,
 * found once per take). */
static PyObject *
event_site(TorchMemory *m, const Taken *taken, const TrackedEvent *e, PyObject **no_frame)
{
    if (e->is_free)
        return NULL;
    PyObject *site = e->site;
    if (site == NULL && e->miss > 0)
        site = miss_site(m, &taken->misses[e->miss - 1]);
    else if (site == NULL && e->frameless)
        site = *no_frame != NULL ? *no_frame : (*no_frame = no_frame_site(m));
    return site != NULL ? site : m->unnamed;
}

/* take_tracked() -> [(address, site or None (a free), ns, size)]: the tracked events so far,
 * each block named; the buffer emptied. */
static PyObject *
memory_take_tracked(TorchMemory *m, PyObject *unused)
{
    (void)unused;
    if (tracked.owner != m)
        return PyList_New(0);
    Taken events = take_buffer(m);
    int settling = m->settling;
    m->settling = 1; /* no pending call takes the next events in the middle of these */
    PyObject *taken = PyList_New(events.count);
    PyObject *no_frame = NULL;
    for (Py_ssize_t i = 0; taken != NULL && i < events.count; i++) {
        const TrackedEvent *e = &events.events[i];
        PyObject *site = event_site(m, &events, e, &no_frame);
        PyObject *item = Py_BuildValue("(KOLK)", (unsigned long long)e->address,
                                       site != NULL ? site : Py_None, (long long)e->ns,
                                       (unsigned long long)e->size);
        if (item == NULL)
            Py_CLEAR(taken);
        else
            PyList_SET_ITEM(taken, i, item);
    }
    m->settling = settling;
    free(events.events);
    free(events.misses);
    return taken;
}

/* take_tracked_into(ledger) -> the number of events: the tracked events so far, each block
 * named, added to `ledger` (a kname._native_cupti.Ledger) in order, with no tuple each; the
 * buffer emptied. An event the ledger has no memory for is lost, counted with take_lost(). */
static PyObject *
memory_take_tracked_into(TorchMemory *m, PyObject *ledger)
{
    if (!PyObject_TypeCheck(ledger, &NativeLedgerType)) {
        PyErr_SetString(PyExc_TypeError, "take_tracked_into: a kname._native_cupti.Ledger");
        return NULL;
    }
    if (tracked.owner != m)
        return PyLong_FromLong(0);
    Taken events = take_buffer(m);
    int settling = m->settling;
    m->settling = 1; /* as in take_tracked */
    PyObject *no_frame = NULL;
    for (Py_ssize_t i = 0; i < events.count; i++) {
        const TrackedEvent *e = &events.events[i];
        PyObject *site = event_site(m, &events, e, &no_frame);
        if (ledger_add((NativeLedger *)ledger, e->address, site, e->ns, e->size) < 0) {
            PyErr_Clear(); /* no memory: this one is lost, the program's allocation goes on */
            m->lost++;
        }
    }
    m->settling = settling;
    free(events.events);
    free(events.misses);
    return PyLong_FromSsize_t(events.count);
}

/* take_misses() -> blocks whose line was not known in C as they came, since the last take. */
static PyObject *
memory_take_misses(TorchMemory *m, PyObject *unused)
{
    (void)unused;
    Py_ssize_t seen = 0;
    if (tracked.owner == m) {
        pthread_mutex_lock(&tracked.lock);
        seen = tracked.misses_seen;
        tracked.misses_seen = 0;
        pthread_mutex_unlock(&tracked.lock);
    }
    return PyLong_FromSsize_t(seen);
}

static PyMethodDef tracker_methods[] = {
    {"track", (PyCFunction)memory_track, METH_VARARGS,
     "track(batch) -> the address of the C function torch's allocator tracker calls "
     "(action 1: a block handed out, 2: a free asked, address, size)."},
    {"take_tracked", (PyCFunction)memory_take_tracked, METH_NOARGS,
     "take_tracked() -> [(address, site or None for a free, ns, size)]: the tracked events."},
    {"take_tracked_into", (PyCFunction)memory_take_tracked_into, METH_O,
     "take_tracked_into(ledger) -> the number of tracked events added to a Ledger, in order."},
    {"take_misses", (PyCFunction)memory_take_misses, METH_NOARGS,
     "take_misses() -> blocks whose line was not known in C as they came, since the last."},
    {"set_frameless", (PyCFunction)memory_set_frameless, METH_O,
     "set_frameless(name or None): the name of a block allocated with no Python frame."},
    {NULL, NULL, 0, NULL},
};

void
tracker_in_forked_child(void)
{
    atomic_store(&tracked.on, 0);
    pthread_mutex_init(&tracked.lock, NULL);
}

int
tracker_ready(PyTypeObject *type)
{
    tracker_calls = (TrackerCalls){tracker_set, tracker_let_go};
    return add_methods(type, tracker_methods);
}
