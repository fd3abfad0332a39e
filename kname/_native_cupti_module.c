/*
 * kname._native_cupti, the module: PyInit__native_cupti interns the strings the other files
 * share, tells them when the interpreter is finalized or the process forked, starts the dict
 * watcher of _native_common.c and adds the Recorder (_native_cupti_recorder.c). What the
 * extension does is told in _native_cupti.h.
 */
#include "_native_cupti.h"

PyObject *str_name, *str_kernel, *str_memcpy, *str_memset, *str_memset_name;
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
        if (str_name == NULL || str_kernel == NULL || str_memcpy == NULL || str_memset == NULL
            || str_memset_name == NULL)
            return NULL;
        /* Without these (no room left), finalizing() and the collector's stop still hold. */
        (void)Py_AtExit(interpreter_finalized);
        (void)pthread_atfork(NULL, NULL, in_forked_child);
        watch_dicts();
        once = 1;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (recorder_ready(m) < 0 || PyModule_AddIntConstant(m, "MAX_OPEN", MAX_OPEN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
#endif
}
