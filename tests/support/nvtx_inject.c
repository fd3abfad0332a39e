/*
 * A tiny NVTX v3 injection library, for tests and benchmarks. Two modes, chosen
 * once, when NVTX initialises the library, by $KNAME_NVTX_LOG:
 *
 * - log mode (KNAME_NVTX_LOG names a file): every NVTX event the process makes
 *   is appended to that file, one tab-separated line per event. The tests read
 *   it to see what a profiler would see.
 * - null mode (KNAME_NVTX_LOG unset or empty): NVTX calls reach the tool, as
 *   under a profiler, but the tool does almost nothing: a per-thread depth
 *   counter for push/pop, distinct never-dereferenced handles from an atomic
 *   counter for domains, strings and ranges; no formatting, no I/O. The
 *   benchmarks use it: a real profiler also takes a timestamp and writes a
 *   record per event, so timings with it are a lower bound for "under a
 *   profiler".
 * If the log file cannot be opened, every slot is left empty (NVTX's own no-ops).
 *
 * NVTX loads it when NVTX_INJECTION64_PATH names it, at the first NVTX call.
 * Each copy of the header-only NVTX code in the process (every extension
 * module that includes nvToolsExt.h) calls InitializeInjectionNvtx2 once, so
 * initialisation must be idempotent and all state is process-global.
 *
 * Log line format: kind \t domain \t tid \t rest...
 *   domain   <name>     tid  create|destroy
 *   string   <domain>   tid  text
 *   push     <domain>   tid  message  category  0xAARRGGBB
 *   mark     <domain>   tid  message  category  0xAARRGGBB
 *   start    <domain>   tid  message  category  0xAARRGGBB  range_id
 *   pop      <domain>   tid
 *   end      <domain>   tid  range_id
 *   category <domain>   tid  id  name
 * The global (non-domain) API and the NULL domain log as "<global>".
 * Texts escape \ tab newline CR as \\ \t \n \r.
 *
 * The NVTX types it needs are kname's two NVTX tools' own declarations, kname/_show_ranges_c/nvtx_tool.h (the
 * other tool is kname/_show_ranges_c/show_ranges.c): no NVTX header is needed.
 * Build: cc -shared -fPIC -O2 -Wall -Wextra -I<kname's package folder> nvtx_inject.c
 *        -o libnvtx_inject.so -lpthread
 */
#define _GNU_SOURCE

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

#include "nvtx_tool.h"

enum mode { MODE_NULL, MODE_LOG, MODE_NONE };

static enum mode mode = MODE_NULL;
static int log_fd = -1;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_range_id = 1;

/* Read once per process: every copy of NVTX in it then gets the same mode. */
static void choose_mode(void)
{
    const char *path = getenv("KNAME_NVTX_LOG");
    if (!path || !*path)
        return;
    /* O_APPEND: forked children and several processes can share one log. */
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
        perror("nvtx_inject: KNAME_NVTX_LOG");
    mode = log_fd < 0 ? MODE_NONE : MODE_LOG;
}

static void put_escaped(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '\\': fputs("\\\\", f); break;
        case '\t': fputs("\\t", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        default: fputc(*s, f);
        }
    }
}

/* Writes one event line. Each %s argument is an escaped text; other
 * conversions in fmt are printed verbatim. The whole line goes out in a
 * single write() so lines from threads and processes never interleave. */
static void emit(const char *kind, const char *domain, const char *fmt, ...)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    va_list ap;

    if (log_fd < 0 || !(f = open_memstream(&buf, &len)))
        return;
    fprintf(f, "%s\t", kind);
    put_escaped(f, domain);
    fprintf(f, "\t%ld", (long)syscall(SYS_gettid));
    va_start(ap, fmt);
    for (const char *c = fmt; *c; c++) {
        if (*c != '%') {
            fputc(*c, f);
            continue;
        }
        switch (*++c) {
        case 's': put_escaped(f, va_arg(ap, const char *)); break;
        case 'u': fprintf(f, "%u", va_arg(ap, unsigned)); break;
        case 'x': fprintf(f, "0x%08X", va_arg(ap, unsigned)); break;
        case 'U': fprintf(f, "%llu", (unsigned long long)va_arg(ap, uint64_t)); break;
        }
    }
    va_end(ap);
    fputc('\n', f);
    fclose(f);

    pthread_mutex_lock(&log_lock);
    if (write(log_fd, buf, len) < 0)
        perror("nvtx_inject: write");
    pthread_mutex_unlock(&log_lock);
    free(buf);
}

static const char *domain_name(struct domain *d)
{
    return d ? d->name : GLOBAL;
}

/* Message text, or a malloc'd UTF-8 copy (stored in *owned) for wide text. */
static const char *message_text(const event_attributes *a, char **owned)
{
    *owned = NULL;
    if (!a)
        return "";
    switch (a->message_type) {
    case MESSAGE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case MESSAGE_REGISTERED:
        return a->message.registered ? a->message.registered->text : "";
    case MESSAGE_UNICODE:
        *owned = utf8_from_wide(a->message.unicode);
        return *owned ? *owned : "<unicode>";
    default: return "";
    }
}

static void emit_event(const char *kind, const char *domain,
                       const event_attributes *a)
{
    char *owned;
    const char *msg = message_text(a, &owned);
    unsigned color = (a && a->color_type == COLOR_ARGB) ? a->color : 0;
    emit(kind, domain, "\t%s\t%u\t%x", msg, a ? a->category : 0u, color);
    free(owned);
}

static uint64_t emit_start(const char *domain, const event_attributes *a)
{
    char *owned;
    const char *msg = message_text(a, &owned);
    unsigned color = (a && a->color_type == COLOR_ARGB) ? a->color : 0;
    uint64_t id = __atomic_fetch_add(&next_range_id, 1, __ATOMIC_RELAXED);
    emit("start", domain, "\t%s\t%u\t%x\t%U", msg, a ? a->category : 0u, color, id);
    free(owned);
    return id;
}

/* Wraps a plain string as ASCII event attributes (for the A and W calls). */
static event_attributes ascii_attrs(const char *msg)
{
    event_attributes a;
    memset(&a, 0, sizeof a);
    a.version = EVENT_ATTRIBUTES_VERSION;
    a.size = sizeof a;
    a.message_type = MESSAGE_ASCII;
    a.message.ascii = msg;
    return a;
}

/* ---- CORE2: the domain API ---- */

static struct domain *new_domain(char *name)
{
    struct domain *d = malloc(sizeof *d);
    if (!d || !name) {
        free(d);
        free(name);
        return NULL;
    }
    d->name = name;
    emit("domain", name, "\tcreate");
    return d;
}

static struct domain *domain_create_a(const char *name)
{
    return new_domain(strdup(name ? name : ""));
}

static struct domain *domain_create_w(const wchar_t *name)
{
    return new_domain(utf8_from_wide(name));
}

static void domain_destroy(struct domain *d)
{
    if (!d)
        return;
    emit("domain", d->name, "\tdestroy");
    /* The name is kept: string handles and late events may still refer to it. */
}

static struct string *new_string(struct domain *d, char *text)
{
    struct string *s = malloc(sizeof *s);
    if (!s || !text) {
        free(s);
        free(text);
        return NULL;
    }
    s->text = text;
    emit("string", domain_name(d), "\t%s", text);
    return s;
}

static struct string *register_string_a(struct domain *d, const char *text)
{
    return new_string(d, strdup(text ? text : ""));
}

static struct string *register_string_w(struct domain *d, const wchar_t *text)
{
    return new_string(d, utf8_from_wide(text));
}

static void domain_mark_ex(struct domain *d, const event_attributes *a)
{
    emit_event("mark", domain_name(d), a);
}

static int domain_push_ex(struct domain *d, const event_attributes *a)
{
    emit_event("push", domain_name(d), a);
    return 0; /* we do not track depth: the Python side analyses the log */
}

static int domain_pop(struct domain *d)
{
    emit("pop", domain_name(d), "");
    return 0;
}

static uint64_t domain_start_ex(struct domain *d, const event_attributes *a)
{
    return emit_start(domain_name(d), a);
}

static void domain_end(struct domain *d, uint64_t id)
{
    emit("end", domain_name(d), "\t%U", (uint64_t)id);
}

static void domain_category_a(struct domain *d, uint32_t id, const char *name)
{
    emit("category", domain_name(d), "\t%u\t%s", (unsigned)id, name);
}

static void domain_category_w(struct domain *d, uint32_t id, const wchar_t *name)
{
    char *text = utf8_from_wide(name);
    domain_category_a(d, id, text ? text : "<unicode>");
    free(text);
}

/* ---- CORE: the global API, logged as domain "<global>" ---- */

static void mark_ex(const event_attributes *a) { domain_mark_ex(NULL, a); }
static int push_ex(const event_attributes *a) { return domain_push_ex(NULL, a); }
static int pop(void) { return domain_pop(NULL); }
static uint64_t start_ex(const event_attributes *a) { return domain_start_ex(NULL, a); }
static void end(uint64_t id) { domain_end(NULL, id); }

static void mark_a(const char *msg)
{
    event_attributes a = ascii_attrs(msg);
    mark_ex(&a);
}

static int push_a(const char *msg)
{
    event_attributes a = ascii_attrs(msg);
    return push_ex(&a);
}

static uint64_t start_a(const char *msg)
{
    event_attributes a = ascii_attrs(msg);
    return start_ex(&a);
}

static void mark_w(const wchar_t *msg)
{
    char *text = utf8_from_wide(msg);
    mark_a(text ? text : "<unicode>");
    free(text);
}

static int push_w(const wchar_t *msg)
{
    char *text = utf8_from_wide(msg);
    int r = push_a(text ? text : "<unicode>");
    free(text);
    return r;
}

static uint64_t start_w(const wchar_t *msg)
{
    char *text = utf8_from_wide(msg);
    uint64_t r = start_a(text ? text : "<unicode>");
    free(text);
    return r;
}

static void category_a(uint32_t id, const char *name) { domain_category_a(NULL, id, name); }
static void category_w(uint32_t id, const wchar_t *name) { domain_category_w(NULL, id, name); }

/* ---- null mode: NVTX calls reach the tool, which does almost nothing ---- */

static __thread int depth;
static uintptr_t next_handle = 1;

/* Aligned, non-NULL, distinct; NVTX and its callers treat it as opaque. */
static uintptr_t new_handle(void)
{
    return __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED) << 4;
}

/* NVTX's return values: the 0-based level of the range pushed or popped, <0 on error. */
static int null_push(void) { return depth++; }
static int null_pop(void) { return depth > 0 ? --depth : -1; }

static int null_domain_push_ex(struct domain *d, const event_attributes *a)
{
    (void)d; (void)a;
    return null_push();
}
static int null_domain_pop(struct domain *d) { (void)d; return null_pop(); }
static void null_domain_mark_ex(struct domain *d, const event_attributes *a)
{
    (void)d; (void)a;
}
static uint64_t null_domain_start_ex(struct domain *d, const event_attributes *a)
{
    (void)d; (void)a;
    return (uint64_t)new_handle();
}
static void null_domain_end(struct domain *d, uint64_t id) { (void)d; (void)id; }
static void null_domain_category_a(struct domain *d, uint32_t id, const char *name)
{
    (void)d; (void)id; (void)name;
}
static void null_domain_category_w(struct domain *d, uint32_t id, const wchar_t *name)
{
    (void)d; (void)id; (void)name;
}
static struct string *null_register_string_a(struct domain *d, const char *text)
{
    (void)d; (void)text;
    return (struct string *)new_handle();
}
static struct string *null_register_string_w(struct domain *d, const wchar_t *text)
{
    (void)d; (void)text;
    return (struct string *)new_handle();
}
static struct domain *null_domain_create_a(const char *name)
{
    (void)name;
    return (struct domain *)new_handle();
}
static struct domain *null_domain_create_w(const wchar_t *name)
{
    (void)name;
    return (struct domain *)new_handle();
}
static void null_domain_destroy(struct domain *d) { (void)d; }

static int null_push_ex(const event_attributes *a) { (void)a; return null_push(); }
static int null_push_a(const char *msg) { (void)msg; return null_push(); }
static int null_push_w(const wchar_t *msg) { (void)msg; return null_push(); }
static void null_mark_ex(const event_attributes *a) { (void)a; }
static void null_mark_a(const char *msg) { (void)msg; }
static void null_mark_w(const wchar_t *msg) { (void)msg; }
static uint64_t null_start_ex(const event_attributes *a)
{
    (void)a;
    return (uint64_t)new_handle();
}
static uint64_t null_start_a(const char *msg)
{
    (void)msg;
    return (uint64_t)new_handle();
}
static uint64_t null_start_w(const wchar_t *msg)
{
    (void)msg;
    return (uint64_t)new_handle();
}
static void null_end(uint64_t id) { (void)id; }
static void null_category_a(uint32_t id, const char *name) { (void)id; (void)name; }
static void null_category_w(uint32_t id, const wchar_t *name) { (void)id; (void)name; }

/* ---- registration ---- */

/* Each NVTX slot with its function in log mode and in null mode. */
struct slot { unsigned id; nvtx_function log, null; };
#define SLOT(id, fn) { (id), (nvtx_function)(fn), (nvtx_function)(null_##fn) }

static const struct slot core_slots[] = {
    SLOT(CORE_MarkEx, mark_ex),
    SLOT(CORE_MarkA, mark_a),
    SLOT(CORE_MarkW, mark_w),
    SLOT(CORE_RangeStartEx, start_ex),
    SLOT(CORE_RangeStartA, start_a),
    SLOT(CORE_RangeStartW, start_w),
    SLOT(CORE_RangeEnd, end),
    SLOT(CORE_RangePushEx, push_ex),
    SLOT(CORE_RangePushA, push_a),
    SLOT(CORE_RangePushW, push_w),
    SLOT(CORE_RangePop, pop),
    SLOT(CORE_NameCategoryA, category_a),
    SLOT(CORE_NameCategoryW, category_w),
};

static const struct slot core2_slots[] = {
    SLOT(CORE2_DomainMarkEx, domain_mark_ex),
    SLOT(CORE2_DomainRangeStartEx, domain_start_ex),
    SLOT(CORE2_DomainRangeEnd, domain_end),
    SLOT(CORE2_DomainRangePushEx, domain_push_ex),
    SLOT(CORE2_DomainRangePop, domain_pop),
    SLOT(CORE2_DomainNameCategoryA, domain_category_a),
    SLOT(CORE2_DomainNameCategoryW, domain_category_w),
    SLOT(CORE2_DomainRegisterStringA, register_string_a),
    SLOT(CORE2_DomainRegisterStringW, register_string_w),
    SLOT(CORE2_DomainCreateA, domain_create_a),
    SLOT(CORE2_DomainCreateW, domain_create_w),
    SLOT(CORE2_DomainDestroy, domain_destroy),
};

/* The table is an array of pointers to NVTX's own function-pointer slots;
 * out_size is the highest valid id, which is smaller on older NVTX copies. */
static int fill(const nvtx_callbacks *cb, unsigned int module,
                const struct slot *slots, size_t n)
{
    nvtx_function_table table = NULL;
    unsigned int size = 0;

    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id <= size && table[slots[i].id])
            *table[slots[i].id] = mode == MODE_LOG ? slots[i].log : slots[i].null;
    return 1;
}

int InitializeInjectionNvtx2(nvtx_get_export_table getExportTable);

int InitializeInjectionNvtx2(nvtx_get_export_table getExportTable)
{
    const nvtx_callbacks *cb;

    pthread_once(&mode_once, choose_mode);
    /* The log cannot be written: leave every slot empty (NVTX turns them into
     * no-ops) but report success, since failure would make NVTX unload us. */
    if (mode == MODE_NONE)
        return 1;
    cb = (const nvtx_callbacks *)getExportTable(ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb)
        return 0;
    return fill(cb, MODULE_CORE, core_slots, sizeof core_slots / sizeof *core_slots)
        && fill(cb, MODULE_CORE2, core2_slots, sizeof core2_slots / sizeof *core2_slots);
}
