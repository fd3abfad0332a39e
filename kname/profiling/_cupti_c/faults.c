/*
 * The first fault of a recorder's C code, kept for take_fault() (recorder.c): a Python
 * exception, or a CUDA or CUPTI status in words. Any thread; said once, by the Python side.
 */
#include "profiling/_cupti_c/callback.h"

#include <stdio.h>

void
note_fault(Recorder *r, const char *where)
{
    PyObject *exc = take_error();
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        r->fault = exc;
        r->fault_where = where;
        exc = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    Py_XDECREF(exc);
}

void
note_c_fault(Recorder *r, const char *where, const char *detail, long status)
{
    pthread_mutex_lock(&r->lock);
    if (r->fault_where == NULL) {
        snprintf(r->fault_detail, sizeof r->fault_detail, "%s (status %ld)", detail, status);
        r->fault_where = where;
    }
    pthread_mutex_unlock(&r->lock);
}
