/*
 * A trivial NVTX v3 injection library for benchmarks: it makes NVTX calls
 * non-free (as under a profiler, every push/pop and string registration goes
 * through the tool's function pointers instead of NVTX's built-in no-ops)
 * while doing almost nothing itself: no logging, no timestamps, no I/O.
 *
 * Each push/pop bumps a per-thread depth counter; registered strings and
 * domains get distinct, never-dereferenced handles from an atomic counter.
 * A real profiler (Nsight Systems) also takes a timestamp and writes a record
 * per event, so it costs more than this: numbers measured with this tool are
 * a lower bound for "NVTX with a tool attached".
 *
 * NVTX loads it when NVTX_INJECTION64_PATH names it, at the first NVTX call
 * of the process. Every copy of the header-only NVTX code in the process
 * calls InitializeInjectionNvtx2, so initialisation is idempotent.
 *
 * Build: cc -shared -fPIC -O2 -Wall -Wextra -I<dir holding nvtx3/>
 *        nvtx_null_tool.c -o libkname_nvtx_null.so
 */
#define NVTX_NO_IMPL /* a tool needs the types only, never the header impl */
#include <nvtx3/nvToolsExt.h>

#include <stdint.h>

static __thread int depth;
static uintptr_t next_handle = 1;

static uintptr_t new_handle(void)
{
    /* Aligned, non-NULL, distinct; NVTX and its callers treat it as opaque. */
    return __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED) << 4;
}

static int push(void) { return depth++; }
static int pop(void) { return depth > 0 ? --depth : -1; }

/* ---- CORE2: the domain API (what kname and the nvtx package's Domain use) ---- */
static int domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    (void)d; (void)a;
    return push();
}
static int domain_pop(nvtxDomainHandle_t d) { (void)d; return pop(); }
static void domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    (void)d; (void)a;
}
static nvtxRangeId_t domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    (void)d; (void)a;
    return (nvtxRangeId_t)new_handle();
}
static void domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { (void)d; (void)id; }
static void domain_category_a(nvtxDomainHandle_t d, uint32_t id, const char *name)
{
    (void)d; (void)id; (void)name;
}
static void domain_category_w(nvtxDomainHandle_t d, uint32_t id, const wchar_t *name)
{
    (void)d; (void)id; (void)name;
}
static nvtxStringHandle_t register_string_a(nvtxDomainHandle_t d, const char *s)
{
    (void)d; (void)s;
    return (nvtxStringHandle_t)new_handle();
}
static nvtxStringHandle_t register_string_w(nvtxDomainHandle_t d, const wchar_t *s)
{
    (void)d; (void)s;
    return (nvtxStringHandle_t)new_handle();
}
static nvtxDomainHandle_t domain_create_a(const char *name)
{
    (void)name;
    return (nvtxDomainHandle_t)new_handle();
}
static nvtxDomainHandle_t domain_create_w(const wchar_t *name)
{
    (void)name;
    return (nvtxDomainHandle_t)new_handle();
}
static void domain_destroy(nvtxDomainHandle_t d) { (void)d; }

/* ---- CORE: the global API (nvtx.annotate with no domain uses it) ---- */
static int push_ex(const nvtxEventAttributes_t *a) { (void)a; return push(); }
static int push_a(const char *m) { (void)m; return push(); }
static int push_w(const wchar_t *m) { (void)m; return push(); }
static void mark_ex(const nvtxEventAttributes_t *a) { (void)a; }
static void mark_a(const char *m) { (void)m; }
static void mark_w(const wchar_t *m) { (void)m; }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a)
{
    (void)a;
    return (nvtxRangeId_t)new_handle();
}
static nvtxRangeId_t start_a(const char *m) { (void)m; return (nvtxRangeId_t)new_handle(); }
static nvtxRangeId_t start_w(const wchar_t *m) { (void)m; return (nvtxRangeId_t)new_handle(); }
static void end(nvtxRangeId_t id) { (void)id; }
static void category_a(uint32_t id, const char *n) { (void)id; (void)n; }
static void category_w(uint32_t id, const wchar_t *n) { (void)id; (void)n; }

struct slot { unsigned id; NvtxFunctionPointer fn; };
#define SLOT(id, fn) { (id), (NvtxFunctionPointer)(fn) }

static const struct slot core_slots[] = {
    SLOT(NVTX_CBID_CORE_MarkEx, mark_ex),
    SLOT(NVTX_CBID_CORE_MarkA, mark_a),
    SLOT(NVTX_CBID_CORE_MarkW, mark_w),
    SLOT(NVTX_CBID_CORE_RangeStartEx, start_ex),
    SLOT(NVTX_CBID_CORE_RangeStartA, start_a),
    SLOT(NVTX_CBID_CORE_RangeStartW, start_w),
    SLOT(NVTX_CBID_CORE_RangeEnd, end),
    SLOT(NVTX_CBID_CORE_RangePushEx, push_ex),
    SLOT(NVTX_CBID_CORE_RangePushA, push_a),
    SLOT(NVTX_CBID_CORE_RangePushW, push_w),
    SLOT(NVTX_CBID_CORE_RangePop, pop),
    SLOT(NVTX_CBID_CORE_NameCategoryA, category_a),
    SLOT(NVTX_CBID_CORE_NameCategoryW, category_w),
};

static const struct slot core2_slots[] = {
    SLOT(NVTX_CBID_CORE2_DomainMarkEx, domain_mark_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangeStartEx, domain_start_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangeEnd, domain_end),
    SLOT(NVTX_CBID_CORE2_DomainRangePushEx, domain_push_ex),
    SLOT(NVTX_CBID_CORE2_DomainRangePop, domain_pop),
    SLOT(NVTX_CBID_CORE2_DomainNameCategoryA, domain_category_a),
    SLOT(NVTX_CBID_CORE2_DomainNameCategoryW, domain_category_w),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, register_string_a),
    SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, register_string_w),
    SLOT(NVTX_CBID_CORE2_DomainCreateA, domain_create_a),
    SLOT(NVTX_CBID_CORE2_DomainCreateW, domain_create_w),
    SLOT(NVTX_CBID_CORE2_DomainDestroy, domain_destroy),
};

/* The table is an array of pointers to NVTX's own function-pointer slots;
 * out_size is the highest valid id, which is smaller on older NVTX copies. */
static int fill(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                const struct slot *slots, unsigned n)
{
    NvtxFunctionTable table = 0;
    unsigned int size = 0;

    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table)
        return 0;
    for (unsigned i = 0; i < n; i++)
        if (slots[i].id <= size && table[slots[i].id])
            *table[slots[i].id] = slots[i].fn;
    return 1;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable);

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    const NvtxExportTableCallbacks *cb =
        (const NvtxExportTableCallbacks *)getExportTable(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb)
        return 0;
    return fill(cb, NVTX_CB_MODULE_CORE, core_slots, sizeof core_slots / sizeof *core_slots)
        && fill(cb, NVTX_CB_MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof *core2_slots);
}
