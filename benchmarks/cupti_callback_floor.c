/*
 * The floor of a CUPTI launch callback, for benchmarks/profile_cost.py: a subscriber whose
 * callback returns at once, enabled on the launch APIs kname profile subscribes to, and
 * activity buffers handed back and freed unread. What any profiler that sees each launch at its
 * API and reads kernel records pays, before it does any work of its own.
 *
 *   int floor_start(const char *libcupti, const uint32_t *domains, const uint32_t *cbids, int n,
 *                   int flags)
 *   int floor_stop(void)
 *   unsigned long floor_calls(int domain)   the callbacks of `domain` (1 to 3) since the last ask
 * return CUPTI's status (0: success; -1: libcupti or one of its functions not found). `flags`:
 * FLOOR_NAMED, subscribed by cuptiSubscribe_v2 with a name, as kname's recorder is (where the
 * library has it), else by cuptiSubscribe; FLOOR_RECORDING, the callback keeps a record of each
 * call at its enter (its correlation id and a site) on the calling thread, the least a recorder
 * of launches does, with no lock and nothing shared. The pairs may name the resource domain (3) too: the graph
 * callbacks. n = 0: subscribed, no callback enabled.
 * The activity kinds are enabled by the caller (cupti-python), as for the other variants.
 *
 * Build: cc -shared -fPIC -O2 -I<repo> cupti_callback_floor.c -o libcupti_floor.so -ldl
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "kname/profiling/_cupti_c/cupti_abi.h"

static kn_SubscriberHandle subscriber;
static kn_Unsubscribe unsubscribe;
static unsigned long calls[4]; /* by domain: one add, on the launching thread */

#define FLOOR_NAMED 1
#define FLOOR_RECORDING 2
#define KEPT 4096 /* records a thread keeps, a power of 2: the oldest are written over */

static _Thread_local struct {
    uint32_t ids[KEPT];
    const void *sites[KEPT];
    unsigned count;
} kept;

static void
empty_callback(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *data)
{
    (void)userdata;
    (void)cbid;
    (void)data;
    calls[domain & 3]++;
}

static void
recording_callback(void *userdata, kn_CallbackDomain domain, kn_CallbackId cbid, const void *data)
{
    (void)userdata;
    (void)cbid;
    calls[domain & 3]++;
    const kn_CallbackData *call = (const kn_CallbackData *)data;
    if (domain == KN_CUPTI_CB_DOMAIN_RESOURCE || call->callbackSite != KN_CUPTI_API_ENTER)
        return;
    unsigned i = kept.count++ & (KEPT - 1);
    kept.ids[i] = call->correlationId;
    kept.sites[i] = &kept; /* a site: any pointer kept beside the id */
}

unsigned long
floor_calls(int domain)
{
    unsigned long count = calls[domain & 3];
    calls[domain & 3] = 0;
    return count;
}

static void
buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 8 << 20;
    *buffer = aligned_alloc(KN_CUPTI_ACTIVITY_RECORD_ALIGNMENT, *size);
    *max_records = 0;
}

static void
buffer_completed(kn_CUcontext context, uint32_t stream, uint8_t *buffer, size_t size,
                 size_t valid)
{
    (void)context;
    (void)stream;
    (void)size;
    (void)valid;
    free(buffer);
}

int
floor_start(const char *libcupti, const uint32_t *domains, const uint32_t *cbids, int n,
            int flags)
{
    kn_CallbackFunc callback = (flags & FLOOR_RECORDING) ? recording_callback : empty_callback;
    void *library = dlopen(libcupti, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL)
        library = dlopen(libcupti, RTLD_NOW);
    if (library == NULL)
        return -1;
    kn_Subscribe subscribe = (kn_Subscribe)dlsym(library, "cuptiSubscribe");
    kn_EnableCallback enable = (kn_EnableCallback)dlsym(library, "cuptiEnableCallback");
    kn_ActivityRegisterCallbacks register_buffers =
        (kn_ActivityRegisterCallbacks)dlsym(library, "cuptiActivityRegisterCallbacks");
    kn_Subscribe_v2 subscribe_v2 = (kn_Subscribe_v2)dlsym(library, "cuptiSubscribe_v2");
    unsubscribe = (kn_Unsubscribe)dlsym(library, "cuptiUnsubscribe");
    if (subscribe == NULL || enable == NULL || register_buffers == NULL || unsubscribe == NULL)
        return -1;
    kn_CUptiResult status = register_buffers(buffer_requested, buffer_completed);
    char holder[KN_CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = "";
    kn_SubscriberParams params = {sizeof params, "kname-floor", holder, sizeof holder - 1};
    if (status == KN_CUPTI_SUCCESS && (flags & FLOOR_NAMED) && subscribe_v2 != NULL)
        status = subscribe_v2(&subscriber, callback, NULL, &params);
    else if (status == KN_CUPTI_SUCCESS)
        status = subscribe(&subscriber, callback, NULL);
    for (int i = 0; status == KN_CUPTI_SUCCESS && i < n; i++)
        status = enable(1, subscriber, domains[i], cbids[i]);
    return (int)status;
}

int
floor_stop(void)
{
    kn_CUptiResult status = unsubscribe == NULL ? 0 : unsubscribe(subscriber);
    subscriber = NULL;
    return (int)status;
}
