/*
 * kname._native_cupti's launch callback (callback.c), as the Recorder's files call it: what CUPTI
 * calls, each thread's open calls, the buffer of finished calls, the faults kept and the site
 * names kept. The types are types.h's.
 */
#ifndef KNAME_NATIVE_CUPTI_CALLBACK_H
#define KNAME_NATIVE_CUPTI_CALLBACK_H

#include "profiling/_cupti_c/types.h" /* first: it includes Python.h */

/* This thread's open calls, as calls_of() gives them to the recorder `r` (started afresh for
 * another recorder). */
INTERNAL extern _Thread_local ThreadCalls here; /* callback.c */

static inline ThreadCalls *
calls_of(Recorder *r)
{
    ThreadCalls *t = &here;
    if (t->owner != r->serial) {
        memset(t, 0, offsetof(ThreadCalls, calls));
        t->owner = r->serial;
    }
    return t;
}

/* In callback.c: what CUPTI calls at each launch API call, and what it shares. */

/* What CUPTI calls. Never raises, never fails the CUDA call. */
INTERNAL void on_api(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid,
                     const void *cbdata);

/* One of CUPTI's graph resource callbacks (`event`: NODE_CREATED...), on the thread making the
 * node: kept for the next drain. */
INTERNAL void graph_event(Recorder *r, int event, const kn_ResourceData *data);

/* A launch API call starts on this thread (enter), or returns (exit). */
INTERNAL void launch_enter(Recorder *r, uint32_t correlation_id, int api, uint64_t timestamp);
INTERNAL void launch_exit(Recorder *r, uint32_t correlation_id, uint64_t timestamp);

/* Keep a fault for take_fault(), unless one is kept already (report_fault says each kind once).
 * With the GIL: the exception set now, cleared. */
INTERNAL void note_fault(Recorder *r, const char *where);

/* The same for a fault of CUPTI's, said in words (no GIL needed). */
INTERNAL void note_c_fault(Recorder *r, const char *where, const char *detail, long status);

/* The finished calls taken out of the buffer (a copy, *count of them; NULL when none, or, with
 * *count left above 0, no memory: they stay). Any thread. */
INTERNAL Launch *take_finished(Recorder *r, Py_ssize_t *count);

/* The graph node events waiting, taken the same way. */
INTERNAL NodeEvent *take_node_events(Recorder *r, Py_ssize_t *count);

/* Where `kept` holds a name equal to `name`, that one (borrowed); NULL with an error. */
INTERNAL PyObject *keep(Recorder *r, PyObject *name);

#endif /* KNAME_NATIVE_CUPTI_CALLBACK_H */
