/*
 * What kname's two NVTX tools need of NVTX v3's injection interface, declared here so that no
 * NVTX header is needed to build them: show_ranges.c beside it (`kname run --show-ranges`, compiled
 * from the installed package on first use: this header is installed beside it) and
 * tests/support/nvtx_inject.c (the tests' capture, the benchmarks' null tool). The values and
 * layouts are NVTX's own (nvToolsExt.h, nvtxDetail/nvtxTypes.h); tests/native/test_nvtx_tool.py checks
 * them against NVTX's headers. Also what both tools do alike: the global domain's name, and a
 * wide string's text as UTF-8.
 *
 * A tool is a shared library that NVTX loads at a process's first NVTX call when
 * NVTX_INJECTION64_PATH names it: NVTX calls its InitializeInjectionNvtx2(get_export_table), and
 * the tool puts its functions in NVTX's slots through the callbacks export table.
 */
#ifndef KNAME_NVTX_TOOL_H
#define KNAME_NVTX_TOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <wchar.h>

/* ---- the injection interface (nvtxDetail/nvtxTypes.h) ---- */

typedef void (*nvtx_function)(void); /* NvtxFunctionPointer: cast to the slot's own type */
typedef nvtx_function **nvtx_function_table; /* pointers to NVTX's own function slots */

typedef struct {
    size_t struct_size;
    /* `size`: the highest valid slot id, smaller in older copies of NVTX. */
    int (*GetModuleFunctionTable)(unsigned int module, nvtx_function_table *table,
                                  unsigned int *size);
} nvtx_callbacks; /* NvtxExportTableCallbacks */

typedef const void *(*nvtx_get_export_table)(uint32_t export_table_id);

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, MODULE_CORE2 = 5 };
enum {
    CORE_MarkEx = 1, CORE_MarkA = 2, CORE_MarkW = 3,
    CORE_RangeStartEx = 4, CORE_RangeStartA = 5, CORE_RangeStartW = 6, CORE_RangeEnd = 7,
    CORE_RangePushEx = 8, CORE_RangePushA = 9, CORE_RangePushW = 10, CORE_RangePop = 11,
    CORE_NameCategoryA = 12, CORE_NameCategoryW = 13,
};
enum {
    CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx = 2, CORE2_DomainRangeEnd = 3,
    CORE2_DomainRangePushEx = 4, CORE2_DomainRangePop = 5, CORE2_DomainNameCategoryA = 8,
    CORE2_DomainNameCategoryW = 9, CORE2_DomainRegisterStringA = 10,
    CORE2_DomainRegisterStringW = 11, CORE2_DomainCreateA = 12, CORE2_DomainCreateW = 13,
    CORE2_DomainDestroy = 14,
};

/* ---- what the calls pass (nvToolsExt.h) ---- */

/* NVTX treats domain and string handles as opaque: a tool's point at these. */
struct domain { char *name; };
struct string { char *text; };

enum { MESSAGE_ASCII = 1, MESSAGE_UNICODE = 2, MESSAGE_REGISTERED = 3 };
enum { COLOR_ARGB = 1 };
enum { EVENT_ATTRIBUTES_VERSION = 3 }; /* NVTX_VERSION */

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    union { uint64_t u64; int64_t i64; double d; uint32_t u32; int32_t i32; float f; } payload;
    int32_t message_type;
    union { const char *ascii; const wchar_t *unicode; const struct string *registered; } message;
} event_attributes; /* nvtxEventAttributes_v2 */

/* ---- what both tools do alike ---- */

static const char GLOBAL[] = "<global>"; /* the domain of the global (non-domain) API */

/* wchar_t is UTF-32 on Linux; encode by hand so the locale does not matter. */
static inline char *utf8_from_wide(const wchar_t *w)
{
    size_t n = w ? wcslen(w) : 0;
    char *out = malloc(4 * n + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned)w[i];
        if (c < 0x80) {
            *p++ = (char)c;
        } else if (c < 0x800) {
            *p++ = (char)(0xC0 | c >> 6);
            *p++ = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *p++ = (char)(0xE0 | c >> 12);
            *p++ = (char)(0x80 | (c >> 6 & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        } else {
            *p++ = (char)(0xF0 | (c >> 18 & 0x07));
            *p++ = (char)(0x80 | (c >> 12 & 0x3F));
            *p++ = (char)(0x80 | (c >> 6 & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *p = '\0';
    return out;
}

#endif /* KNAME_NVTX_TOOL_H */
