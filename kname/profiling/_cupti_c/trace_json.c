/*
 * The Chrome trace-event JSON of the trace kname._native_cupti keeps (trace.c), written in one
 * pass, event by event as kname/profiling/trace.py writes it (its twin: the same keys in the same
 * order, the same numbers as Python's json module prints them), with a Python call per distinct
 * name only (its JSON form, a kernel's display name), never per record.
 */
#include "profiling/_cupti_c/recorder.h"

#include <stdlib.h>
#include <string.h>

#define GPU_PID_BASE ((uint64_t)1 << 30) /* trace.py's: GPU device d is process BASE + d */
/* Below this many ns, ns / 1000 printed as an exact decimal is what Python's
 * repr(round(ns / 1000, 3)) prints: a double's spacing there is under 0.001. */
#define US_EXACT (((uint64_t)1 << 43) * 1000)

/* ------------------------------------------------------------------ text */

typedef struct {
    char *data;
    size_t length, room;
    int failed; /* no memory */
} Text;

/* Room for `n` more bytes; 0 (failed, for good) when there is no memory. */
static int
text_room(Text *t, size_t n)
{
    if (t->failed)
        return 0;
    size_t room = t->room ? t->room : 1 << 16;
    while (room < t->length + n)
        room *= 2;
    char *grown = realloc(t->data, room);
    if (grown == NULL) {
        t->failed = 1;
        return 0;
    }
    t->data = grown;
    t->room = room;
    return 1;
}

static inline void
text_add(Text *t, const char *s, size_t n)
{
    if (t->length + n > t->room && !text_room(t, n))
        return;
    memcpy(t->data + t->length, s, n);
    t->length += n;
}

#define ADD(t, literal) text_add((t), literal, sizeof(literal) - 1)

/* `value` in decimal at the end of `buffer` (of 20 bytes at least): where its digits start.
 * (snprintf costs several times more, and a trace prints millions of numbers.) */
static char *
decimal(uint64_t value, char *end)
{
    char *at = end;
    do {
        *--at = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    return at;
}

static void
text_u64(Text *t, uint64_t value)
{
    char digits[24];
    char *at = decimal(value, digits + sizeof digits);
    text_add(t, at, (size_t)(digits + sizeof digits - at));
}

/* ns in µs as trace.py's _us gives it and json prints it: repr(round(ns / 1000, 3)). */
static void
text_us(Text *t, uint64_t ns)
{
    char digits[40];
    char *end = digits + 24, *at = decimal(ns / 1000, end);
    uint64_t part = ns % 1000;
    *end++ = '.';
    if (part == 0)
        *end++ = '0';
    else {
        end[0] = (char)('0' + part / 100);
        end[1] = (char)('0' + part / 10 % 10);
        end[2] = (char)('0' + part % 10);
        end += 3;
        while (end[-1] == '0') /* the exact decimal, without trailing zeros */
            end--;
    }
    *end = '\0';
    int n = (int)(end - at);
    if (ns < US_EXACT) {
        text_add(t, at, (size_t)n);
        return;
    }
    /* Past that (a trace of months), Python's own steps, with the GIL (see write_events):
     * the quotient correctly rounded, rounded to 3 decimals, and its repr. */
    char *text = NULL;
    double value = PyOS_string_to_double(at, NULL, NULL);
    if (value != -1.0 || !PyErr_Occurred()) {
        char *rounded = PyOS_double_to_string(value, 'f', 3, 0, NULL);
        if (rounded != NULL) {
            value = PyOS_string_to_double(rounded, NULL, NULL);
            PyMem_Free(rounded);
            text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        }
    }
    if (text == NULL) {
        PyErr_Clear();
        t->failed = 1;
        return;
    }
    text_add(t, text, strlen(text));
    PyMem_Free(text);
}

/* ------------------------------------------------------------------ names, as JSON strings */

typedef struct {
    char *text; /* a JSON string, its quotes included */
    size_t length;
} Piece;

typedef struct {
    Piece *items;
    size_t count, room;
    Index64 index; /* key -> item */
} Pieces;

static void
pieces_free(Pieces *p)
{
    for (size_t i = 0; i < p->count; i++)
        free(p->items[i].text);
    free(p->items);
    index_free(&p->index);
    memset(p, 0, sizeof *p);
}

/* `text` as a JSON string (escape(text), json's own encoder, in UTF-8): a new Piece; 0 with an
 * error. Lone surrogates pass, as json.dumps passes them. */
static int
piece_of(PyObject *escape, PyObject *text, Piece *piece)
{
    PyObject *escaped = PyObject_CallOneArg(escape, text);
    if (escaped == NULL)
        return 0;
    PyObject *bytes = PyUnicode_Check(escaped)
                          ? PyUnicode_AsEncodedString(escaped, "utf-8", "surrogatepass")
                          : NULL;
    if (bytes == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "trace_json: escape() must give a str");
    Py_DECREF(escaped);
    if (bytes == NULL)
        return 0;
    piece->length = (size_t)PyBytes_GET_SIZE(bytes);
    piece->text = malloc(piece->length + 1);
    if (piece->text != NULL)
        memcpy(piece->text, PyBytes_AS_STRING(bytes), piece->length);
    Py_DECREF(bytes);
    if (piece->text == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

/* The piece under `key`, made from text() (a new reference, NULL with an error) where new. */
static const Piece *
piece_for(Pieces *p, uint64_t key, PyObject *escape, PyObject *text)
{
    int64_t at = index_get(&p->index, key);
    if (at >= 0) {
        Py_XDECREF(text);
        return &p->items[at];
    }
    if (text == NULL)
        return NULL;
    Piece piece = {NULL, 0};
    int made = piece_of(escape, text, &piece);
    Py_DECREF(text);
    if (!made)
        return NULL;
    if (!grow((void **)&p->items, &p->room, p->count, sizeof *p->items)
        || !index_set(&p->index, key, (uint32_t)p->count)) {
        free(piece.text);
        PyErr_NoMemory();
        return NULL;
    }
    p->items[p->count] = piece;
    return &p->items[p->count++];
}

static const Piece *
piece_at(const Pieces *p, uint64_t key)
{
    return &p->items[index_get(&p->index, key)];
}

/* What one trace needs beyond the records: each name once, as JSON. */
typedef struct {
    Pieces sites;           /* a site (the recorder's kept name) -> its JSON */
    Pieces kinds, displays; /* a GPU record's work (join.h's WORK_*) -> its name, shown name */
    Pieces apis;            /* an api index -> its name, or "launch" */
    Piece program, version; /* the program's command line, kname's version */
    const void *no_frame, *unattributed;
    uint64_t pid;
} TraceNames;

static void
names_clear(TraceNames *n)
{
    pieces_free(&n->sites);
    pieces_free(&n->kinds);
    pieces_free(&n->displays);
    pieces_free(&n->apis);
    free(n->program.text);
    free(n->version.text);
}

static inline const void *
site_of_launch(const TraceNames *n, const Launch *launch)
{
    return launch->site != NULL ? launch->site : n->no_frame;
}

static inline const void *
site_of_node(const TraceNames *n, const NodeEvent *e)
{
    return e->site != NULL ? e->site : n->no_frame;
}

static int
site_piece(TraceNames *n, PyObject *escape, const void *site)
{
    return piece_for(&n->sites, (uint64_t)(uintptr_t)site, escape,
                     Py_NewRef((PyObject *)site))
           != NULL;
}

/* Every name the records use, as JSON, asked of Python once each. 0 with an error. */
static int
gather_names(Recorder *r, const TraceLog *log, TraceNames *n, PyObject *escape,
             PyObject *display_name, PyObject *memcpy_name)
{
    if (!site_piece(n, escape, n->no_frame) || !site_piece(n, escape, n->unattributed))
        return 0;
    for (size_t i = 0; i < log->launch_count; i++) {
        if (!site_piece(n, escape, site_of_launch(n, &log->launches[i])))
            return 0;
    }
    for (size_t i = 0; i < log->node_count; i++) {
        if (log->nodes[i].event == NODE_CREATED
            && !site_piece(n, escape, site_of_node(n, &log->nodes[i])))
            return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(r->api_names); i++) {
        PyObject *api = PyTuple_GET_ITEM(r->api_names, i); /* `api or "launch"` */
        PyObject *shown = PyUnicode_GET_LENGTH(api) ? Py_NewRef(api)
                                                    : PyUnicode_FromString("launch");
        if (piece_for(&n->apis, (uint64_t)i, escape, shown) == NULL)
            return 0;
    }
    for (size_t i = 0; i < log->work_count; i++) {
        const GpuRecord *g = &log->work[i];
        if (g->kind == GPU_EXTERNAL)
            continue;
        uint32_t work = work_of(g);
        if (index_get(&n->kinds.index, work) >= 0)
            continue;
        PyObject *name = g->kind == GPU_KERNEL   ? kernel_name(r, g->detail)
                         : g->kind == GPU_MEMCPY ? copy_name(r, memcpy_name, g->detail)
                                                 : Py_NewRef(str_memset_name);
        if (name == NULL)
            return 0;
        PyObject *shown = PyObject_CallOneArg(display_name, name);
        int made = piece_for(&n->kinds, work, escape, Py_NewRef(name)) != NULL
                   && piece_for(&n->displays, work, escape, shown) != NULL;
        Py_DECREF(name);
        if (!made)
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ the events */

typedef struct {
    uint64_t start;
    uint32_t position;
} Timed;

static int
by_start(const void *a, const void *b)
{
    const Timed *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->position < y->position ? -1 : x->position > y->position;
}

static int
by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void
add_piece(Text *t, const Piece *p)
{
    text_add(t, p->text, p->length);
}

/* A piece's text without its closing quote, or without its opening one. */
static void
add_opening(Text *t, const Piece *p)
{
    text_add(t, p->text, p->length - 1);
}

static void
add_closing(Text *t, const Piece *p)
{
    text_add(t, p->text + 1, p->length - 1);
}

/* A piece's text without its quotes. */
static void
add_inner(Text *t, const Piece *p)
{
    text_add(t, p->text + 1, p->length - 2);
}

static void
meta_event(Text *t, const char *name, uint64_t pid, uint64_t tid)
{
    ADD(t, "{\"ph\":\"M\",\"name\":\"");
    text_add(t, name, strlen(name));
    ADD(t, "\",\"pid\":");
    text_u64(t, pid);
    ADD(t, ",\"tid\":");
    text_u64(t, tid);
    ADD(t, ",\"args\":{");
}

/* The indexes a trace is written with: launches by correlation id, threads' tracks, GPU
 * tracks, graph nodes. */
typedef struct {
    Index64 site_launch;  /* correlation id -> the last launch with it */
    Index64 timed_launch; /* the same, among timed launches (the flows' start) */
    Index64 track;        /* thread -> its track number */
    Timed *timed;         /* timed launches, by start */
    size_t timed_count;
    uint64_t *gpu_tracks; /* device << 32 | stream, sorted, each once */
    size_t gpu_track_count;
    GraphNodes nodes;
    uint64_t origin;
} Tables;

static void
tables_free(Tables *x)
{
    index_free(&x->site_launch);
    index_free(&x->timed_launch);
    index_free(&x->track);
    free(x->timed);
    free(x->gpu_tracks);
    graph_nodes_free(&x->nodes);
}

static int
make_tables(const TraceLog *log, const TraceNames *n, Tables *x)
{
    memset(x, 0, sizeof *x);
    x->timed = malloc((log->launch_count + 1) * sizeof *x->timed);
    x->gpu_tracks = malloc((log->work_count + 1) * sizeof *x->gpu_tracks);
    if (x->timed == NULL || x->gpu_tracks == NULL)
        return 0;
    int first = 1;
    for (size_t i = 0; i < log->launch_count; i++) {
        const Launch *l = &log->launches[i];
        if (!index_set(&x->site_launch, l->correlation_id, (uint32_t)i))
            return 0;
        if (l->start == 0)
            continue;
        if (!index_set(&x->timed_launch, l->correlation_id, (uint32_t)i))
            return 0;
        x->timed[x->timed_count++] = (Timed){l->start, (uint32_t)i};
        if (first || l->start < x->origin)
            x->origin = l->start;
        first = 0;
    }
    for (size_t i = 0; i < log->work_count; i++) {
        const GpuRecord *g = &log->work[i];
        if (g->kind == GPU_EXTERNAL || g->start == 0)
            continue;
        x->gpu_tracks[x->gpu_track_count++] = (uint64_t)g->device << 32 | g->stream;
        if (first || g->start < x->origin)
            x->origin = g->start;
        first = 0;
    }
    qsort(x->timed, x->timed_count, sizeof *x->timed, by_start);
    for (size_t i = 0; i < x->timed_count; i++) {
        unsigned long thread = log->launches[x->timed[i].position].thread;
        if (index_get(&x->track, thread) < 0
            && !index_set(&x->track, thread, (uint32_t)x->track.count + 1))
            return 0;
    }
    qsort(x->gpu_tracks, x->gpu_track_count, sizeof *x->gpu_tracks, by_value);
    size_t unique = 0;
    for (size_t i = 0; i < x->gpu_track_count; i++) {
        if (unique == 0 || x->gpu_tracks[unique - 1] != x->gpu_tracks[i])
            x->gpu_tracks[unique++] = x->gpu_tracks[i];
    }
    x->gpu_track_count = unique;
    /* join.replay_join's table: every event kept, destroyed nodes too. */
    x->nodes.max_nodes = x->nodes.recent_nodes = (Py_ssize_t)log->node_count + 1;
    for (size_t i = 0; i < log->node_count; i++)
        graph_nodes_add(&x->nodes, &log->nodes[i], n->no_frame);
    return !x->nodes.no_memory;
}

static inline uint64_t
duration(uint64_t start, uint64_t end)
{
    return end > start ? end - start : 0;
}

/* Every value the trace prints in µs is below US_EXACT: no Python needed to print them. */
static int
exact_everywhere(const TraceLog *log, uint64_t origin)
{
    for (size_t i = 0; i < log->launch_count; i++) {
        const Launch *l = &log->launches[i];
        if (l->start && (l->start - origin >= US_EXACT || duration(l->start, l->end) >= US_EXACT))
            return 0;
    }
    for (size_t i = 0; i < log->work_count; i++) {
        const GpuRecord *g = &log->work[i];
        if (g->start && (g->start - origin >= US_EXACT || duration(g->start, g->end) >= US_EXACT))
            return 0;
    }
    return 1;
}

static void
track_names(Text *t, const TraceLog *log, const Tables *x, const TraceNames *n)
{
    meta_event(t, "process_name", n->pid, 0);
    ADD(t, "\"name\":\"CPU: ");
    add_inner(t, &n->program);
    ADD(t, " (pid ");
    text_u64(t, n->pid);
    ADD(t, ")\"}},");
    meta_event(t, "process_sort_index", n->pid, 0);
    ADD(t, "\"sort_index\":0}}");
    uint64_t track = 0;
    for (size_t i = 0; i < x->timed_count; i++) {
        unsigned long thread = log->launches[x->timed[i].position].thread;
        if ((uint64_t)index_get(&x->track, thread) != track + 1)
            continue; /* not the first launch of the next track */
        track++;
        ADD(t, ",");
        meta_event(t, "thread_name", n->pid, track);
        ADD(t, "\"name\":\"thread ");
        text_u64(t, track);
        ADD(t, " (");
        text_u64(t, thread);
        ADD(t, ")\"}}");
    }
    uint64_t previous = UINT64_MAX;
    for (size_t i = 0; i < x->gpu_track_count; i++) {
        uint64_t device = x->gpu_tracks[i] >> 32;
        if (device == previous)
            continue;
        previous = device;
        ADD(t, ",");
        meta_event(t, "process_name", GPU_PID_BASE + device, 0);
        ADD(t, "\"name\":\"GPU ");
        text_u64(t, device);
        ADD(t, "\"}},");
        meta_event(t, "process_sort_index", GPU_PID_BASE + device, 0);
        ADD(t, "\"sort_index\":");
        text_u64(t, 1 + device);
        ADD(t, "}}");
    }
    for (size_t i = 0; i < x->gpu_track_count; i++) {
        uint64_t device = x->gpu_tracks[i] >> 32, stream = x->gpu_tracks[i] & 0xffffffffu;
        ADD(t, ",");
        meta_event(t, "thread_name", GPU_PID_BASE + device, stream);
        ADD(t, "\"name\":\"stream ");
        text_u64(t, stream);
        ADD(t, "\"}}");
    }
}

static void
launch_event(Text *t, const Launch *l, const Tables *x, const TraceNames *n)
{
    ADD(t, ",{\"ph\":\"X\",\"cat\":\"launch\",\"name\":");
    add_piece(t, piece_at(&n->apis, l->api));
    ADD(t, ",\"pid\":");
    text_u64(t, n->pid);
    ADD(t, ",\"tid\":");
    text_u64(t, (uint64_t)index_get(&x->track, l->thread));
    ADD(t, ",\"ts\":");
    text_us(t, l->start - x->origin);
    ADD(t, ",\"dur\":");
    text_us(t, duration(l->start, l->end));
    ADD(t, ",\"args\":{\"site\":");
    add_piece(t, piece_at(&n->sites, (uint64_t)(uintptr_t)site_of_launch(n, l)));
    ADD(t, ",\"correlation_id\":");
    text_u64(t, l->correlation_id);
    ADD(t, "}}");
}

static const char *const WORK_KINDS[] = {NULL, "kernel", "memcpy", "memset"};

/* One GPU record (join.Join.attribution, then trace._work_event), and its flow from the launch
 * that caused it, numbered `number`. */
static void
work_event(Text *t, const TraceLog *log, const GpuRecord *g, uint64_t number, Tables *x,
           const TraceNames *n)
{
    int64_t at = index_get(&x->site_launch, g->correlation_id);
    const void *launch_site = n->unattributed;
    if (at >= 0) {
        const void *launched_at = site_of_launch(n, &log->launches[at]);
        /* "" is no site: `or UNATTRIBUTED` */
        if (piece_at(&n->sites, (uint64_t)(uintptr_t)launched_at)->length > 2)
            launch_site = launched_at;
    }
    const Piece *site = piece_at(&n->sites, (uint64_t)(uintptr_t)launch_site);
    const Piece *where = site, *replayed_at = NULL;
    int capture_seen = 1;
    if (g->graph_node_id || g->graph_id) {
        const void *capture = NULL;
        replayed_at = site;
        if (graph_nodes_charged(&x->nodes, g->graph_node_id, g->graph_id, g->correlation_id,
                                launch_site, &capture))
            where = piece_at(&n->sites, (uint64_t)(uintptr_t)capture);
        else
            capture_seen = 0;
    }
    uint32_t work = work_of(g);
    ADD(t, ",{\"ph\":\"X\",\"cat\":\"");
    text_add(t, WORK_KINDS[g->kind], strlen(WORK_KINDS[g->kind]));
    ADD(t, "\",\"name\":");
    add_opening(t, where);
    ADD(t, " / ");
    add_closing(t, piece_at(&n->displays, work));
    ADD(t, ",\"pid\":");
    text_u64(t, GPU_PID_BASE + g->device);
    ADD(t, ",\"tid\":");
    text_u64(t, g->stream);
    ADD(t, ",\"ts\":");
    text_us(t, g->start - x->origin);
    ADD(t, ",\"dur\":");
    text_us(t, duration(g->start, g->end));
    ADD(t, ",\"args\":{\"site\":");
    add_piece(t, where);
    ADD(t, ",\"kernel\":");
    add_piece(t, piece_at(&n->kinds, work));
    ADD(t, ",\"correlation_id\":");
    text_u64(t, g->correlation_id);
    if (replayed_at != NULL) {
        ADD(t, ",\"replayed_at\":");
        add_piece(t, replayed_at);
        if (!capture_seen)
            ADD(t, ",\"capture_seen\":false");
    }
    if (g->graph_id) {
        ADD(t, ",\"graph_id\":");
        text_u64(t, g->graph_id);
    }
    if (g->graph_node_id) {
        ADD(t, ",\"graph_node_id\":");
        text_u64(t, g->graph_node_id);
    }
    ADD(t, "}}");
    int64_t launch = index_get(&x->timed_launch, g->correlation_id);
    if (launch < 0)
        return;
    const Launch *l = &log->launches[launch];
    ADD(t, ",{\"cat\":\"launch\",\"name\":\"launch\",\"id\":");
    text_u64(t, number);
    ADD(t, ",\"ph\":\"s\",\"pid\":");
    text_u64(t, n->pid);
    ADD(t, ",\"tid\":");
    text_u64(t, (uint64_t)index_get(&x->track, l->thread));
    ADD(t, ",\"ts\":");
    text_us(t, l->start - x->origin);
    ADD(t, "},{\"cat\":\"launch\",\"name\":\"launch\",\"id\":");
    text_u64(t, number);
    ADD(t, ",\"ph\":\"f\",\"bp\":\"e\",\"pid\":");
    text_u64(t, GPU_PID_BASE + g->device);
    ADD(t, ",\"tid\":");
    text_u64(t, g->stream);
    ADD(t, ",\"ts\":");
    text_us(t, g->start - x->origin);
    ADD(t, "}");
}

/* trace.trace_json's whole document. */
static void
write_trace(Text *t, const TraceLog *log, Tables *x, const TraceNames *n)
{
    ADD(t, "{\"traceEvents\":[");
    track_names(t, log, x, n);
    for (size_t i = 0; i < log->launch_count; i++) {
        if (log->launches[i].start)
            launch_event(t, &log->launches[i], x, n);
    }
    uint64_t number = 0;
    for (size_t i = 0; i < log->work_count; i++) {
        const GpuRecord *g = &log->work[i];
        if (g->kind != GPU_EXTERNAL && g->start)
            work_event(t, log, g, ++number, x, n);
    }
    ADD(t, "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"kname\":");
    add_piece(t, &n->version);
    ADD(t, ",\"clock\":\"CUPTI timestamps, ns\"}}\n");
}

/* trace_json(pid, program, version, unattributed, escape, display_name, memcpy_name) -> str:
 * trace.trace_json of what the log keeps. escape(text) is json's own string encoder
 * (json.encoder.encode_basestring), display_name(name) a kernel's shown name; each is asked
 * once per name. The events are written without the GIL. */
static PyObject *
recorder_trace_json(Recorder *r, PyObject *args)
{
    unsigned long long pid;
    PyObject *program, *version, *unattributed, *escape, *display_name, *memcpy_name;
    if (!PyArg_ParseTuple(args, "KUUUOOO:trace_json", &pid, &program, &version, &unattributed,
                          &escape, &display_name, &memcpy_name))
        return NULL;
    TraceNames names;
    memset(&names, 0, sizeof names);
    names.pid = pid;
    names.no_frame = r->no_frame;
    names.unattributed = keep(r, unattributed);
    if (names.unattributed == NULL)
        return NULL;
    TraceLog log;
    if (!trace_snapshot(r, &log))
        return PyErr_NoMemory();
    Tables tables;
    Text text = {NULL, 0, 0, 0};
    PyObject *result = NULL;
    if (!piece_of(escape, program, &names.program) || !piece_of(escape, version, &names.version)
        || !gather_names(r, &log, &names, escape, display_name, memcpy_name))
        goto done;
    if (!make_tables(&log, &names, &tables)) {
        tables_free(&tables);
        PyErr_NoMemory();
        goto done;
    }
    /* Room for the events at once (about 250 bytes each, a GPU record's flows included). */
    text_room(&text, 300 * (log.launch_count + 3 * log.work_count) + (1 << 16));
    if (exact_everywhere(&log, tables.origin)) {
        Py_BEGIN_ALLOW_THREADS
        write_trace(&text, &log, &tables, &names);
        Py_END_ALLOW_THREADS
    }
    else {
        write_trace(&text, &log, &tables, &names); /* Python prints the largest numbers */
    }
    tables_free(&tables);
    if (text.failed)
        PyErr_NoMemory();
    else
        result = PyUnicode_DecodeUTF8(text.data, (Py_ssize_t)text.length, "surrogatepass");
done:
    free(text.data);
    names_clear(&names);
    trace_free(&log);
    return result;
}

/* ------------------------------------------------------------------ the module's part */

static PyMethodDef trace_json_methods[] = {
    {"trace_json", (PyCFunction)recorder_trace_json, METH_VARARGS,
     "trace_json(pid, program, version, unattributed, escape, display_name, memcpy_name) -> str: "
     "kname.profiling.trace.trace_json of what the trace keeps, written in C (escape: json's "
     "string encoder; each name asked once)."},
    {NULL, NULL, 0, NULL},
};

int
trace_json_ready(PyTypeObject *recorder)
{
    return add_methods(recorder, trace_json_methods);
}
