/*
 * kname._native_cupti's launch callback (callback.c), as the Recorder's files call it: what CUPTI
 * calls, each thread's open calls, the buffer of finished calls, the faults kept and the site
 * names kept. The types are types.h's.
 */
#ifndef KNAME_NATIVE_CUPTI_CALLBACK_H
#define KNAME_NATIVE_CUPTI_CALLBACK_H

#include "profiling/_cupti_c/types.h" /* first: it includes Python.h */

/* This thread's calls (made at its first launch call, freed as it ends), as calls_of() gives
 * them to the recorder `r` (started afresh for another recorder). One pointer, read once a
 * callback: a shared library's thread-local is found through a call into the dynamic linker
 * (__tls_get_addr) at each access. Not initial-exec, which would take the extension's thread-
 * locals from the little static space glibc keeps for libraries loaded later, and fail the
 * import where libraries loaded before it (torch's) used it up. */
INTERNAL extern _Thread_local ThreadCalls *here; /* callback.c */

/* This thread's calls made, or started afresh for `r`: its buffer of another recorder let go.
 * NULL: no memory for them (a fault kept): the call is not recorded. */
INTERNAL ThreadCalls *calls_start(Recorder *r); /* callback.c */

static inline ThreadCalls *
calls_of(Recorder *r)
{
    ThreadCalls *t = here;
    if (t == NULL || t->owner != r->serial)
        t = calls_start(r);
    return t;
}

/* The launch kname wraps that runs on this thread now has the site `name` (NULL: none). */
static inline void
mark_wrapped(Recorder *r, PyObject *name)
{
    ThreadCalls *t = calls_of(r);
    if (t != NULL)
        t->wrapped = name;
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
 * With the GIL: the exception set now, cleared. faults.c, as note_c_fault. */
INTERNAL void note_fault(Recorder *r, const char *where);

/* The same for a fault of CUPTI's, said in words (no GIL needed). */
INTERNAL void note_c_fault(Recorder *r, const char *where, const char *detail, long status);

/* The finished calls taken out of the threads' buffers (a copy, *count of them, thread by
 * thread, each in the order they finished; NULL when none, or, with *count left above 0, no
 * memory: they stay). Any thread. */
INTERNAL Launch *take_finished(Recorder *r, Py_ssize_t *count);

/* The finished calls waiting and the calls open to be recorded at their exit, over every
 * thread (under r->lock). */
INTERNAL void waiting_calls(Recorder *r, Py_ssize_t *finished, Py_ssize_t *open);

/* Every thread's buffer let go (the recorder's end); or its calls forgotten (cleared). */
INTERNAL void free_buffers(Recorder *r);
INTERNAL void forget_finished(Recorder *r);

/* The module's key whose destructor lets a thread's calls and buffer go when the thread ends
 * (the module's init makes it). 0, or -1 with an error. */
INTERNAL int thread_end_ready(void);

/* The graph node events waiting, taken the same way. */
INTERNAL NodeEvent *take_node_events(Recorder *r, Py_ssize_t *count);

/* Where `kept` holds a name equal to `name`, that one (borrowed); NULL with an error
 * (launch_site.c). */
INTERNAL PyObject *keep(Recorder *r, PyObject *name);

/* The site of a launch whose call is not nested and not wrapped, and of one with no Python
 * frame (borrowed; NULL: none). The GIL need not be held. launch_site.c. */
INTERNAL PyObject *site_here(Recorder *r, ThreadCalls *t);
INTERNAL PyObject *frameless_site(Recorder *r, ThreadCalls *t);

#endif /* KNAME_NATIVE_CUPTI_CALLBACK_H */
