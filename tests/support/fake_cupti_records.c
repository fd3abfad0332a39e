/*
 * The activity records of the stand-in libcupti (fake_cupti.c), laid out as CUPTI's own structs
 * where its header is at hand (built with FAKE_CUPTI_HEADERS: CUPTI 13.0's record versions), else
 * as kname's declarations of them; each 8-byte aligned, back to back in a buffer. Apart from
 * fake_cupti.c, whose functions are declared with kname's types, which CUPTI's header would
 * declare again with its own.
 */
#include <stdint.h>
#include <string.h>

#ifdef FAKE_CUPTI_HEADERS
#include <cupti_activity.h>
typedef CUpti_ActivityKernel10 KernelRecord;
typedef CUpti_ActivityMemcpy6 MemcpyRecord;
typedef CUpti_ActivityMemset4 MemsetRecord;
typedef CUpti_ActivityExternalCorrelation ExternalRecord;
typedef CUpti_ActivityMemory4 MemoryRecord;
#else
#include "cupti_abi.h"
typedef kn_ActivityKernel KernelRecord;
typedef kn_ActivityMemcpy MemcpyRecord;
typedef kn_ActivityMemset MemsetRecord;
typedef kn_ActivityExternalCorrelation ExternalRecord;
typedef kn_ActivityMemory MemoryRecord;
#endif

#define ALIGNED(size) (((size) + 7) & ~(size_t)7)
#define OTHER_SIZE 40 /* a record of a kind kname does not read */

void *fake_queue_record(uint32_t kind);
const char *fake_kernel_name(const char *name);

size_t
fake_record_size(uint32_t kind)
{
    switch (kind) {
    case 3:  /* CUPTI_ACTIVITY_KIND_KERNEL */
    case 10: /* CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL */
        return ALIGNED(sizeof(KernelRecord));
    case 1: /* CUPTI_ACTIVITY_KIND_MEMCPY */
        return ALIGNED(sizeof(MemcpyRecord));
    case 2: /* CUPTI_ACTIVITY_KIND_MEMSET */
        return ALIGNED(sizeof(MemsetRecord));
    case 39: /* CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION */
        return ALIGNED(sizeof(ExternalRecord));
    case 49: /* CUPTI_ACTIVITY_KIND_MEMORY2 */
        return ALIGNED(sizeof(MemoryRecord));
    default:
        return OTHER_SIZE;
    }
}

/* ---- for the tests: records to hand over at the next flush */

#define SET_WORK(record)                                                                       \
    do {                                                                                       \
        (record)->start = start;                                                               \
        (record)->end = end;                                                                   \
        (record)->correlationId = correlation_id;                                              \
        (record)->streamId = stream;                                                           \
        (record)->deviceId = device;                                                           \
        (record)->graphId = graph_id;                                                          \
        (record)->graphNodeId = graph_node_id;                                                 \
    } while (0)

void
fake_kernel(uint32_t kind, uint32_t correlation_id, uint64_t start, uint64_t end,
            uint32_t stream, uint32_t device, uint32_t graph_id, uint64_t graph_node_id,
            const char *name)
{
    KernelRecord *k = fake_queue_record(kind);
    SET_WORK(k);
    k->name = fake_kernel_name(name);
}

void
fake_memcpy(uint32_t correlation_id, uint8_t copy_kind, uint64_t start, uint64_t end,
            uint32_t stream, uint32_t device, uint32_t graph_id, uint64_t graph_node_id)
{
    MemcpyRecord *m = fake_queue_record(1);
    SET_WORK(m);
    m->copyKind = copy_kind;
}

void
fake_memset(uint32_t correlation_id, uint64_t start, uint64_t end, uint32_t stream,
            uint32_t device, uint32_t graph_id, uint64_t graph_node_id)
{
    MemsetRecord *m = fake_queue_record(2);
    SET_WORK(m);
}

void
fake_external(uint32_t correlation_id, uint64_t external_id)
{
    ExternalRecord *e = fake_queue_record(39);
    e->externalKind = 1; /* CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN */
    e->externalId = external_id;
    e->correlationId = correlation_id;
}

/* A memory record (MEMORY2): `operation` 1 an allocation, 2 a release; `memory_kind` CUPTI's
 * CUpti_ActivityMemoryKind (3: device, 2: pinned...). */
void
fake_memory(uint32_t correlation_id, uint32_t operation, uint32_t memory_kind, uint64_t address,
            uint64_t bytes, uint64_t timestamp, uint32_t device, uint32_t stream,
            uint32_t is_async)
{
    MemoryRecord *m = fake_queue_record(49);
    m->memoryOperationType = operation;
    m->memoryKind = memory_kind;
    m->correlationId = correlation_id;
    m->address = address;
    m->bytes = bytes;
    m->timestamp = timestamp;
#ifdef FAKE_CUPTI_HEADERS
    m->PC = 0xdeadbeef; /* fields kname does not read: filled, so that a misread shows */
    m->processId = 77;
    m->contextId = 5;
#endif
    m->deviceId = device;
    m->streamId = stream;
    m->isAsync = is_async;
}

/* A record of another kind (an API record, say), which kname passes over. */
void
fake_other(uint32_t kind)
{
    fake_queue_record(kind);
}
