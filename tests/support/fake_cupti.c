/*
 * A stand-in libcupti for tests without a GPU: the five functions kname._native_cupti takes
 * from the real one (declared as in kname/_cupti_abi.h), and calls that make it call back as
 * CUPTI does at a launch API's enter and exit, on the calling thread, for enabled callbacks only.
 */
#include <stdint.h>
#include <string.h>

#include "_cupti_abi.h"

static kn_CallbackFunc callback, last_callback;
static void *userdata, *last_userdata;
static kn_CUptiResult refusal;
static const char *holder = "";
static uint32_t enabled[3][4096];
static uint64_t now = 1000;
static int subscriber;

kn_CUptiResult
cuptiSubscribe(kn_SubscriberHandle *handle, kn_CallbackFunc function, void *data)
{
    if (refusal)
        return refusal;
    callback = last_callback = function;
    userdata = last_userdata = data;
    *handle = (kn_SubscriberHandle)&subscriber;
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiSubscribe_v2(kn_SubscriberHandle *handle, kn_CallbackFunc function, void *data,
                  kn_SubscriberParams *params)
{
    if (refusal && params != NULL && params->oldSubscriberName != NULL)
        strncpy(params->oldSubscriberName, holder, params->oldSubscriberSize);
    return cuptiSubscribe(handle, function, data);
}

kn_CUptiResult
cuptiUnsubscribe(kn_SubscriberHandle handle)
{
    (void)handle;
    callback = NULL;
    memset(enabled, 0, sizeof enabled);
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiEnableCallback(uint32_t enable, kn_SubscriberHandle handle, kn_CallbackDomain domain,
                    kn_CallbackId cbid)
{
    if (handle != (kn_SubscriberHandle)&subscriber || domain > 2 || cbid >= 4096)
        return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    enabled[domain][cbid] = enable;
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiGetTimestamp(uint64_t *timestamp)
{
    *timestamp = __atomic_fetch_add(&now, 1, __ATOMIC_RELAXED);
    return KN_CUPTI_SUCCESS;
}

/* ---- for the tests */

void
fake_refuse(kn_CUptiResult status, const char *name)
{
    refusal = status;
    holder = name;
}

static void
call(kn_CallbackFunc function, void *data, uint32_t domain, uint32_t cbid, uint32_t site,
     uint32_t correlation_id)
{
    kn_CallbackData info;
    memset(&info, 0, sizeof info);
    info.callbackSite = site;
    info.functionName = "cuLaunchKernel";
    info.correlationId = correlation_id;
    function(data, domain, cbid, &info);
}

/* The callback at a launch API's enter (site 0) or exit (1); 0 when CUPTI would not call. */
int
fake_callback(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation_id)
{
    if (callback == NULL || domain > 2 || cbid >= 4096 || !enabled[domain][cbid])
        return 0;
    call(callback, userdata, domain, cbid, site, correlation_id);
    return 1;
}

/* The last subscriber's callback called after it unsubscribed (a callback already in flight). */
void
fake_stale_callback(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation_id)
{
    call(last_callback, last_userdata, domain, cbid, site, correlation_id);
}
