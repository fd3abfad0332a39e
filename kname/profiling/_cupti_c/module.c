/*
 * kname._native_cupti, the module: PyInit__native_cupti interns the strings the other files
 * share, tells them when the interpreter is finalized or the process forked, starts the dict
 * watcher of _native_common.c, readies SiteCall (_native_cupti_site_calls.c) and adds the
 * Recorder (_native_cupti_recorder.c). What the extension does is told in _native_cupti.h.
 */
#include "profiling/_cupti_c/recorder.h"

PyObject *str_name, *str_kernel, *str_memcpy, *str_memset, *str_memset_name, *str_empty;
PyObject *graph_event_names[NODE_EVENT_COUNT + 1];

/* kname.profiling.records.NODE_EVENTS, by their numbers here (_native_cupti_graphs.h). */
static const char *const GRAPH_EVENTS[NODE_EVENT_COUNT + 1] = {
    NULL, "created", "cloned", "updated", "destroyed", "graph_destroyed", "exec_destroyed",
};
atomic_int python_gone = 0;
atomic_uint forks = 0;

static void
interpreter_finalized(void)
{
    atomic_store(&python_gone, 1);
}

static void
in_forked_child(void)
{
    atomic_fetch_add(&forks, 1);
    activity_in_forked_child();
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._native_cupti",
    .m_doc = "kname profile's CUPTI launch callback in C (see kname/_native_cupti.h).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__native_cupti(void)
{
#ifdef Py_GIL_DISABLED
    /* The recent tables, `kept` and the learned sites rely on the GIL. */
    PyErr_SetString(PyExc_ImportError,
                    "kname._native_cupti does not support free-threaded Python");
    return NULL;
#else
    static int once = 0;
    if (!once) {
        str_name = PyUnicode_InternFromString("name");
        str_kernel = PyUnicode_InternFromString("kernel");
        str_memcpy = PyUnicode_InternFromString("memcpy");
        str_memset = PyUnicode_InternFromString("memset");
        str_memset_name = PyUnicode_InternFromString("[memset]");
        str_empty = PyUnicode_InternFromString("");
        if (str_name == NULL || str_kernel == NULL || str_memcpy == NULL || str_memset == NULL
            || str_memset_name == NULL || str_empty == NULL)
            return NULL;
        for (int i = 1; i <= NODE_EVENT_COUNT; i++) {
            graph_event_names[i] = PyUnicode_InternFromString(GRAPH_EVENTS[i]);
            if (graph_event_names[i] == NULL)
                return NULL;
        }
        /* Without these (no room left), finalizing() and the collector's stop still hold. */
        (void)Py_AtExit(interpreter_finalized);
        (void)pthread_atfork(NULL, NULL, in_forked_child);
        watch_dicts();
        once = 1;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    PyObject *events = PyTuple_New(NODE_EVENT_COUNT);
    for (int i = 1; events != NULL && i <= NODE_EVENT_COUNT; i++)
        PyTuple_SET_ITEM(events, i - 1, Py_NewRef(graph_event_names[i]));
    if (events == NULL || site_call_ready() < 0 || recorder_ready(m) < 0
        || PyModule_AddIntConstant(m, "MAX_OPEN", MAX_OPEN) < 0
        || PyModule_AddObjectRef(m, "GRAPH_EVENTS", events) < 0) {
        Py_XDECREF(events);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(events);
    return m;
#endif
}
