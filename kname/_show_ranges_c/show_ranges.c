/*
 * kname's NVTX viewer (`kname run --show-ranges`): an NVTX tool, loaded by NVTX itself through
 * its injection interface (NVTX_INJECTION64_PATH, as Nsight's tools are), that appends one line
 * per range event to the file named by $_KNAME_RANGES_LOG. kname.show_ranges compiles it on
 * demand, runs the program under it and prints what the log holds.
 *
 * The few NVTX v3 types it needs are declared in nvtx_tool.h, installed beside it (the tests'
 * NVTX tool shares it), so no NVTX headers are needed to build it:
 *     cc -shared -fPIC -O2 show_ranges.c -o libkname_show_ranges.so
 *
 * Lines (fields separated by tabs; texts escape \ tab newline CR as \\ \t \n \r):
 *     init   pid
 *     push   pid  tid  domain  message
 *     pop    pid  tid  domain
 *     start  pid  tid  domain  message  id
 *     end    pid  tid  domain  id
 * The global (non-domain) API logs as domain "<global>". Each line is one write() on a file
 * opened with O_APPEND, so threads, forked children and other processes never interleave.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

#include "nvtx_tool.h"

/* ---- the log ---- */

static int log_fd = -1;
static uint64_t next_range_id = 1;

/* A growing buffer for one line. */
struct line { char *text; size_t used, size; };

static void put(struct line *l, const char *s, size_t n)
{
    if (!l->text)
        return;
    if (l->used + n + 1 > l->size) {
        size_t size = 2 * (l->used + n + 1);
        char *grown = realloc(l->text, size);
        if (!grown) {
            free(l->text);
            l->text = NULL;
            return;
        }
        l->text = grown;
        l->size = size;
    }
    memcpy(l->text + l->used, s, n);
    l->used += n;
}

static void put_field(struct line *l, const char *s)
{
    put(l, "\t", 1);
    for (; s && *s; s++) {
        switch (*s) {
        case '\\': put(l, "\\\\", 2); break;
        case '\t': put(l, "\\t", 2); break;
        case '\n': put(l, "\\n", 2); break;
        case '\r': put(l, "\\r", 2); break;
        default: put(l, s, 1);
        }
    }
}

static void put_number(struct line *l, unsigned long long n)
{
    char digits[24], *p = digits + sizeof digits;
    *--p = '\0';
    do
        *--p = (char)('0' + n % 10);
    while (n /= 10);
    put_field(l, p);
}

static struct line begin(const char *kind, const char *domain)
{
    struct line l = { malloc(256), 0, 256 };
    put(&l, kind, strlen(kind));
    put_number(&l, (unsigned long long)getpid());
    put_number(&l, (unsigned long long)syscall(SYS_gettid));
    put_field(&l, domain);
    return l;
}

static void finish(struct line *l)
{
    put(l, "\n", 1);
    if (l->text && log_fd >= 0 && write(log_fd, l->text, l->used) < 0) {
        /* Nowhere to say it: the program must run on regardless. */
    }
    free(l->text);
}

static const char *domain_name(const struct domain *d)
{
    return d && d->name ? d->name : GLOBAL;
}

static void log_range(const char *kind, const struct domain *d, const event_attributes *a,
                      const char *text, uint64_t id)
{
    char *owned = NULL;
    struct line l = begin(kind, domain_name(d));
    if (!text && a) {
        switch (a->message_type) {
        case MESSAGE_ASCII: text = a->message.ascii; break;
        case MESSAGE_REGISTERED: text = a->message.registered ? a->message.registered->text : ""; break;
        case MESSAGE_UNICODE: text = owned = utf8_from_wide(a->message.unicode); break;
        }
    }
    put_field(&l, text ? text : "");
    if (id)
        put_number(&l, id);
    finish(&l);
    free(owned);
}

static void log_end(const char *kind, const struct domain *d, uint64_t id)
{
    struct line l = begin(kind, domain_name(d));
    if (id)
        put_number(&l, id);
    finish(&l);
}

/* ---- the calls NVTX forwards ---- */

static int domain_push_ex(const struct domain *d, const event_attributes *a)
{
    log_range("push", d, a, NULL, 0);
    return 0;
}

static int domain_pop(const struct domain *d)
{
    log_end("pop", d, 0);
    return 0;
}

static uint64_t domain_start_ex(const struct domain *d, const event_attributes *a)
{
    uint64_t id = __atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    log_range("start", d, a, NULL, id);
    return id;
}

static void domain_end(const struct domain *d, uint64_t id) { log_end("end", d, id); }

static int push_ex(const event_attributes *a) { return domain_push_ex(NULL, a); }
static int pop(void) { return domain_pop(NULL); }
static uint64_t start_ex(const event_attributes *a) { return domain_start_ex(NULL, a); }
static void end(uint64_t id) { domain_end(NULL, id); }

static int push_a(const char *message)
{
    log_range("push", NULL, NULL, message, 0);
    return 0;
}

static int push_w(const wchar_t *message)
{
    char *text = utf8_from_wide(message);
    log_range("push", NULL, NULL, text, 0);
    free(text);
    return 0;
}

static uint64_t start_a(const char *message)
{
    uint64_t id = __atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    log_range("start", NULL, NULL, message, id);
    return id;
}

static uint64_t start_w(const wchar_t *message)
{
    char *text = utf8_from_wide(message);
    uint64_t id = start_a(text);
    free(text);
    return id;
}

static struct domain *new_domain(char *name)
{
    struct domain *d = malloc(sizeof *d);
    if (d)
        d->name = name;
    return d;
}

static struct domain *domain_create_a(const char *name) { return new_domain(strdup(name ? name : "")); }
static struct domain *domain_create_w(const wchar_t *name) { return new_domain(utf8_from_wide(name)); }

static struct string *new_string(char *text)
{
    struct string *s = malloc(sizeof *s);
    if (s)
        s->text = text;
    return s;
}

static struct string *register_string_a(const struct domain *d, const char *text)
{
    (void)d;
    return new_string(strdup(text ? text : ""));
}

static struct string *register_string_w(const struct domain *d, const wchar_t *text)
{
    (void)d;
    return new_string(utf8_from_wide(text));
}

/* ---- registration ---- */

struct slot { unsigned id; nvtx_function function; };
#define SLOT(id, f) { (id), (nvtx_function)(f) }

static const struct slot core_slots[] = {
    SLOT(CORE_RangeStartEx, start_ex), SLOT(CORE_RangeStartA, start_a),
    SLOT(CORE_RangeStartW, start_w), SLOT(CORE_RangeEnd, end),
    SLOT(CORE_RangePushEx, push_ex), SLOT(CORE_RangePushA, push_a),
    SLOT(CORE_RangePushW, push_w), SLOT(CORE_RangePop, pop),
};

static const struct slot core2_slots[] = {
    SLOT(CORE2_DomainRangeStartEx, domain_start_ex), SLOT(CORE2_DomainRangeEnd, domain_end),
    SLOT(CORE2_DomainRangePushEx, domain_push_ex), SLOT(CORE2_DomainRangePop, domain_pop),
    SLOT(CORE2_DomainRegisterStringA, register_string_a),
    SLOT(CORE2_DomainRegisterStringW, register_string_w),
    SLOT(CORE2_DomainCreateA, domain_create_a), SLOT(CORE2_DomainCreateW, domain_create_w),
};

/* `size` is the highest valid slot id, smaller in older copies of NVTX. */
static int fill(const nvtx_callbacks *callbacks, unsigned int module, const struct slot *slots,
                size_t n)
{
    nvtx_function_table table = NULL;
    unsigned int size = 0;

    if (!callbacks->GetModuleFunctionTable(module, &table, &size) || !table)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id <= size && table[slots[i].id])
            *table[slots[i].id] = slots[i].function;
    return 1;
}

int InitializeInjectionNvtx2(nvtx_get_export_table get_export_table);

/* Called by each copy of NVTX in the process (every module built with its headers). */
int InitializeInjectionNvtx2(nvtx_get_export_table get_export_table)
{
    const nvtx_callbacks *callbacks;
    const char *path = getenv("_KNAME_RANGES_LOG");

    if (log_fd < 0 && path && *path)
        log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0)
        return 1; /* nothing to log to: leave the slots empty, NVTX makes them no-ops */
    {
        struct line l = { malloc(64), 0, 64 };
        put(&l, "init", 4);
        put_number(&l, (unsigned long long)getpid());
        finish(&l);
    }
    callbacks = (const nvtx_callbacks *)get_export_table(ETID_CALLBACKS);
    if (!callbacks || callbacks->struct_size < sizeof *callbacks)
        return 0;
    return fill(callbacks, MODULE_CORE, core_slots, sizeof core_slots / sizeof *core_slots)
        && fill(callbacks, MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof *core2_slots);
}
