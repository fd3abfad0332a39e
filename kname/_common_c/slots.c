/*
 * Slots read and written in place, for both extensions (see slots.h): one way of finding where a
 * class keeps a member, used to read a launch's fields (kname._native) and to make records
 * (kname._native_cupti).
 */
#include "_common_c/slots.h"

Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    Py_ssize_t offset = -1;
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == MEMBER_OBJECT_EX && !(member->flags & MEMBER_READONLY))
            offset = member->offset;
    }
    Py_DECREF(descr);
    return offset;
}

/* ------------------------------------------------------------------ fields read in place */

static COLD void
learn_layout(Layout *layout, PyTypeObject *type, PyObject *const *names, int count)
{
    Py_INCREF(type);
    Py_XSETREF(layout->type, type);
    int fast = type->tp_getattro == PyObject_GenericGetAttr;
    for (int i = 0; i < count; i++) {
        Py_ssize_t offset = slot_offset(type, names[i]);
        layout->offset[i] = offset < 0 || offset > INT_MAX ? -1 : (int)offset;
        if (layout->offset[i] < 0)
            fast = 0;
    }
    layout->stamp = fast ? follow_type(type) : NO_STAMP; /* after the look-ups: see follow_type */
}

int
fit_layout(Layout *layout, PyObject *obj, PyObject *const *names, int count)
{
    if (!layout_fits(layout, obj))
        learn_layout(layout, Py_TYPE(obj), names, count);
    return layout_fits(layout, obj);
}

PyObject *
read_field(Layout *layout, PyObject *obj, PyObject *const *names, int i)
{
    if (layout_fits(layout, obj)) {
        PyObject *value = slot_value(layout, obj, i);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, names[i]);
}

/* ------------------------------------------------------------------ records made in place */

static void
learn_record_layout(RecordLayout *layout, PyTypeObject *type)
{
    Py_INCREF(type);
    Py_XSETREF(layout->type, type);
    layout->fast = type->tp_new == PyBaseObject_Type.tp_new
                   && type->tp_setattro == PyObject_GenericSetAttr
                   && !PyObject_HasAttrString((PyObject *)type, "__post_init__");
    for (int i = 0; i < layout->count && layout->fast; i++) {
        PyObject *name = PyUnicode_FromString(layout->fields[i]);
        layout->offset[i] = name == NULL ? -1 : slot_offset(type, name);
        layout->fast = layout->offset[i] >= 0;
        if (name == NULL)
            PyErr_Clear(); /* no room for the name: the class is called instead */
        Py_XDECREF(name);
    }
    layout->version = valid_version_tag(type); /* after the look-ups, which give it one */
    layout->fast = layout->fast && layout->version != 0;
}

void
init_record_layout(RecordLayout *layout, const char *const *fields)
{
    layout->fields = fields;
    for (layout->count = 0; fields[layout->count] != NULL; layout->count++)
        ;
}

PyObject *
new_record(RecordLayout *layout, PyObject *make, PyObject **args)
{
    int count = layout->count;
    PyObject *record = NULL;
    for (int i = 0; i < count; i++) {
        if (args[i] == NULL)
            goto done;
    }
    PyTypeObject *type = (PyTypeObject *)make;
    if (PyType_Check(make) && (layout->type != type || layout->version != valid_version_tag(type)))
        learn_record_layout(layout, type);
    if (layout->type == type && layout->fast) {
        record = type->tp_alloc(type, 0);
        if (record != NULL) {
            for (int i = 0; i < count; i++)
                *(PyObject **)((char *)record + layout->offset[i]) = args[i];
            return record;
        }
    }
    else {
        record = PyObject_Vectorcall(make, args, (size_t)count, NULL);
    }
done:
    for (int i = 0; i < count; i++)
        Py_XDECREF(args[i]);
    return record;
}
