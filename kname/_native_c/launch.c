/*
 * kname._native's LaunchWrapper (see launch.h for what it does): the type, the launch
 * that takes every step (launch_in_full; the cached launch is inline in the header, so that
 * CuPy's C slot runs it too). Its Counter is counters.c's, the fields it reads in place are read
 * through _common_c/slots.h, and its site is found by callsite.c.
 */
#include "_native_c/launch.h"

/* As kname.launch's wrapper says them to callsite.pass_through. */
static const char FINDING[] = "finding a launch's name";
static const char OPENING[] = "opening a launch's NVTX range";
static const char CLOSING[] = "closing a launch's NVTX range";

_Thread_local int launchers_running INITIAL_EXEC = 0;

static PyObject *str_finding, *str_opening, *str_closing;

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

/* ------------------------------------------------------------------ LaunchWrapper */

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

/* The error set now, with `exc` (a reference it steals) as its context, as an exception raised
 * in an except clause has the one handled there. */
static COLD void
raise_in_context(PyObject *exc)
{
    PyObject *raised = take_error();
    if (raised != exc)
        PyException_SetContext(raised, exc); /* steals exc */
    else
        Py_DECREF(exc);
    restore_error(raised);
}

/* After an error (set) while `where`: hand it to fault(frame, kernel, site, exc, where, again)
 * (callsite.pass_through), which says whether it was kname's own fault; `frame` is the caller's,
 * the running one. `again`: what the failed step raised when taken once more (Py_None: nothing),
 * NULL where it was not taken again. 0: kname's, said once and that line launches as if kname
 * were off; the launch is to go on. -1: the error is set and propagates, before the launch, as
 * from the Python wrapper: a BaseException that is not an Exception (KeyboardInterrupt), one
 * raised into kname from outside (a signal handler's, another thread's), or what the fault
 * handler raised (raised into it from outside in turn: at the recursion limit the launch runs). */
static COLD int
handle_fault(LaunchWrapper *w, PyObject *where, PyObject *kernel, PyObject *site, PyObject *again)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *exc = take_error();
    PyFrameObject *frame = PyEval_GetFrame(); /* made now, if it was not yet */
    PyObject *fault_args[6] = {frame ? (PyObject *)frame : Py_None, kernel ? kernel : Py_None,
                               site ? site : Py_None, exc, where, again ? again : exc};
    PyObject *r = PyObject_Vectorcall(w->fault, fault_args, 6, NULL);
    int own = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (own > 0 || (own < 0 && PyErr_ExceptionMatches(PyExc_RecursionError))) {
        PyErr_Clear();
        Py_DECREF(exc);
        return 0;
    }
    if (own == 0) {
        restore_error(exc);
        return -1;
    }
    raise_in_context(exc);
    return -1;
}

/* Finding the site once more, uncounted, after it failed (the error taken): Py_None where it did
 * not fail again, else the Exception it raised; NULL with the error set where that is a
 * BaseException that is not an Exception. As the Python wrapper's second try. */
static COLD PyObject *
find_again(LaunchWrapper *w, const Args *a, Frame *caller, Frame *in_progress)
{
    PyObject *kernel = kernel_of(w, a);
    int failed = kernel == NULL;
    if (!failed && kernel != Py_None && caller != NULL && caller != in_progress) {
        PyObject *site = find_site(w, caller, kernel);
        failed = site == NULL && PyErr_Occurred();
        Py_XDECREF(site);
    }
    Py_XDECREF(kernel);
    if (!failed)
        return Py_NewRef(Py_None);
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    return take_error();
}

/* handle_fault for a failure to find the site or count the launch (set), finding it taken once
 * more first: a fault of kname's own fails again, alike; one raised into it from outside does
 * not. Not at the recursion limit (no room), nor once the site was found: the count is not
 * undone (and only a counter in Python, never kname's, can fail). */
static COLD int
finding_failed(LaunchWrapper *w, const Args *a, Frame *caller, Frame *in_progress,
               PyObject *kernel, PyObject *site)
{
    if (site != NULL || !PyErr_ExceptionMatches(PyExc_Exception)
        || PyErr_ExceptionMatches(PyExc_RecursionError))
        return handle_fault(w, str_finding, kernel, site, NULL);
    PyObject *exc = take_error();
    PyObject *again = find_again(w, a, caller, in_progress);
    if (again == NULL) { /* a KeyboardInterrupt, say: it propagates, in an except clause */
        raise_in_context(exc);
        return -1;
    }
    restore_error(exc);
    int r = handle_fault(w, str_finding, kernel, site, again);
    Py_DECREF(again);
    return r;
}

#define SMALL_STACK 8

COLD PyObject *
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

/* pop() as the wrapper is left, however it is left (the Python wrapper's `finally:`). The way out
 * (`result`, or the error set) comes back unchanged, unless pop raised a BaseException that is
 * not an Exception: that replaces it, with the error it replaced as its context, as a `finally:`
 * that raises does. */
static PyObject *
pop_after(LaunchWrapper *w, PyObject *pop, PyObject *result, PyObject *kernel, PyObject *site)
{
    PyObject *pending = result == NULL ? take_error() : NULL;
    PyObject *r = call_range(pop);
    if (r == NULL && handle_fault(w, str_closing, kernel, site, NULL) < 0) {
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
NOINLINE PyObject *
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
    if (unnamed_in_launcher(w)) /* the launcher's range names it */
        goto unnamed;

    /* Finding the site and counting the launch: a fault here runs the original, unnamed. */
    kernel = kernel_of(w, a);
    if (kernel == NULL)
        goto finding_fault;
    /* Not a launch; no Python caller; or called straight from the caller of a launch in progress
     * (from C inside that launch, where the Python wrapper's caller would be its own frame). */
    if (kernel == Py_None || caller == NULL || caller == *in_progress)
        goto unnamed;
    if (cached_kernel(w, a) == NULL) {
        /* A kernel not read in place (an argument's attribute: numba's launch configuration's
         * dispatcher, Triton's bound run's __self__), now read: the cached launch, where its
         * entry remembers this one (issue 43). */
        const Recent *entry = cached_entry(w, caller, *in_progress, kernel);
        if (entry != NULL) {
            result = run_cached(w, a, caller, in_progress, entry);
            goto done;
        }
    }
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
        if (r == NULL && handle_fault(w, str_opening, kernel, site, NULL) == 0)
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
    if (finding_failed(w, a, caller, *in_progress, kernel, site) < 0)
        goto done;
unnamed:
    result = run_launch(w->original, caller, a, in_progress);
done:
    Py_XDECREF(kernel);
    Py_XDECREF(site);
    return result;
}

/* The launch of a KNAME_TARGETS launcher: named unless inside another launcher (as the others,
 * but judged by the launchers outside it), and every launch inside it marked as the launcher's.
 * Restored, not decremented: nothing can be raised into C between the two. */
NOINLINE PyObject *
launch_as_launcher(LaunchWrapper *w, const Args *a)
{
    int outer = launchers_running;
    launchers_running = outer + 1;
    PyObject *result;
    if ((w->launchers & UNNAMED_IN_LAUNCHERS) && outer > 0 && w->original != NULL)
        result = run_launch(w->original, frame_current(), a, &launch_caller);
    else
        result = launch_named(w, a);
    launchers_running = outer;
    return result;
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
                            "launchers", "miss", NULL};
    PyObject *original, *kernel, *switch_, *sites, *resolve, *fault, *kinds, *attribute = NULL;
    PyObject *miss = Py_None;
    Py_ssize_t index = 0;
    int mode, launchers = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!OOO!|iO:LaunchWrapper", names, &original,
                                     &kernel, &switch_, &PyDict_Type, &sites, &resolve, &fault,
                                     &PyDict_Type, &kinds, &launchers, &miss))
        return NULL;
    if (launchers & ~(UNNAMED_IN_LAUNCHERS | LAUNCHER)) {
        PyErr_SetString(PyExc_ValueError, "LaunchWrapper: launchers must be 0 to 3");
        return NULL;
    }
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
    w->launchers = (char)launchers;
    w->resolve = Py_NewRef(resolve);
    w->fault = Py_NewRef(fault);
    w->kinds = Py_NewRef(kinds);
    w->miss = miss == Py_None ? NULL : Py_NewRef(miss);
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
    Py_VISIT(w->miss);
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
    Py_CLEAR(w->miss);
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

PyObject *
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

PyGetSetDef dict_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject LaunchWrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native.LaunchWrapper",
    .tp_doc = "LaunchWrapper(original, kernel, switch, sites, resolve, fault, kinds, "
              "launchers=0, miss=None): kname's per-launch wrapper (see kname/_native_c/launch.h).",
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

/* ------------------------------------------------------------------ the module's part */

static PyObject *
inside_launcher(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(launchers_running > 0);
}

static PyMethodDef launch_methods[] = {
    {"inside_launcher", inside_launcher, METH_NOARGS,
     "Whether a KNAME_TARGETS launcher's LaunchWrapper is running on this thread."},
    {NULL, NULL, 0, NULL},
};

static int
intern_all(void)
{
    struct {
        PyObject **target;
        const char *text;
    } strings[] = {
        {&str_finding, FINDING}, {&str_opening, OPENING}, {&str_closing, CLOSING},
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (*strings[i].target == NULL) {
            *strings[i].target = PyUnicode_InternFromString(strings[i].text);
            if (*strings[i].target == NULL)
                return -1;
        }
    }
    return 0;
}

int
launch_ready(PyObject *module)
{
    if (intern_all() < 0 || PyType_Ready(&LaunchWrapperType) < 0
        || PyModule_AddFunctions(module, launch_methods) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "LaunchWrapper", (PyObject *)&LaunchWrapperType);
}
