/*
 * The trace of kname._native_cupti, kept in C: the twin of kname.profiling.trace for the native
 * path (`--trace`, KNAME_PROFILE_TRACE). Copies of the launch calls, the graph node events and
 * the GPU records, as the recorder hands them to its join (in CUPTI's thread, under the
 * recorder's activity_lock), bounded by one cap on them all, as StreamLog is; and the Chrome
 * trace-event JSON written from them in one pass, with a Python call per distinct name only (its
 * JSON form, a kernel's display name), never per record. trace.py is the specification: the
 * same events, in the same order, with the same numbers (tests/profiling/test_native_cupti_trace.py checks
 * that the texts are equal for the same streams).
 */
#ifndef KNAME_NATIVE_CUPTI_TRACE_H
#define KNAME_NATIVE_CUPTI_TRACE_H

#include "profiling/_cupti_c/join.h" /* first: it includes Python.h */

typedef struct {
    int on;
    Py_ssize_t max_records; /* launches, graph node events and GPU records kept, together */
    Launch *launches;
    size_t launch_count, launch_room;
    NodeEvent *nodes;
    size_t node_count, node_room;
    GpuRecord *work; /* kernels, copies, sets, and external correlations, as they came */
    size_t work_count, work_room;
    unsigned long long dropped; /* past max_records, or no memory */
} TraceLog;

/* Copies of `count` records kept, in order, up to the cap (past it, counted in `dropped`). */
INTERNAL void trace_launches(TraceLog *t, const Launch *launches, Py_ssize_t count);
INTERNAL void trace_nodes(TraceLog *t, const NodeEvent *events, Py_ssize_t count);
INTERNAL void trace_work(TraceLog *t, const GpuRecord *records, Py_ssize_t count);
INTERNAL void trace_free(TraceLog *t);

#endif /* KNAME_NATIVE_CUPTI_TRACE_H */
