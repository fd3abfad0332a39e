/*
 * kname._native_cupti: kname profile's CUPTI launch callback in C. This header is the Recorder's
 * and what its files share (with types.h, the types, and callback.h, the callback's functions);
 * docs/architecture.md has the table of the files and their jobs.
 *
 * CUPTI calls a subscriber's callback on the launching thread, inside the CUDA API call, at its
 * enter and at its exit. In Python (cupti-python calling CuptiCollector) that costs 20-50 us a
 * launch; here, a launch whose site is cached costs a frame look-up and a few pointer compares.
 *
 * Recorder(apis, sites, kinds, site_of_frame, site_key, no_frame, unnamed, max_pending,
 * max_open_calls) does, per launch API call, what kname.profiling.capture.LaunchCapture's enter
 * and exit do, with the same rules, in the same order:
 *   enter: a call made inside another launch API call open on this thread (a runtime call's
 *     driver call) takes the outer call's site and has the outer correlation id as its parent;
 *     else, inside a launch kname wraps, the site its push marked on this thread (mark/unmark);
 *     else the site of the running Python frame: its key (id(code), f_lasti, site_key) looked up
 *     in `sites` (kname.callsite.sites), or, from library code, the key of the first user frame
 *     above it (`kinds`: kname.callsite._kinds), as capture.site_of_frame finds it when it is
 *     cached; anything else asks site_of_frame(frame) (Python, once per call site). No frame:
 *     the name set_frameless() gave (the backward pass running), else `no_frame`. More than
 *     max_open_calls open at once: they are forgotten (said at drain).
 *   exit: the end time of the open call with that correlation id.
 * site_calls(name, nvtx_push, nvtx_pop) gives a wrapped launch's push and pop as C callables: the
 * NVTX call and the mark (or the unmark and the NVTX call), no Python frame per launch.
 * Each call is kept as a C struct (no Python object per launch), in a buffer of its thread's
 * own, which that thread writes without a lock; drain(make_record) hands over the finished ones
 * as make_record(correlation_id, thread, site, api, start, end, graph, parent), each thread's in
 * the order they finished, the threads' merged as their calls entered. Calls still open stay
 * until their exit; a thread that ends leaves its buffer to the drain.
 *
 * Threads and the GIL: the GIL is taken only to read a frame, and only when the thread does not
 * hold it (torch releases it around its launches). A thread with no Python thread state, a
 * call nested in an open one, and a wrapped launch need no GIL at all: the site names kept here
 * (the dict `kept`, for the recorder's lifetime) are stored as plain pointers, and the drain
 * takes the threads' records under a mutex of their own, which a launching thread takes only
 * to make room. Nothing touches Python once the interpreter finalizes,
 * after unsubscribe(), or in a child forked after the recorder was made (CUPTI does not follow a
 * fork).
 *
 * Faults never reach CUPTI: the first is kept for take_fault(), the launch is still recorded.
 * At most max_pending records wait for a drain (the room the threads' buffers hold, counted over
 * every thread); past that, calls are counted in `dropped`.
 *
 * Activity buffers: take_activity_buffers() registers CUPTI's buffer callbacks (in place of
 * cupti-python's). CUPTI asks for a buffer (malloc'd here, aligned as it asks) and hands it back
 * full, mostly on its own thread: each record of a kind the join reads (kernels, copies, sets,
 * external correlations) is copied out into a C struct, without the GIL (a kernel's name is
 * copied once and found again by hash), and the buffer is freed. on_buffer() is then called with
 * the GIL to take them (drain_activities), after the finished launches. At most max_records
 * wait; past that, and CUPTI's own drops, are counted (activity_counts()).
 *
 * The join: after join_in_c(), nothing is handed over: the finished launches and then the
 * buffer's records are joined right there, in C (kname.profiling.join's tables, steps and
 * bounds, for the path that keeps no stream log), and the totals are read with join_profile().
 *
 * The trace: after keep_trace(max_records), what the join in C is given is also kept, as C
 * structs, for --trace (trace.h), and trace_json() writes the Chrome trace from
 * it. Launch calls are timed (cuptiGetTimestamp at enter and exit) only while time_launches()
 * says so: a trace or a stream log reads the times, nothing else does.
 *
 * CUDA graphs: enable_graph(cbid, event) has CUPTI call back at one of its graph resource
 * callbacks (a node made, cloned, updated, destroyed): each is kept as a C struct, as a launch
 * is, with the ids cuptiGetGraphNodeId, cuptiGetGraphId and cuptiGetGraphExecId give, and, for a
 * node made, the site of the launch call open on this thread (a captured launch), else of the
 * wrapped launch running, else of the running frame (a node added explicitly); with the
 * correlation id of the last launch call entered, which orders it among the launches.
 * drain_graph_nodes(make_record) hands them over (GraphNodeRecord); with the join in C they go
 * there, after the launches and before each buffer's records.
 *
 * CUPTI itself: subscribe(path) dlopens the libcupti that cupti-python loaded (by its absolute
 * path, RTLD_NOLOAD first) and takes the functions of cupti_abi.h; no CUDA header is needed to
 * build this extension. Linux, CPython 3.11+ with the GIL (a free-threaded build refuses
 * to import: kname then uses the Python callback).
 */
#ifndef KNAME_NATIVE_CUPTI_H
#define KNAME_NATIVE_CUPTI_H

#include "profiling/_cupti_c/types.h" /* first: it includes Python.h */
#include "profiling/_cupti_c/callback.h"

/* ------------------------------------------------------------------ the Recorder */

/* In recorder.c: the type as Python sees it, with its own methods (the others' files add theirs:
 * each file's <file>_ready(&RecorderType) below). 0, or -1 with an error. */
INTERNAL extern PyTypeObject RecorderType;
INTERNAL int recorder_ready(PyObject *module);

/* In state.c: the strings above interned, once. 0, or -1 with an error. */
INTERNAL int state_ready(void);

/* libcupti's function `name`; NULL with OSError when it has none (state.c). */
INTERNAL void *symbol(Recorder *r, const char *name);

/* In teardown.c: CUPTI finalized at the next API exit after a window (finalize_later, a
 * Recorder method); a finalize still waiting called off (before a subscribe); the module's
 * finalize_state and cancel_finalize. */
INTERNAL PyObject *recorder_finalize_later(Recorder *r, PyObject *unused);
INTERNAL void cancel_teardown(void);
INTERNAL extern PyMethodDef teardown_functions[];

/* ------------------------------------------------------------------ records */

/* In records.c, the twin of kname.profiling.records. */

/* The kernel names table made, with its two fixed names (0: no memory); a name's index in it,
 * copied once; the table freed (the recorder's end). Under r->activity_lock. */
INTERNAL int names_init(Names *n);
INTERNAL uint32_t intern_name(Names *n, const char *name);
INTERNAL void names_free(Names *n);

/* A launch call, a graph node event, a GPU record as the Python record made by make_record
 * (records.py's LaunchRecord, GraphNodeRecord; ActivityRecord or, for an external correlation,
 * make_external's ExternalCorrelation): a new reference, NULL with an error. */
INTERNAL PyObject *launch_object(Recorder *r, PyObject *make_record, const Launch *launch);
INTERNAL PyObject *node_object(Recorder *r, PyObject *make_record, const NodeEvent *event);
INTERNAL PyObject *gpu_object(Recorder *r, const GpuRecord *g, PyObject *make_activity,
                              PyObject *make_external, PyObject *memcpy_name);

/* drain_memory()'s ([(correlation_id, site)], [(correlation_id, allocation, memory_kind,
 * address, bytes, timestamp, device, stream, is_async)], dropped) of these calls and records,
 * both freed either way: a new reference, NULL with an error. */
INTERNAL PyObject *memory_drained(MemoryCall *calls, size_t call_count, MemoryFact *facts,
                                  size_t fact_count, unsigned long long dropped);

/* The str of kernel name `index`, made once; memcpy_name(copy_kind), asked once per copy kind
 * (new references, NULL with an error). */
INTERNAL PyObject *kernel_name(Recorder *r, uint32_t index);
INTERNAL PyObject *copy_name(Recorder *r, PyObject *memcpy_name, uint32_t copy_kind);

/* ------------------------------------------------------------------ the Recorder's other methods */

/* Each adds its methods to the Recorder (module.c calls them after recorder_ready). 0, or -1 with
 * an error. */
INTERNAL int activity_ready(PyTypeObject *recorder);   /* activity.c: buffers, the join in C */
INTERNAL int trace_ready(PyTypeObject *recorder);      /* trace.c: the trace kept */
INTERNAL int trace_json_ready(PyTypeObject *recorder); /* trace_json.c: its JSON */
INTERNAL int site_calls_ready(PyTypeObject *recorder); /* site_calls.c: SiteCall too */

/* A copy of the trace's log, taken under the activity lock (trace.c); 0: no memory. */
INTERNAL int trace_snapshot(Recorder *r, TraceLog *copy);

/* In a forked child: the buffers' lock made anew (CUPTI's thread, which may have held it, is
 * not in the child). */
INTERNAL void activity_in_forked_child(void);

#endif /* KNAME_NATIVE_CUPTI_H */
