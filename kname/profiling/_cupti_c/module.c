/*
 * kname._native_cupti, the module: PyInit__native_cupti readies what every file shares
 * (state.c), starts the dict watcher of _common_c/common.c, tells the activity reader when the
 * process forked, adds the Recorder (recorder.c), and has each file that gives the Recorder
 * methods add its own (activity.c, trace.c, trace_json.c, site_calls.c), then TorchMemory
 * (torch_memory.c) and its tracked events' methods (torch_tracker.c), and the Ledger their events
 * go into (ledger.c). What the extension does is told in recorder.h.
 */
#include "profiling/_cupti_c/recorder.h"
#include "profiling/_cupti_c/ledger.h"

INTERNAL int torch_memory_ready(PyObject *module); /* torch_memory.c */
INTERNAL int tracker_ready(PyTypeObject *type);    /* torch_tracker.c */
INTERNAL void tracker_in_forked_child(void);       /* torch_tracker.c */
INTERNAL extern PyTypeObject TorchMemoryType;      /* torch_memory.c */

static void
in_forked_child(void)
{
    atomic_fetch_add(&forks, 1);
    activity_in_forked_child();
    tracker_in_forked_child();
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._native_cupti",
    .m_doc = "kname profile's CUPTI launch callback in C (see kname/profiling/_cupti_c/recorder.h).",
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
    if (state_ready() < 0 || thread_end_ready() < 0)
        return NULL;
    if (!once) {
        /* Without it (no room left), the collector's stop still holds. */
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
    if (events == NULL || recorder_ready(m) < 0 || activity_ready(&RecorderType) < 0
        || trace_ready(&RecorderType) < 0 || trace_json_ready(&RecorderType) < 0
        || site_calls_ready(&RecorderType) < 0 || torch_memory_ready(m) < 0
        || tracker_ready(&TorchMemoryType) < 0 || ledger_ready(m) < 0
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
