/*
 * kname._native_cupti's trace (see trace.h): the records kept for `--trace` and the Recorder's
 * methods for them; their JSON is trace_json.c's.
 */
#include "profiling/_cupti_c/recorder.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the log */

/* Room in *items for `needed` items of `size`; 0: no memory. */
static int
reserve_items(void **items, size_t *room, size_t needed, size_t size)
{
    if (needed <= *room)
        return 1;
    size_t more = *room ? *room : 1024;
    while (more < needed)
        more *= 2;
    void *grown = realloc(*items, more * size);
    if (grown == NULL)
        return 0;
    *items = grown;
    *room = more;
    return 1;
}

/* How many of `count` more records the cap leaves room for. */
static size_t
room_left(const TraceLog *t, Py_ssize_t count)
{
    size_t kept = t->launch_count + t->node_count + t->work_count;
    size_t cap = (size_t)t->max_records;
    size_t room = kept < cap ? cap - kept : 0;
    return (size_t)count < room ? (size_t)count : room;
}

#define KEEP(t, items, item_count, item_room, records, count)                                  \
    do {                                                                                       \
        if (!(t)->on || (count) <= 0)                                                          \
            break;                                                                             \
        size_t keep = room_left((t), (count));                                                 \
        if (keep && !reserve_items((void **)&(t)->items, &(t)->item_room,                      \
                                   (t)->item_count + keep, sizeof *(t)->items))                \
            keep = 0;                                                                          \
        memcpy((t)->items + (t)->item_count, (records), keep * sizeof *(t)->items);            \
        (t)->item_count += keep;                                                               \
        (t)->dropped += (unsigned long long)((size_t)(count) - keep);                          \
    } while (0)

void
trace_launches(TraceLog *t, const Launch *launches, Py_ssize_t count)
{
    KEEP(t, launches, launch_count, launch_room, launches, count);
}

void
trace_nodes(TraceLog *t, const NodeEvent *events, Py_ssize_t count)
{
    KEEP(t, nodes, node_count, node_room, events, count);
}

void
trace_work(TraceLog *t, const GpuRecord *records, Py_ssize_t count)
{
    KEEP(t, work, work_count, work_room, records, count);
}

void
trace_free(TraceLog *t)
{
    free(t->launches);
    free(t->nodes);
    free(t->work);
    memset(t, 0, sizeof *t);
}

/* A copy of the log, taken under the activity lock (CUPTI's thread may be adding to it). */
int
trace_snapshot(Recorder *r, TraceLog *copy)
{
    memset(copy, 0, sizeof *copy);
    int made = 1;
    pthread_mutex_lock(&r->activity_lock);
    const TraceLog *t = &r->trace;
    copy->launch_count = t->launch_count;
    copy->node_count = t->node_count;
    copy->work_count = t->work_count;
    copy->dropped = t->dropped;
    copy->max_records = t->max_records;
    copy->launches = malloc((t->launch_count + 1) * sizeof *t->launches);
    copy->nodes = malloc((t->node_count + 1) * sizeof *t->nodes);
    copy->work = malloc((t->work_count + 1) * sizeof *t->work);
    if (copy->launches == NULL || copy->nodes == NULL || copy->work == NULL)
        made = 0;
    else {
        memcpy(copy->launches, t->launches, t->launch_count * sizeof *t->launches);
        memcpy(copy->nodes, t->nodes, t->node_count * sizeof *t->nodes);
        memcpy(copy->work, t->work, t->work_count * sizeof *t->work);
    }
    pthread_mutex_unlock(&r->activity_lock);
    if (!made)
        trace_free(copy);
    return made;
}

/* ------------------------------------------------------------------ Python methods */

/* keep_trace(max_records): from now on the records joined in C are kept for the trace too (at
 * most max_records of them), and launch calls are timed. Before take_activity_buffers(). */
static PyObject *
recorder_keep_trace(Recorder *r, PyObject *args)
{
    Py_ssize_t max_records;
    if (!PyArg_ParseTuple(args, "n:keep_trace", &max_records))
        return NULL;
    if (max_records < 0) {
        PyErr_SetString(PyExc_ValueError, "keep_trace: max_records must be at least 0");
        return NULL;
    }
    pthread_mutex_lock(&r->activity_lock);
    r->trace.max_records = max_records;
    r->trace.on = 1;
    pthread_mutex_unlock(&r->activity_lock);
    atomic_store(&r->timed, 1);
    Py_RETURN_NONE;
}

/* trace_counts() -> {'launches', 'graph_nodes', 'records', 'dropped', 'max_records'} */
static PyObject *
recorder_trace_counts(Recorder *r, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&r->activity_lock);
    const TraceLog *t = &r->trace;
    PyObject *counts = Py_BuildValue(
        "{snsnsnsKsn}", "launches", (Py_ssize_t)t->launch_count, "graph_nodes",
        (Py_ssize_t)t->node_count, "records", (Py_ssize_t)t->work_count, "dropped", t->dropped,
        "max_records", t->max_records);
    pthread_mutex_unlock(&r->activity_lock);
    return counts;
}

/* trace_streams(make_launch, make_activity, make_external, make_node, memcpy_name) ->
 * (launches, activities, externals, graph_nodes): what the log keeps, as Python records. */
static PyObject *
recorder_trace_streams(Recorder *r, PyObject *args)
{
    PyObject *make_launch, *make_activity, *make_external, *make_node, *memcpy_name;
    if (!PyArg_ParseTuple(args, "OOOOO:trace_streams", &make_launch, &make_activity,
                          &make_external, &make_node, &memcpy_name))
        return NULL;
    TraceLog log;
    if (!trace_snapshot(r, &log))
        return PyErr_NoMemory();
    Py_ssize_t externals = 0;
    for (size_t i = 0; i < log.work_count; i++)
        externals += log.work[i].kind == GPU_EXTERNAL;
    PyObject *lists[4] = {
        PyList_New((Py_ssize_t)log.launch_count),
        PyList_New((Py_ssize_t)log.work_count - externals),
        PyList_New(externals),
        PyList_New((Py_ssize_t)log.node_count),
    };
    int ok = lists[0] && lists[1] && lists[2] && lists[3];
    for (size_t i = 0; ok && i < log.launch_count; i++) {
        PyObject *record = launch_object(r, make_launch, &log.launches[i]);
        ok = record != NULL;
        if (ok)
            PyList_SET_ITEM(lists[0], (Py_ssize_t)i, record);
    }
    Py_ssize_t filled[2] = {0, 0};
    for (size_t i = 0; ok && i < log.work_count; i++) {
        const GpuRecord *g = &log.work[i];
        PyObject *record = gpu_object(r, g, make_activity, make_external, memcpy_name);
        ok = record != NULL;
        int which = g->kind == GPU_EXTERNAL;
        if (ok)
            PyList_SET_ITEM(lists[1 + which], filled[which]++, record);
    }
    for (size_t i = 0; ok && i < log.node_count; i++) {
        PyObject *record = node_object(r, make_node, &log.nodes[i]);
        ok = record != NULL;
        if (ok)
            PyList_SET_ITEM(lists[3], (Py_ssize_t)i, record);
    }
    trace_free(&log);
    if (!ok) {
        for (int i = 0; i < 4; i++)
            Py_XDECREF(lists[i]);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", lists[0], lists[1], lists[2], lists[3]);
}

/* ------------------------------------------------------------------ the module's part */

static PyMethodDef trace_methods[] = {
    {"keep_trace", (PyCFunction)recorder_keep_trace, METH_VARARGS,
     "keep_trace(max_records): what the join in C is given is kept for the trace too (launch "
     "calls, graph node events, GPU records: max_records of them at most), and launch calls are "
     "timed. After join_in_c(), before take_activity_buffers()."},
    {"trace_counts", (PyCFunction)recorder_trace_counts, METH_NOARGS,
     "trace_counts() -> {'launches', 'graph_nodes', 'records', 'dropped', 'max_records'}: what "
     "the trace keeps, and what it did not keep past its cap."},
    {"trace_streams", (PyCFunction)recorder_trace_streams, METH_VARARGS,
     "trace_streams(make_launch, make_activity, make_external, make_node, memcpy_name) -> "
     "(launches, activities, externals, graph_nodes): what the trace keeps, as Python records."},
    {NULL, NULL, 0, NULL},
};

int
trace_ready(PyTypeObject *recorder)
{
    return add_methods(recorder, trace_methods);
}
