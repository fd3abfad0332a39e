/*
 * The few CUPTI declarations kname/_native_cupti.c uses, written out here so that building kname
 * needs no CUDA or CUPTI headers (the library itself is found at run time, with dlopen).
 *
 * Each is laid out as in CUPTI's own headers (cupti_result.h, cupti_callbacks.h and
 * cupti_activity.h of CUPTI 13): fields in order, enum values, function types. CUPTI's enums are
 * 32-bit (each has a FORCE_INT member of 0x7fffffff and no negative member), so they are passed
 * and stored as uint32_t here. CUPTIAPI is the plain C calling convention on Linux.
 * tests/test_native_cupti_abi.py compiles these beside the real headers, where both are
 * installed, and checks sizes, offsets, values and function types against them.
 */
#ifndef KNAME_CUPTI_ABI_H
#define KNAME_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

/* CUptiResult */
typedef uint32_t kn_CUptiResult;
#define KN_CUPTI_SUCCESS 0
#define KN_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

/* CUpti_ApiCallbackSite */
#define KN_CUPTI_API_ENTER 0
#define KN_CUPTI_API_EXIT 1

/* CUpti_CallbackDomain */
#define KN_CUPTI_CB_DOMAIN_DRIVER_API 1
#define KN_CUPTI_CB_DOMAIN_RUNTIME_API 2

typedef uint32_t kn_CallbackDomain; /* CUpti_CallbackDomain */
typedef uint32_t kn_CallbackId;     /* CUpti_CallbackId */

/* CUpti_SubscriberHandle: an opaque pointer, the same tag as CUPTI's. */
typedef struct CUpti_Subscriber_st *kn_SubscriberHandle;

/* CUpti_CallbackData: what a driver or runtime API callback is given, valid during the call. */
typedef struct {
    uint32_t callbackSite; /* CUpti_ApiCallbackSite */
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context; /* CUcontext */
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} kn_CallbackData;

/* CUpti_SubscriberParams (cuptiSubscribe_v2, where the library has it). */
#define KN_CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN 64

/* Its first four fields only, as CUPTI 13.0 has it: CUPTI reads `structSize` to learn which
 * fields a client passes, and 13.0 refuses (ERROR_INVALID_PARAMETER) the larger struct of later
 * releases, whose extra field (allowMultipleSubscribers) kname does not use. */
typedef struct {
    size_t structSize;
    const char *subscriberName;
    char *oldSubscriberName;
    size_t oldSubscriberSize;
} kn_SubscriberParams;

/* CUpti_CallbackFunc */
typedef void (*kn_CallbackFunc)(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid,
                                const void *cbdata);

/* cuptiSubscribe, cuptiSubscribe_v2, cuptiUnsubscribe, cuptiEnableCallback, cuptiGetTimestamp */
typedef kn_CUptiResult (*kn_Subscribe)(kn_SubscriberHandle *subscriber, kn_CallbackFunc callback,
                                       void *userdata);
typedef kn_CUptiResult (*kn_Subscribe_v2)(kn_SubscriberHandle *subscriber,
                                          kn_CallbackFunc callback, void *userdata,
                                          kn_SubscriberParams *params);
typedef kn_CUptiResult (*kn_Unsubscribe)(kn_SubscriberHandle subscriber);
typedef kn_CUptiResult (*kn_EnableCallback)(uint32_t enable, kn_SubscriberHandle subscriber,
                                            kn_CallbackDomain domain, kn_CallbackId cbid);
typedef kn_CUptiResult (*kn_GetTimestamp)(uint64_t *timestamp);

#endif
