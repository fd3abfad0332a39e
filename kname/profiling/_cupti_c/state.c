/*
 * What every file of kname._native_cupti shares: the strings it interns once, whether the
 * interpreter is finalized, how many times the process forked, and libcupti's functions.
 */
#include "profiling/_cupti_c/recorder.h"

#include <dlfcn.h>

PyObject *str_name, *str_kernel, *str_memcpy, *str_memset, *str_memset_name, *str_empty;
PyObject *graph_event_names[NODE_EVENT_COUNT + 1];

/* kname.profiling.records.NODE_EVENTS, by their numbers here (graphs.h). */
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

void *
symbol(Recorder *r, const char *name)
{
    void *found = dlsym(r->library, name);
    if (found == NULL)
        PyErr_Format(PyExc_OSError, "libcupti has no %s", name);
    return found;
}

int
state_ready(void)
{
    static int once = 0;
    if (once)
        return 0;
    str_name = PyUnicode_InternFromString("name");
    str_kernel = PyUnicode_InternFromString("kernel");
    str_memcpy = PyUnicode_InternFromString("memcpy");
    str_memset = PyUnicode_InternFromString("memset");
    str_memset_name = PyUnicode_InternFromString("[memset]");
    str_empty = PyUnicode_InternFromString("");
    if (str_name == NULL || str_kernel == NULL || str_memcpy == NULL || str_memset == NULL
        || str_memset_name == NULL || str_empty == NULL)
        return -1;
    for (int i = 1; i <= NODE_EVENT_COUNT; i++) {
        graph_event_names[i] = PyUnicode_InternFromString(GRAPH_EVENTS[i]);
        if (graph_event_names[i] == NULL)
            return -1;
    }
    /* Without it (no room left), finalizing() and the collector's stop still hold. */
    (void)Py_AtExit(interpreter_finalized);
    once = 1;
    return 0;
}
