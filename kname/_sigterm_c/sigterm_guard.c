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
 * the Python one still runs) and arms this process's nudge timer, a POSIX timer made at install
 * that sends SIGTERM to the main thread (timer_settime is async-signal-safe). Until kname's
 * Python handler has begun (it calls stand_down() first, which disarms the timer), the timer
 * nudges the main thread every NUDGE_NS: a blocking call that CPython retries after checking for
 * signals (time.sleep, a lock, select) returns with EINTR, and the Python handler runs, census
 * and all. The nudge is recognised in the handler and goes no further. A nudge past `grace`
 * seconds puts back the default action and sends SIGTERM again: the process dies of it, as
 * without kname (without the census: nothing can write it then).
 *
 * No thread: a timer is no thread, so a single-threaded program stays single-threaded (Python
 * 3.12's os.fork() warns in a process with more than one). stand_down() runs on the main thread,
 * where the timer's signals go: a nudge pending as it disarms the timer is delivered as that
 * system call returns (or dropped with the disarming), while this handler is still in place: a
 * nudge never meets the default action that the Python handler puts back next.
 *
 * A forked child inherits the handler but not the timer: after_fork_in_child() makes its own.
 * A program that sets its own SIGTERM handler, and kname's Python handler setting the default
 * back, replace this one (CPython calls sigaction): the guard is then gone.
 */
#include <Python.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

static struct sigaction chained;          /* CPython's handler, called from ours */
static atomic_llong grace_ns;             /* how long the Python handler has to begin */
static timer_t nudger;                    /* SIGTERM to the main thread, every NUDGE_NS */
static pid_t nudger_pid;                  /* the process whose timer `nudger` is (none: 0) */
static atomic_llong deadline_ns;          /* when the SIGTERM being waited on kills (none: 0) */
static atomic_int stood_down;             /* kname's Python handler has begun */

#define NUDGE_NS 100000000LL /* 0.1 s: a Python handler that runs at all has begun by then */

static long long
now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Nudge every NUDGE_NS from now (1), or no more (0). Async-signal-safe. */
static void
set_nudging(int on)
{
    struct itimerspec every = {{0, 0}, {0, 0}};
    if (on) {
        every.it_value.tv_nsec = every.it_interval.tv_nsec = NUDGE_NS;
    }
    if (nudger_pid == getpid()) {
        timer_settime(nudger, 0, &every, NULL);
    }
}

/* This process's nudge timer, aimed at the calling thread: 0, or an errno. */
static int
make_nudger(void)
{
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGTERM;
    event.sigev_value.sival_ptr = &nudger; /* how a nudge is told from another SIGTERM */
    event.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &event, &nudger) != 0) {
        return errno;
    }
    nudger_pid = getpid();
    return 0;
}

static int
is_nudge(const siginfo_t *info)
{
    return info != NULL && info->si_code == SI_TIMER && info->si_value.sival_ptr == &nudger;
}

/* A nudge: its work is done (the system call it interrupted returns EINTR; CPython's flag is
 * already set by the SIGTERM that armed it), unless the grace is over. */
static void
on_nudge(void)
{
    long long deadline = atomic_load(&deadline_ns);
    if (atomic_load(&stood_down) || deadline == 0 || now_ns() < deadline) {
        return;
    }
    set_nudging(0);
    struct sigaction default_action;
    memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGTERM, &default_action, NULL);
    kill(getpid(), SIGTERM); /* taken as this handler returns (or by another thread) */
}

static void
on_sigterm(int signum, siginfo_t *info, void *context)
{
    int saved = errno; /* the interrupted code may be about to read errno */
    if (is_nudge(info)) {
        on_nudge();
        errno = saved;
        return;
    }
    long long none = 0;
    if (!atomic_load(&stood_down)
        && atomic_compare_exchange_strong(&deadline_ns, &none, now_ns() + atomic_load(&grace_ns))) {
        set_nudging(1);
    }
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
    /* signal.signal() just succeeded here: this is the main thread, where nudges go. */
    if (nudger_pid != getpid()) {
        int failed = make_nudger();
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
    /* The parent's SIGTERM being waited on is not this process's; its timer is not here. */
    atomic_store(&stood_down, 0);
    atomic_store(&deadline_ns, 0);
    if (!guard_in_place() || nudger_pid == getpid()) {
        Py_RETURN_NONE;
    }
    if (make_nudger() != 0) {
        sigaction(SIGTERM, &chained, NULL); /* no timer: CPython's handler alone, as before */
    }
    Py_RETURN_NONE;
}

static PyObject *
stand_down(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    atomic_store(&stood_down, 1);
    /* On the main thread, where nudges go: one pending is delivered to this handler, still in
     * place, as timer_settime returns (or dropped with the disarming). */
    set_nudging(0);
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
     "(OSError where its nudge timer cannot be made)."},
    {"after_fork_in_child", after_fork_in_child, METH_NOARGS,
     "after_fork_in_child(): a forked child that inherited the guard gets its own nudge timer."},
    {"stand_down", stand_down, METH_NOARGS,
     "stand_down(): kname's Python handler has begun; the guard leaves this SIGTERM to it."},
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
    return PyModule_Create(&module_def);
}
