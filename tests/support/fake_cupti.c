/*
 * A stand-in libcupti for tests without a GPU: the functions kname._native_cupti takes from the
 * real one (declared as in kname/profiling/_cupti_c/cupti_abi.h), and calls that make it call back as CUPTI does:
 * at a launch API's enter and exit, on the calling thread, for enabled callbacks only; at a graph
 * resource callback (a node made, cloned, updated, destroyed), its data laid out as CUPTI's, with
 * each handle's id its address (cuptiGetGraphNodeId and the others read it back); and with
 * buffers of activity records the tests queued, laid out as CUPTI's own structs (built with
 * CUPTI's header where there is one, see tests/support.cupti_stand_in.py), at a flush.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cupti_abi.h"

static kn_CallbackFunc callback, last_callback;
static void *userdata, *last_userdata;
static kn_CUptiResult refusal;
static const char *holder = "";
static uint32_t enabled[4][4096];
static uint32_t domain_enabled[4]; /* cuptiEnableDomain: every callback id of the domain */
static unsigned finalized;         /* cuptiFinalize calls */
static uint64_t now = 1000;
static unsigned long timestamps_taken;
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
    memset(domain_enabled, 0, sizeof domain_enabled);
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiEnableDomain(uint32_t enable, kn_SubscriberHandle handle, kn_CallbackDomain domain)
{
    if (handle != (kn_SubscriberHandle)&subscriber || domain > 3)
        return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    domain_enabled[domain] = enable;
    return KN_CUPTI_SUCCESS;
}

/* CUPTI detached: no subscriber, no callback, no activity buffer callbacks (set again later). */
static kn_BuffersCompleted completed;

kn_CUptiResult
cuptiFinalize(void)
{
    if (callback != NULL)
        return 1; /* the stand-in's rule: a subscriber still there is a kname bug */
    completed = NULL;
    finalized++;
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiEnableCallback(uint32_t enable, kn_SubscriberHandle handle, kn_CallbackDomain domain,
                    kn_CallbackId cbid)
{
    if (handle != (kn_SubscriberHandle)&subscriber || domain > 3 || cbid >= 4096)
        return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    enabled[domain][cbid] = enable;
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiGetTimestamp(uint64_t *timestamp)
{
    *timestamp = __atomic_fetch_add(&now, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&timestamps_taken, 1, __ATOMIC_RELAXED);
    return KN_CUPTI_SUCCESS;
}

/* Graph ids: a handle's id is its address (0 is a null handle, which CUPTI refuses). */
#define ID_OF(function, handle_type, id_type)                                                  \
    kn_CUptiResult function(handle_type handle, id_type *id)                                   \
    {                                                                                          \
        if (handle == NULL)                                                                    \
            return 1;                                                                          \
        *id = (id_type)(uintptr_t)handle;                                                      \
        return KN_CUPTI_SUCCESS;                                                               \
    }

ID_OF(cuptiGetGraphNodeId, kn_CUgraphNode, uint64_t)
ID_OF(cuptiGetGraphId, kn_CUgraph, uint32_t)
ID_OF(cuptiGetGraphExecId, kn_CUgraphExec, uint32_t)

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

/* The callback at a launch API's enter (site 0) or exit (1): 1 when CUPTI called back for this
 * id (cuptiEnableCallback, as kname's launch callback asks), 0 when it did not, or only for the
 * whole domain (cuptiEnableDomain, as kname's teardown asks). */
int
fake_callback(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation_id)
{
    if (callback == NULL || domain > 2 || cbid >= 4096)
        return 0;
    int for_this_id = enabled[domain][cbid] != 0;
    if (for_this_id || domain_enabled[domain])
        call(callback, userdata, domain, cbid, site, correlation_id);
    return for_this_id;
}

/* A graph resource callback (domain 3) with these ids as handles; 0 when CUPTI would not call. */
int
fake_graph_callback(uint32_t cbid, uint32_t graph, uint64_t node, uint64_t original,
                    uint32_t graph_exec)
{
    if (callback == NULL || cbid >= 4096 || !enabled[3][cbid])
        return 0;
    kn_GraphData data;
    memset(&data, 0, sizeof data);
    data.graph = (kn_CUgraph)(uintptr_t)graph;
    data.node = (kn_CUgraphNode)(uintptr_t)node;
    data.originalNode = (kn_CUgraphNode)(uintptr_t)original;
    data.graphExec = (kn_CUgraphExec)(uintptr_t)graph_exec;
    kn_ResourceData resource;
    memset(&resource, 0, sizeof resource);
    resource.resourceDescriptor = &data;
    callback(userdata, 3, cbid, &resource);
    return 1;
}

/* The last subscriber's callback called after it unsubscribed (a callback already in flight). */
void
fake_stale_callback(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation_id)
{
    call(last_callback, last_userdata, domain, cbid, site, correlation_id);
}

/* ---- activity buffers: records queued by the tests, handed over as CUPTI hands them over */

/* The records' layout is fake_cupti_records.c's (CUPTI's own structs, where its header is there). */
size_t fake_record_size(uint32_t kind);

static kn_BuffersRequested requested;
static uint8_t *queue;
static size_t queued, queue_room;
static char *names[1 << 16]; /* the kernel names of the queued records, freed after hand-over */
static size_t name_count;
static size_t dropped_records;
static int complete_on_thread, misaligned, handed_over;
static useconds_t slow_us; /* fake_slow: what registering and flushing take, the launches on */

/* Room for a record of `kind` at the end of the queue, zeroed but for its kind. */
void *
fake_queue_record(uint32_t kind)
{
    size_t size = fake_record_size(kind);
    if (queued + size > queue_room) {
        queue_room = (queue_room + size) * 2;
        queue = realloc(queue, queue_room);
    }
    void *record = queue + queued;
    memset(record, 0, size);
    *(uint32_t *)record = kind;
    queued += size;
    return record;
}

/* A copy of `name` that lives until the record is handed over. */
const char *
fake_kernel_name(const char *name)
{
    if (name == NULL || name_count == sizeof names / sizeof names[0])
        return NULL;
    names[name_count] = strdup(name);
    return names[name_count++];
}

kn_CUptiResult
cuptiActivityRegisterCallbacks(kn_BuffersRequested on_request, kn_BuffersCompleted on_complete)
{
    if (on_request == NULL || on_complete == NULL)
        return 1;
    requested = on_request;
    completed = on_complete;
    if (slow_us)
        usleep(slow_us); /* registered: the callbacks enabled before come during it */
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, kn_Activity **record)
{
    uint8_t *next = buffer;
    if (*record != NULL)
        next = (uint8_t *)*record + fake_record_size((*record)->kind);
    if (next >= buffer + valid)
        return KN_CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (kn_Activity *)next;
    return KN_CUPTI_SUCCESS;
}

kn_CUptiResult
cuptiActivityGetNumDroppedRecords(kn_CUcontext context, uint32_t stream, size_t *dropped)
{
    (void)context;
    (void)stream;
    *dropped = dropped_records;
    dropped_records = 0;
    return KN_CUPTI_SUCCESS;
}

/* Every queued record handed over, in as many buffers as the client's size takes; the kernel
 * names then overwritten and freed (CUPTI's are not the client's to keep). */
static void *
hand_over_queue(void *unused)
{
    (void)unused;
    size_t at = 0;
    while (at < queued) {
        uint8_t *buffer = NULL;
        size_t size = 0, most = 0;
        requested(&buffer, &size, &most);
        if (buffer == NULL) { /* declined: the rest is dropped, and counted */
            for (; at < queued; at += fake_record_size(*(uint32_t *)(queue + at)))
                dropped_records++;
            break;
        }
        misaligned |= ((uintptr_t)buffer % KN_CUPTI_ACTIVITY_RECORD_ALIGNMENT) != 0;
        size_t valid = 0;
        while (at + valid < queued) {
            size_t next = fake_record_size(*(uint32_t *)(queue + at + valid));
            if (valid + next > size)
                break;
            valid += next;
        }
        memcpy(buffer, queue + at, valid);
        at += valid;
        handed_over++;
        completed(NULL, 0, buffer, size, valid);
        if (valid == 0)
            break; /* a record larger than the buffer: as CUPTI, give up */
    }
    queued = 0;
    for (size_t i = 0; i < name_count; i++) {
        memset(names[i], '?', strlen(names[i]));
        free(names[i]);
    }
    name_count = 0;
    return NULL;
}

kn_CUptiResult
cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag;
    if (completed == NULL)
        return 1;
    if (complete_on_thread) { /* CUPTI's own thread delivers; the flush waits for it */
        pthread_t thread;
        if (pthread_create(&thread, NULL, hand_over_queue, NULL) != 0)
            return 999;
        pthread_join(thread, NULL);
    }
    else {
        hand_over_queue(NULL);
    }
    if (slow_us)
        usleep(slow_us); /* handed over: a record queued now waits for the next flush */
    return KN_CUPTI_SUCCESS;
}

/* ---- for the tests */

/* Nothing queued, dropped or handed over yet, no timestamp taken; flushes on the caller's
 * thread. */
void
fake_reset_activity(void)
{
    queued = 0;
    dropped_records = 0;
    complete_on_thread = misaligned = handed_over = 0;
    slow_us = 0;
    timestamps_taken = 0;
}

/* cuptiFinalize calls so far. */
unsigned
fake_finalized(void)
{
    return finalized;
}

/* cuptiGetTimestamp calls since the last reset. */
unsigned long
fake_timestamps_taken(void)
{
    return timestamps_taken;
}

/* CUPTI dropped this many records (no buffer space). */
void
fake_drop(size_t count)
{
    dropped_records += count;
}

/* Registering the buffer callbacks and each flush take `us` microseconds more (after their
 * work), as a real one may: launches called back meanwhile show what each step's order keeps. */
void
fake_slow(unsigned us)
{
    slow_us = us;
}

/* Whether a flush hands buffers over on a thread of its own (CUPTI's) or on the caller's. */
void
fake_complete_on_thread(int on_thread)
{
    complete_on_thread = on_thread;
}

/* The queued records handed over now, as CUPTI's thread does when a buffer fills. */
void
fake_complete(void)
{
    cuptiActivityFlushAll(0);
}

/* Buffers handed over so far, and whether one was not aligned as CUPTI asks. */
int
fake_buffers_handed_over(void)
{
    return handed_over;
}

int
fake_misaligned(void)
{
    return misaligned;
}
