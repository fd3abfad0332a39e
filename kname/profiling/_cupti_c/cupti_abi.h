/*
 * The few CUPTI declarations kname._native_cupti uses, written out here so that building kname
 * needs no CUDA or CUPTI headers (the library itself is found at run time, with dlopen).
 *
 * Each is laid out as in CUPTI's own headers (cupti_result.h, cupti_callbacks.h and
 * cupti_activity.h of CUPTI 13): fields in order, enum values, function types; an activity
 * record only as far as the fields kname reads. CUPTI's enums are 32-bit (each has a FORCE_INT
 * member of 0x7fffffff and no negative member), so they are passed and stored as uint32_t here. CUPTIAPI is the plain C calling convention on Linux.
 * tests/native/test_cupti_abi.py compiles these beside the real headers, where both are
 * installed, and checks sizes, offsets, values and function types against them.
 */
#ifndef KNAME_CUPTI_ABI_H
#define KNAME_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

/* CUptiResult */
typedef uint32_t kn_CUptiResult;
#define KN_CUPTI_SUCCESS 0
#define KN_CUPTI_ERROR_MAX_LIMIT_REACHED 12 /* cuptiActivityGetNextRecord: no more records */
#define KN_CUPTI_ERROR_INVALID_KIND 21      /* ...: an incomplete or invalid record */
#define KN_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

/* CUpti_ApiCallbackSite */
#define KN_CUPTI_API_ENTER 0
#define KN_CUPTI_API_EXIT 1

/* CUpti_CallbackDomain */
#define KN_CUPTI_CB_DOMAIN_DRIVER_API 1
#define KN_CUPTI_CB_DOMAIN_RUNTIME_API 2
#define KN_CUPTI_CB_DOMAIN_RESOURCE 3

/* CUpti_CallbackIdResource: the CUDA graph callbacks kname reads. GRAPH_NODE_UPDATED is
 * CUPTI 13.0's (cudaGraphExecUpdate). */
#define KN_CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING 10
#define KN_CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED 13
#define KN_CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING 14
#define KN_CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING 19
#define KN_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED 20
#define KN_CUPTI_CBID_RESOURCE_GRAPH_NODE_UPDATED 22

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

/* CUcontext, CUstream, CUgraph, CUgraphNode, CUgraphExec: opaque pointers, CUDA's tags. */
typedef struct CUctx_st *kn_CUcontext;
typedef struct CUstream_st *kn_CUstream;
typedef struct CUgraph_st *kn_CUgraph;
typedef struct CUgraphNode_st *kn_CUgraphNode;
typedef struct CUgraphExec_st *kn_CUgraphExec;

/* CUpti_ResourceData: what a resource callback is given, valid during the call. For the graph
 * callbacks, resourceDescriptor points to a CUpti_GraphData. */
typedef struct {
    kn_CUcontext context;
    union {
        kn_CUstream stream;
    } resourceHandle;
    void *resourceDescriptor;
} kn_ResourceData;

/* CUpti_GraphData */
typedef struct {
    kn_CUgraph graph;
    kn_CUgraph originalGraph;     /* the graph `graph` is cloned from */
    kn_CUgraphNode node;
    kn_CUgraphNode originalNode;  /* the node `node` is cloned from (or, updated, takes after) */
    uint32_t nodeType;            /* CUgraphNodeType */
    kn_CUgraphNode dependency;
    kn_CUgraphExec graphExec;
} kn_GraphData;

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

/* cuptiGetGraphNodeId, cuptiGetGraphId, cuptiGetGraphExecId (cupti_activity.h) */
typedef kn_CUptiResult (*kn_GetGraphNodeId)(kn_CUgraphNode node, uint64_t *nodeId);
typedef kn_CUptiResult (*kn_GetGraphId)(kn_CUgraph graph, uint32_t *pId);
typedef kn_CUptiResult (*kn_GetGraphExecId)(kn_CUgraphExec graphExec, uint32_t *pId);

/* ---- activity records (cupti_activity.h) */

/* CUpti_ActivityKind: the kinds kname reads */
#define KN_CUPTI_ACTIVITY_KIND_MEMCPY 1
#define KN_CUPTI_ACTIVITY_KIND_MEMSET 2
#define KN_CUPTI_ACTIVITY_KIND_KERNEL 3
#define KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL 10
#define KN_CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION 39
#define KN_CUPTI_ACTIVITY_KIND_MEMORY2 49 /* kname profile --memory's */

/* CUpti_ActivityMemoryOperationType: what a MEMORY2 record did (RELEASE is 2) */
#define KN_CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION 1

/* CUpti_ActivityFlag */
#define KN_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1

/* ACTIVITY_RECORD_ALIGNMENT (cupti_common.h): how activity buffers and records are aligned */
#define KN_CUPTI_ACTIVITY_RECORD_ALIGNMENT 8

/* CUpti_Activity: what every record begins with. */
typedef struct {
    uint32_t kind; /* CUpti_ActivityKind */
} kn_Activity;

/* The records kname reads, each declared up to the last field it reads, with the fields it does
 * not read as filler. CUPTI's records are packed (and 8-byte aligned): so are these. The layouts
 * are those of CUPTI 13.0's CUpti_ActivityKernel10 (KERNEL and CONCURRENT_KERNEL records),
 * CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityExternalCorrelation and
 * CUpti_ActivityMemory4 (MEMORY2 records, read with kname profile --memory); later
 * releases' versions of these records begin the same way (the header check compares both). */
typedef struct __attribute__((packed)) {
    uint32_t kind;
    uint8_t filler0[12]; /* cacheConfig .. partitionedGlobalCacheExecuted */
    uint64_t start;
    uint64_t end;
    uint8_t filler1[8]; /* completed */
    uint32_t deviceId;
    uint8_t filler2[4]; /* contextId */
    uint32_t streamId;
    uint8_t filler3[40]; /* gridX .. localMemoryTotal */
    uint32_t correlationId;
    uint8_t filler4[8]; /* gridId */
    const char *name;   /* CUPTI's: copied before the buffer is given back */
    uint8_t filler5[32]; /* reserved0 .. sharedMemoryExecuted */
    uint64_t graphNodeId;
    uint8_t filler6[4]; /* shmemLimitConfig */
    uint32_t graphId;
} kn_ActivityKernel;

typedef struct __attribute__((packed)) {
    uint32_t kind;
    uint8_t copyKind;    /* CUpti_ActivityMemcpyKind */
    uint8_t filler0[11]; /* srcKind .. bytes */
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint8_t filler1[4]; /* contextId */
    uint32_t streamId;
    uint32_t correlationId;
    uint8_t filler2[16]; /* runtimeCorrelationId .. reserved0 */
    uint64_t graphNodeId;
    uint32_t graphId;
} kn_ActivityMemcpy;

typedef struct __attribute__((packed)) {
    uint32_t kind;
    uint8_t filler0[12]; /* value, bytes */
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint8_t filler1[4]; /* contextId */
    uint32_t streamId;
    uint32_t correlationId;
    uint8_t filler2[16]; /* flags .. reserved0 */
    uint64_t graphNodeId;
    uint32_t graphId;
} kn_ActivityMemset;

typedef struct __attribute__((packed)) {
    uint32_t kind;
    uint32_t externalKind; /* CUpti_ExternalCorrelationKind */
    uint64_t externalId;
    uint32_t correlationId;
} kn_ActivityExternalCorrelation;

typedef struct __attribute__((packed)) {
    uint32_t kind;
    uint32_t memoryOperationType; /* CUpti_ActivityMemoryOperationType */
    uint32_t memoryKind;          /* CUpti_ActivityMemoryKind */
    uint32_t correlationId;
    uint64_t address;
    uint64_t bytes;
    uint64_t timestamp;
    uint8_t filler0[12]; /* PC, processId */
    uint32_t deviceId;
    uint8_t filler1[4]; /* contextId */
    uint32_t streamId;
    uint8_t filler2[8]; /* name */
    uint32_t isAsync;
} kn_ActivityMemory;

/* CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc */
typedef void (*kn_BuffersRequested)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*kn_BuffersCompleted)(kn_CUcontext context, uint32_t streamId, uint8_t *buffer,
                                    size_t size, size_t validSize);

/* cuptiActivityRegisterCallbacks, cuptiActivityGetNextRecord, cuptiActivityGetNumDroppedRecords,
 * cuptiActivityFlushAll */
typedef kn_CUptiResult (*kn_ActivityRegisterCallbacks)(kn_BuffersRequested requested,
                                                       kn_BuffersCompleted completed);
typedef kn_CUptiResult (*kn_ActivityGetNextRecord)(uint8_t *buffer, size_t validBufferSizeBytes,
                                                   kn_Activity **record);
typedef kn_CUptiResult (*kn_ActivityGetNumDroppedRecords)(kn_CUcontext context,
                                                          uint32_t streamId, size_t *dropped);
typedef kn_CUptiResult (*kn_ActivityFlushAll)(uint32_t flag);

#endif
