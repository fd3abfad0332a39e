/*
 * The definitions common.h declares, built into each of kname's two C extensions: the
 * globals a cached launch reads (`hot`), errors taken on every supported CPython, and the
 * watchers that count changes to the dicts and types whose look-ups are remembered.
 */
#include "_common_c/common.h"

Hot hot = {1, 1, NULL, 0, NULL, NULL, NULL};

/* ------------------------------------------------------------------ methods added */

int
add_methods(PyTypeObject *type, PyMethodDef *methods)
{
    for (PyMethodDef *method = methods; method->ml_name != NULL; method++) {
        PyObject *descr = PyDescr_NewMethod(type, method);
        if (descr == NULL || PyDict_SetItemString(type->tp_dict, method->ml_name, descr) < 0) {
            Py_XDECREF(descr);
            return -1;
        }
        Py_DECREF(descr);
    }
    PyType_Modified(type);
    return 0;
}

/* ------------------------------------------------------------------ kinds of code */

int
decided_kind(PyObject *kinds, PyCodeObject *code)
{
    PyObject *code_id = PyLong_FromVoidPtr(code);
    if (code_id == NULL)
        return -2;
    PyObject *found = PyDict_GetItemWithError(kinds, code_id); /* borrowed */
    Py_DECREF(code_id);
    if (found == NULL && PyErr_Occurred())
        return -2;
    int kind = -1;
    if (found != NULL && PyLong_CheckExact(found)) {
        long value = PyLong_AsLong(found);
        if (value == -1 && PyErr_Occurred())
            return -2;
        if (value == KIND_USER || PASSED_OVER(value))
            kind = (int)value;
    }
    return kind;
}

/* ------------------------------------------------------------------ errors across versions */

#if PY_VERSION_HEX >= 0x030C0000
PyObject *
take_error(void)
{
    return PyErr_GetRaisedException();
}
#else
PyObject *
take_error(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL)
        PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}
#endif

/* ------------------------------------------------------------------ watched changes */

#if PY_VERSION_HEX >= 0x030C0000
static int dict_watcher = -1, type_watcher = -1;

static int
count_dict_change(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value)
{
    (void)event;
    (void)dict;
    (void)key;
    (void)new_value;
    hot.dict_changes++;
    return 0;
}

static int
count_type_change(PyTypeObject *type)
{
    (void)type;
    hot.type_changes++;
    return 0;
}

int
follow_changes(PyObject *dict)
{
    if (dict_watcher < 0 || PyDict_Watch(dict_watcher, dict) < 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

uint64_t
follow_type(PyTypeObject *type)
{
    if (type_watcher < 0 || valid_version_tag(type) == 0
        || PyType_Watch(type_watcher, (PyObject *)type) < 0) {
        PyErr_Clear();
        return NO_STAMP;
    }
    return hot.type_changes;
}

void
watch_dicts(void)
{
    if (dict_watcher < 0 && (dict_watcher = PyDict_AddWatcher(count_dict_change)) < 0)
        PyErr_Clear();
}

void
watch_types(void)
{
    if (type_watcher < 0 && (type_watcher = PyType_AddWatcher(count_type_change)) < 0)
        PyErr_Clear();
}
#else
int
follow_changes(PyObject *dict)
{
    (void)dict;
    return 1; /* 3.11: every dict has a version tag */
}

uint64_t
follow_type(PyTypeObject *type)
{
    unsigned int tag = valid_version_tag(type);
    return tag == 0 ? NO_STAMP : tag;
}

void
watch_dicts(void)
{
}

void
watch_types(void)
{
}
#endif
