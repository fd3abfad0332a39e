/*
 * The library units' C in kname._native (kname/targets/<lib>/_native_<lib>.c): each registers its
 * ready function as the shared object is loaded (KNAME_UNIT, launch.h), and the module's init
 * readies them all here. The extension's own files name no unit: the unit points down at them.
 */
#include "_native_c/launch.h"

#define MAX_UNITS 16

static unit_ready units[MAX_UNITS];
static int unit_count, units_past_room;

void
register_unit(unit_ready ready)
{
    if (unit_count < MAX_UNITS)
        units[unit_count++] = ready;
    else
        units_past_room = 1;
}

int
units_ready(PyObject *module)
{
    if (units_past_room) {
        PyErr_Format(PyExc_ImportError, "kname._native: more than %d library units", MAX_UNITS);
        return -1;
    }
    for (int i = 0; i < unit_count; i++) {
        if (units[i](module) < 0)
            return -1;
    }
    return 0;
}
