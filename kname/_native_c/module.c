/*
 * kname._native, the module: PyInit__native starts the watchers of _common_c/common.c and calls
 * each file's ready function, which adds its types and functions (the launch wrapper, launch.c;
 * its Counter, counters.c; its site finding, callsite.c; NVTX ranges, ranges.c; each library
 * unit's types, through the units registered: units.c). What the extension does is told in
 * launch.h.
 */
#include "_native_c/launch.h"
#include "_native_c/driver_hook.h"

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kname._native",
    .m_doc = "kname's per-launch wrapper in C (see kname/_native_c/launch.h).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__native(void)
{
#ifdef Py_GIL_DISABLED
    /* The thread-local launch caller is safe, but the learned layouts and the reads of `sites`
     * and of the site's fields rely on the GIL. */
    PyErr_SetString(PyExc_ImportError, "kname._native does not support free-threaded Python");
    return NULL;
#else
    watch_dicts();
    watch_types();
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (launch_ready(m) < 0 || counters_ready(m) < 0 || sites_ready(m) < 0 || nvtx_ready(m) < 0
        || units_ready(m) < 0 || driver_hook_ready(m) < 0
        || PyModule_AddIntConstant(m, "USER", KIND_USER) < 0
        || PyModule_AddIntConstant(m, "LIBRARY", KIND_LIBRARY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
#endif
}
