/*
 * CUPTI's teardown after an attach window (issue 41): cuptiFinalize from a callback of its own
 * at the next CUDA API exit, and the module's functions that show and call off one waiting.
 */
#include "profiling/_cupti_c/recorder.h"

/* ---- CUPTI's teardown (issue 41): unsubscribed, CUPTI stays in the driver's launch path and
 * launches cost more than before it started (+33% to +50% a torch iteration on the H100). Its
 * detach is cuptiFinalize, safe only where no other thread is inside CUPTI: from a callback at
 * a driver or runtime API's exit (CUPTI's "dynamic detach"; kineto's teardown does the same). So
 * finalize_later() subscribes a callback of its own to both domains; the first API exit on any
 * thread unsubscribes it and finalizes. The next subscribe cancels one still waiting; a CUPTI
 * call after a finalize initializes CUPTI again. None of it touches Python. */

typedef kn_CUptiResult (*kn_Finalize)(void);
typedef kn_CUptiResult (*kn_EnableDomain)(uint32_t enable, kn_SubscriberHandle subscriber,
                                          kn_CallbackDomain domain);

static pthread_mutex_t teardown_lock = PTHREAD_MUTEX_INITIALIZER;
static kn_SubscriberHandle teardown_subscriber; /* not NULL: a finalize waits for an API exit */
static kn_Unsubscribe teardown_unsubscribe;
static kn_Finalize teardown_finalize;
static atomic_uint finalized;              /* times CUPTI was finalized */
static atomic_uint finalize_status;        /* cuptiFinalize's last status */

static void
on_teardown(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *cbdata)
{
    (void)userdata;
    (void)cbid;
    if (domain != KN_CUPTI_CB_DOMAIN_DRIVER_API && domain != KN_CUPTI_CB_DOMAIN_RUNTIME_API)
        return;
    if (((const kn_CallbackData *)cbdata)->callbackSite != KN_CUPTI_API_EXIT)
        return;
    /* Taken: a subscribe cancels it, or another thread finalizes; either way, nothing to do. */
    if (pthread_mutex_trylock(&teardown_lock) != 0)
        return;
    if (teardown_subscriber != NULL) {
        teardown_unsubscribe(teardown_subscriber);
        teardown_subscriber = NULL;
        atomic_store(&finalize_status, teardown_finalize());
        atomic_fetch_add(&finalized, 1);
    }
    pthread_mutex_unlock(&teardown_lock);
}

/* A finalize still waiting for an API exit is called off (before kname subscribes again). */
void
cancel_teardown(void)
{
    pthread_mutex_lock(&teardown_lock);
    if (teardown_subscriber != NULL) {
        teardown_unsubscribe(teardown_subscriber);
        teardown_subscriber = NULL;
    }
    pthread_mutex_unlock(&teardown_lock);
}

/* finalize_later() -> status: after unsubscribe() (and the last flush), CUPTI is finalized at
 * the next driver or runtime API exit, on the thread that makes it. */
PyObject *
recorder_finalize_later(Recorder *r, PyObject *unused)
{
    (void)unused;
    if (r->subscriber != NULL || r->library == NULL || r->subscribe == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "finalize_later(): after subscribe() and "
                                            "unsubscribe() only");
        return NULL;
    }
    kn_Finalize finalize = (kn_Finalize)symbol(r, "cuptiFinalize");
    kn_EnableDomain enable_domain = (kn_EnableDomain)symbol(r, "cuptiEnableDomain");
    if (finalize == NULL || enable_domain == NULL)
        return NULL;
    kn_CUptiResult status = KN_CUPTI_SUCCESS;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&teardown_lock);
    if (teardown_subscriber == NULL) {
        kn_SubscriberHandle subscriber = NULL;
        teardown_unsubscribe = r->unsubscribe;
        teardown_finalize = finalize;
        status = r->subscribe(&subscriber, on_teardown, NULL);
        if (status == KN_CUPTI_SUCCESS) {
            status = enable_domain(1, subscriber, KN_CUPTI_CB_DOMAIN_DRIVER_API);
            if (status == KN_CUPTI_SUCCESS)
                status = enable_domain(1, subscriber, KN_CUPTI_CB_DOMAIN_RUNTIME_API);
            if (status == KN_CUPTI_SUCCESS)
                teardown_subscriber = subscriber;
            else
                r->unsubscribe(subscriber);
        }
    }
    pthread_mutex_unlock(&teardown_lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(status);
}

/* finalize_state() -> (waiting, finalized, status): whether a finalize waits for an API exit,
 * how many times CUPTI was finalized, and cuptiFinalize's last status. */
static PyObject *
module_finalize_state(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int waiting;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&teardown_lock);
    waiting = teardown_subscriber != NULL;
    pthread_mutex_unlock(&teardown_lock);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iII)", waiting, atomic_load(&finalized), atomic_load(&finalize_status));
}

/* cancel_finalize(): a finalize still waiting for an API exit is called off. */
static PyObject *
module_cancel_finalize(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    cancel_teardown();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyMethodDef teardown_functions[] = {
    {"finalize_state", module_finalize_state, METH_NOARGS,
     "finalize_state() -> (waiting, finalized, status): whether a finalize waits for a CUDA API "
     "exit, how many times CUPTI was finalized, cuptiFinalize's last status."},
    {"cancel_finalize", module_cancel_finalize, METH_NOARGS,
     "cancel_finalize(): a finalize still waiting for a CUDA API exit is called off."},
    {NULL, NULL, 0, NULL},
};
