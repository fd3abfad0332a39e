/*
 * kname._sigterm_guard: a SIGTERM that Python never gets to handle still ends the process.
 *
 * kname._sigterm handles SIGTERM in Python (write the census, then die of the signal). CPython's
 * C handler only sets a flag; the Python handler runs when the main thread next runs bytecode.
 * A signal that lands after CPython's last check and before a blocking call starts (SemLock's
 * sem_wait in a multiprocessing worker: Pool.terminate() then waits for that worker forever), or
 * one taken while C code loops without returning to Python, is then never handled, where
 * SIGTERM's default action would have killed the process at once.
 *
 * install(grace) puts a sigaction handler in front of CPython's: it calls CPython's handler (so
 * the Python one still runs) and wakes a watchdog thread (sem_post is async-signal-safe). Until
 * kname's Python handler has begun (it calls stand_down() first), the watchdog nudges the main
 * thread every NUDGE_NS with a SIGTERM of its own (pthread_kill): a blocking call that CPython
 * retries after checking for signals (time.sleep, a lock, select) returns with EINTR, and the
 * Python handler runs, census and all. The nudge is recognised in the handler and goes no
 * further. After `grace` seconds without the Python handler, the watchdog puts back the default
 * action and sends SIGTERM again: the process dies of it, as without kname (without the census:
 * nothing can write it then).
 *
 * stand_down() and the watchdog's look-and-nudge share a mutex, so no nudge is sent after it;
 * one sent before it is still pending on the main thread, and stand_down() takes it (any return
 * from the kernel delivers it) while this handler is still in place: a nudge never meets the
 * default action that the Python handler puts back next.
 *
 * The watchdog blocks every signal, so it never takes one meant for the main thread. A forked
 * child inherits the handler but not the thread: after_fork_in_child() starts its own. A program
 * that sets its own SIGTERM handler, and kname's Python handler setting the default back, replace
 * this one (CPython calls sigaction): the guard is then gone. The watchdog never touches Python.
 */
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static struct sigaction chained;          /* CPython's handler, called from ours */
static sem_t wake;                        /* posted once per SIGTERM taken */
static atomic_llong grace_ns;             /* how long the Python handler has to begin */
static pid_t watchdog_pid;                /* the process whose watchdog runs (none: 0) */
static pthread_t main_thread;             /* where CPython runs Python's signal handlers */

#define NUDGE_NS 100000000LL /* 0.1 s: a Python handler that runs at all has begun by then */

/* Guards `stood_down` and the watchdog's look-then-nudge (see stand_down). */
static pthread_mutex_t standing = PTHREAD_MUTEX_INITIALIZER;
static int stood_down;                    /* kname's Python handler has begun */
static atomic_int nudges_sent, nudges_taken;

/* The watchdog's own SIGTERM to the main thread: a thread-directed signal of this process, while
 * one it sent is still untaken. (A program's own signal.pthread_kill(main, SIGTERM) taken in that
 * instant would be taken for one: the SIGTERM being handled is already there for it.) */
static int
is_nudge(const siginfo_t *info)
{
    return info != NULL && info->si_code == SI_TKILL && info->si_pid == getpid()
           && atomic_load(&nudges_taken) < atomic_load(&nudges_sent);
}

static void
on_sigterm(int signum, siginfo_t *info, void *context)
{
    if (is_nudge(info)) {
        /* Its work is done: the system call it interrupted returns EINTR. CPython's flag is
         * already set by the SIGTERM that woke the watchdog. */
        atomic_fetch_add(&nudges_taken, 1);
        return;
    }
    int saved = errno; /* the interrupted code may be about to read errno */
    sem_post(&wake);
    errno = saved;
    if (chained.sa_flags & SA_SIGINFO) {
        chained.sa_sigaction(signum, info, context);
    }
    else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN) {
        chained.sa_handler(signum);
    }
}

static int
is_guard(const struct sigaction *action)
{
    return (action->sa_flags & SA_SIGINFO) && action->sa_sigaction == on_sigterm;
}

static int
guard_in_place(void)
{
    struct sigaction current;
    return sigaction(SIGTERM, NULL, &current) == 0 && is_guard(&current);
}

static long long
now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void
sleep_until(long long when_ns)
{
    struct timespec deadline = {(time_t)(when_ns / 1000000000LL), (long)(when_ns % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL) == EINTR) {
    }
}

/* One SIGTERM: nudge the main thread until kname's Python handler begins, or end the process
 * once the grace is over. Called with `standing` held; 1 when the SIGTERM is dealt with. */
static int
look_and_nudge(long long deadline_ns)
{
    /* Replaced: kname's Python handler has begun (it ends the process itself), or the program
     * set its own handler. */
    if (stood_down || !guard_in_place()) {
        return 1;
    }
    if (now_ns() < deadline_ns) {
        atomic_fetch_add(&nudges_sent, 1);
        if (pthread_kill(main_thread, SIGTERM) != 0) {
            atomic_fetch_sub(&nudges_sent, 1);
        }
        return 0;
    }
    struct sigaction default_action = {0};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGTERM, &default_action, NULL);
    kill(getpid(), SIGTERM); /* to the process: this thread blocks it, another takes it */
    return 1;
}

static void *
watch(void *unused)
{
    (void)unused;
    for (;;) {
        if (sem_wait(&wake) != 0) {
            if (errno == EINTR) {
                continue;
            }
            return NULL; /* a broken semaphore: no guard, as without it */
        }
        long long deadline = now_ns() + atomic_load(&grace_ns);
        int done = 0;
        while (!done) {
            long long next = now_ns() + NUDGE_NS;
            sleep_until(next < deadline ? next : deadline);
            pthread_mutex_lock(&standing);
            done = look_and_nudge(deadline);
            pthread_mutex_unlock(&standing);
        }
    }
}

static int
start_watchdog(void)
{
    pthread_attr_t attributes;
    pthread_t thread;
    sigset_t every, before;
    int failed = pthread_attr_init(&attributes);
    if (failed) {
        return failed;
    }
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    /* Created with every signal blocked, which it keeps: a signal taken on this thread would
     * not interrupt the main thread's system call, and Python would see it late. */
    sigfillset(&every);
    pthread_sigmask(SIG_BLOCK, &every, &before);
    failed = pthread_create(&thread, &attributes, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    pthread_attr_destroy(&attributes);
    if (!failed) {
        watchdog_pid = getpid();
    }
    return failed;
}

static PyObject *
install(PyObject *module, PyObject *grace)
{
    (void)module;
    double seconds = PyFloat_AsDouble(grace);
    if (seconds == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(seconds >= 0.0 && seconds <= 3600.0)) {
        PyErr_Format(PyExc_ValueError, "install(grace=%R): accepted is 0 to 3600 seconds", grace);
        return NULL;
    }
    atomic_store(&grace_ns, (long long)(seconds * 1e9));
    struct sigaction current;
    if (sigaction(SIGTERM, NULL, &current) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (is_guard(&current)) {
        Py_RETURN_TRUE;
    }
    if (!(current.sa_flags & SA_SIGINFO) &&
        (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)) {
        Py_RETURN_FALSE; /* no Python handler to guard */
    }
    main_thread = pthread_self(); /* signal.signal() just succeeded here: the main thread */
    if (watchdog_pid != getpid()) {
        int failed = start_watchdog();
        if (failed) {
            errno = failed;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    /* Written while our handler is not installed: it never reads a half-written copy. */
    chained = current;
    struct sigaction guarded = current;
    guarded.sa_flags |= SA_SIGINFO;
    guarded.sa_sigaction = on_sigterm;
    if (sigaction(SIGTERM, &guarded, NULL) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

static PyObject *
after_fork_in_child(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    /* The parent's wake-ups and nudges, copied with its memory, are not this process's signals;
     * its mutex may have been copied held by a watchdog that is not here. */
    while (sem_trywait(&wake) == 0) {
    }
    pthread_mutex_init(&standing, NULL);
    stood_down = 0;
    atomic_store(&nudges_sent, 0);
    atomic_store(&nudges_taken, 0);
    main_thread = pthread_self(); /* the forking thread, now this process's main thread */
    if (!guard_in_place() || watchdog_pid == getpid()) {
        Py_RETURN_NONE;
    }
    if (start_watchdog() != 0) {
        sigaction(SIGTERM, &chained, NULL); /* no watchdog: CPython's handler alone, as before */
    }
    Py_RETURN_NONE;
}

static PyObject *
stand_down(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pthread_mutex_lock(&standing);
    stood_down = 1;
    pthread_mutex_unlock(&standing);
    /* A nudge sent before is pending on this thread, the main one: the next return from the
     * kernel delivers it. Bounded, in case something blocks SIGTERM here. */
    for (int i = 0; i < 10000 && atomic_load(&nudges_taken) < atomic_load(&nudges_sent); i++) {
        sched_yield();
    }
    Py_RETURN_NONE;
}

static PyObject *
installed(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(guard_in_place());
}

/* call_at_exit(fn): fn(), for atexit, with no Ctrl-C raised as its first line runs.
 *
 * CPython raises a pending signal's exception at the first line of Python that runs next, which
 * would be fn's, before fn can hold its signals: a traceback from kname's exit code, fn's work
 * undone. So SIGINT is ignored (for the whole process: it may land on any thread) until fn has
 * begun, and a Ctrl-C that came before is handled here, in C. The process is ending: such a
 * Ctrl-C is dropped, as kname._sigterm drops one that comes while its writers run; any other
 * handler's exception stands. fn (kname._sigterm's shielded work) puts a handler of its own on
 * SIGINT as it begins; what SIGINT had before is put back when fn returns. */
static PyObject *
call_at_exit(PyObject *module, PyObject *fn)
{
    (void)module;
    struct sigaction ignore, before;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    int ignoring = sigaction(SIGINT, &ignore, &before) == 0;
    PyObject *result = NULL;
    if (PyErr_CheckSignals() < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
            goto done;
        }
        PyErr_Clear();
    }
    result = PyObject_CallNoArgs(fn);
done:
    if (ignoring) {
        sigaction(SIGINT, &before, NULL);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"call_at_exit", call_at_exit, METH_O,
     "call_at_exit(fn): fn(), after the signals that came before it, a Ctrl-C's dropped."},
    {"install", install, METH_O,
     "install(grace): guard the SIGTERM handler CPython has in place; False where there is none "
     "(OSError where the watchdog thread cannot start)."},
    {"after_fork_in_child", after_fork_in_child, METH_NOARGS,
     "after_fork_in_child(): a forked child that inherited the guard gets its own watchdog."},
    {"stand_down", stand_down, METH_NOARGS,
     "stand_down(): kname's Python handler has begun; the watchdog leaves this SIGTERM to it."},
    {"installed", installed, METH_NOARGS,
     "installed(): whether SIGTERM's handler is this guard now."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._sigterm_guard",
    .m_doc = "A SIGTERM Python never gets to handle still ends the process "
             "(see kname/_sigterm_c/sigterm_guard.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__sigterm_guard(void)
{
    static int initialised = 0;
    if (!initialised) {
        if (sem_init(&wake, 0, 0) != 0) {
            return PyErr_SetFromErrno(PyExc_ImportError);
        }
        initialised = 1;
    }
    return PyModule_Create(&module_def);
}
