/*
 * Slots read and written in place, for both extensions: where a class keeps a plain __slots__
 * member (slot_offset), learned once per class. kname._native reads a site's and a switch's
 * fields through a Layout (fit_layout, read_field); kname._native_cupti makes its records by
 * setting their slots through a RecordLayout (new_record).
 */
#ifndef KNAME_SLOTS_H
#define KNAME_SLOTS_H

#include "_common_c/common.h" /* first: it includes Python.h */

#include <stdint.h>

/* The offset of `type`'s member `name` where it is a plain writable object slot (what getattr
 * and setattr read and write in place on a class with generic attribute access), else -1. */
INTERNAL Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name);

/* ------------------------------------------------------------------ fields read in place */

/* Where a type keeps some __slots__ members, learned once per type (and again after the type is
 * changed: its stamp moves, see common.h). Reading the slot is what getattr does for a plain
 * slot of a type with generic attribute access: data descriptors come first in that look-up. */
#define MAX_FIELDS 4

typedef struct {
    PyTypeObject *type; /* strong: its address cannot be reused while learned */
    uint64_t stamp;     /* NO_STAMP: the slots are read through getattr */
    int offset[MAX_FIELDS]; /* 32 bytes in all: a learned layout and the fields it reads share
                             * cache lines with the wrapper's other hot fields */
} Layout;

static inline int
layout_fits(const Layout *layout, PyObject *obj)
{
    return Py_TYPE(obj) == layout->type && layout->stamp == type_stamp(layout->type);
}

/* `layout` made `obj`'s class's, learned again where it is another's: whether obj's fields can
 * now be read in place (else they are read through getattr). */
INTERNAL int fit_layout(Layout *layout, PyObject *obj, PyObject *const *names, int count);

/* obj.<names[i]> as a new reference, NULL with AttributeError when the slot is empty. */
INTERNAL PyObject *read_field(Layout *layout, PyObject *obj, PyObject *const *names, int i);

/* Slot i of `obj`, which layout_fits: borrowed, NULL when the slot is empty. */
static inline PyObject *
slot_value(const Layout *layout, PyObject *obj, int i)
{
    return *(PyObject **)((char *)obj + layout->offset[i]);
}

/* ------------------------------------------------------------------ records made in place */

/* kname.profiling.records' classes, each made from at most RECORD_FIELDS arguments. */
#define RECORD_FIELDS 9

/* Where a plain slots class keeps those fields, learned once per class (and again after the
 * class is changed: its version tag moves). Such a class (a slots dataclass without
 * __post_init__ or __setattr__) is made by setting its slots: what its __init__ does, without
 * running Python code for each record. Anything else is called. */
typedef struct {
    const char *const *fields; /* NULL-terminated, at most RECORD_FIELDS */
    int count;
    PyTypeObject *type; /* strong */
    unsigned int version;
    int fast;
    Py_ssize_t offset[RECORD_FIELDS];
} RecordLayout;

/* `layout` for a class of these fields (NULL-terminated), nothing learned yet. */
INTERNAL void init_record_layout(RecordLayout *layout, const char *const *fields);

/* make(*args), args being layout->count references it steals; NULL (an error set) when
 * one is NULL (it failed to be made) or the record cannot be made. */
INTERNAL PyObject *new_record(RecordLayout *layout, PyObject *make, PyObject **args);

#endif /* KNAME_SLOTS_H */
