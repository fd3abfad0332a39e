/*
 * kname._native_cupti's records as Python sees them, the twin of kname.profiling.records: the
 * kernel names the activity reader copies (once each), and launch calls, graph node events and
 * GPU records made as Python objects, with the GIL (through new_record, _common_c/slots.h).
 */
#include "profiling/_cupti_c/recorder.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 100000
#define MAX_NAME_BYTES ((size_t)64 << 20)

static char name_none[] = "<unnamed kernel>";
static char name_past_bound[] = "<kname: more kernel names than it keeps>";

/* ---- kernel names: every function here runs under r->activity_lock */

static uint64_t
text_hash(const char *text, size_t length)
{
    uint64_t hash = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < length; i++) {
        hash ^= (unsigned char)text[i];
        hash *= 0x100000001b3u;
    }
    return hash;
}

void
names_free(Names *n)
{
    for (size_t i = FIRST_NAME; i < n->count; i++)
        free(n->text[i]);
    free(n->text);
    free(n->hash);
    free(n->slots);
    memset(n, 0, sizeof *n);
}

/* The table made, with its two fixed names; 0: no memory. */
int
names_init(Names *n)
{
    if (n->text != NULL)
        return 1;
    n->room = 1024;
    n->slot_count = 2048;
    n->text = malloc(n->room * sizeof *n->text);
    n->hash = malloc(n->room * sizeof *n->hash);
    n->slots = calloc(n->slot_count, sizeof *n->slots);
    if (n->text == NULL || n->hash == NULL || n->slots == NULL) {
        names_free(n);
        return 0;
    }
    n->text[NAME_NONE] = name_none;
    n->text[NAME_PAST_BOUND] = name_past_bound;
    n->hash[NAME_NONE] = n->hash[NAME_PAST_BOUND] = 0;
    n->count = FIRST_NAME; /* the fixed names are never looked up: not in the slots */
    return 1;
}

static void
names_place(Names *n, uint32_t index)
{
    size_t mask = n->slot_count - 1;
    size_t i = n->hash[index] & mask;
    while (n->slots[i] != 0)
        i = (i + 1) & mask;
    n->slots[i] = index + 1;
}

/* Room for one more name; 0: no memory. */
static int
names_grow(Names *n)
{
    if (n->count == n->room) {
        char **text = realloc(n->text, 2 * n->room * sizeof *text);
        if (text == NULL)
            return 0;
        n->text = text;
        uint64_t *hash = realloc(n->hash, 2 * n->room * sizeof *hash);
        if (hash == NULL)
            return 0;
        n->hash = hash;
        n->room *= 2;
    }
    if ((n->count + 1) * 2 > n->slot_count) { /* kept at most half full */
        uint32_t *slots = calloc(2 * n->slot_count, sizeof *slots);
        if (slots == NULL)
            return 0;
        free(n->slots);
        n->slots = slots;
        n->slot_count *= 2;
        for (size_t i = FIRST_NAME; i < n->count; i++)
            names_place(n, (uint32_t)i);
    }
    return 1;
}

/* The index of the kept copy of `name`, a copy made now where it is new. */
uint32_t
intern_name(Names *n, const char *name)
{
    if (name == NULL)
        return NAME_NONE;
    size_t at = ((uintptr_t)name >> 3) & (NAME_CACHE - 1);
    if (n->recent[at].pointer == name && strcmp(n->text[n->recent[at].index], name) == 0)
        return n->recent[at].index;
    size_t length = strlen(name);
    uint64_t hash = text_hash(name, length);
    size_t mask = n->slot_count - 1;
    uint32_t index = NAME_NONE;
    for (size_t i = hash & mask; n->slots[i] != 0 && index == NAME_NONE; i = (i + 1) & mask) {
        uint32_t found = n->slots[i] - 1;
        if (n->hash[found] == hash && strcmp(n->text[found], name) == 0)
            index = found;
    }
    if (index == NAME_NONE) {
        char *copy = NULL;
        if (n->count < FIRST_NAME + MAX_NAMES && n->bytes + length + 1 <= MAX_NAME_BYTES && names_grow(n))
            copy = malloc(length + 1);
        if (copy == NULL) {
            n->past_bound++;
            return NAME_PAST_BOUND;
        }
        memcpy(copy, name, length + 1);
        index = (uint32_t)n->count++;
        n->text[index] = copy;
        n->hash[index] = hash;
        n->bytes += length + 1;
        names_place(n, index);
    }
    n->recent[at].pointer = name;
    n->recent[at].index = index;
    return index;
}

/* ---- records as Python objects, with the GIL */

PyObject *
launch_object(Recorder *r, PyObject *make_record, const Launch *launch)
{
    PyObject *args[FIELDS] = {
        PyLong_FromUnsignedLong(launch->correlation_id),
        PyLong_FromUnsignedLong(launch->thread),
        Py_NewRef(launch->site != NULL ? launch->site : r->no_frame),
        Py_NewRef(PyTuple_GET_ITEM(r->api_names, launch->api)),
        PyLong_FromUnsignedLongLong(launch->start),
        PyLong_FromUnsignedLongLong(launch->end),
        Py_NewRef(launch->graph ? Py_True : Py_False),
        PyLong_FromUnsignedLong(launch->parent),
    };
    return new_record(&r->record_layout, make_record, args);
}

PyObject *
node_object(Recorder *r, PyObject *make_record, const NodeEvent *e)
{
    PyObject *site = e->event != NODE_CREATED ? str_empty
                     : e->site != NULL       ? (PyObject *)e->site
                                             : r->no_frame;
    PyObject *args[FIELDS] = {
        Py_NewRef(graph_event_names[e->event]),
        PyLong_FromUnsignedLongLong(e->node),
        PyLong_FromUnsignedLong(e->graph),
        PyLong_FromUnsignedLong(e->graph_exec),
        PyLong_FromUnsignedLongLong(e->original),
        Py_NewRef(site),
        PyLong_FromUnsignedLong(e->correlation_id),
    };
    return new_record(&r->node_layout, make_record, args);
}

/* The str of kernel name `index` (a new reference), made once. */
PyObject *
kernel_name(Recorder *r, uint32_t index)
{
    if (index >= r->name_objects_room) {
        size_t room = r->name_objects_room ? 2 * r->name_objects_room : 256;
        while (room <= index)
            room *= 2;
        PyObject **grown = realloc(r->name_objects, room * sizeof *grown);
        if (grown == NULL)
            return PyErr_NoMemory();
        memset(grown + r->name_objects_room, 0, (room - r->name_objects_room) * sizeof *grown);
        r->name_objects = grown;
        r->name_objects_room = room;
    }
    if (r->name_objects[index] == NULL) {
        pthread_mutex_lock(&r->activity_lock); /* the table may be growing: its text never moves */
        const char *text = r->names.text[index];
        pthread_mutex_unlock(&r->activity_lock);
        r->name_objects[index] = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
        if (r->name_objects[index] == NULL)
            return NULL;
    }
    return Py_NewRef(r->name_objects[index]);
}

/* memcpy_name(copy_kind) (a new reference), asked once per copy kind. */
PyObject *
copy_name(Recorder *r, PyObject *memcpy_name, uint32_t copy_kind)
{
    if (copy_kind < COPY_KINDS && r->copy_names[copy_kind] != NULL)
        return Py_NewRef(r->copy_names[copy_kind]);
    PyObject *kind = PyLong_FromUnsignedLong(copy_kind);
    if (kind == NULL)
        return NULL;
    PyObject *name = PyObject_CallOneArg(memcpy_name, kind);
    Py_DECREF(kind);
    if (name != NULL && !PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "memcpy_name() gave a %.100s, not a str",
                     Py_TYPE(name)->tp_name);
        Py_CLEAR(name);
    }
    if (name != NULL && copy_kind < COPY_KINDS)
        r->copy_names[copy_kind] = Py_NewRef(name);
    return name;
}

PyObject *
gpu_object(Recorder *r, const GpuRecord *g, PyObject *make_activity, PyObject *make_external,
           PyObject *memcpy_name)
{
    if (g->kind == GPU_EXTERNAL) {
        PyObject *args[FIELDS] = {
            PyLong_FromUnsignedLong(g->correlation_id),
            PyLong_FromUnsignedLongLong(g->start),
        };
        return new_record(&r->external_layout, make_external, args);
    }
    PyObject *kind, *name;
    if (g->kind == GPU_KERNEL) {
        kind = str_kernel;
        name = kernel_name(r, g->detail);
    }
    else if (g->kind == GPU_MEMCPY) {
        kind = str_memcpy;
        name = copy_name(r, memcpy_name, g->detail);
    }
    else {
        kind = str_memset;
        name = Py_NewRef(str_memset_name);
    }
    PyObject *args[FIELDS] = {
        Py_NewRef(kind),
        PyLong_FromUnsignedLong(g->correlation_id),
        name,
        PyLong_FromUnsignedLongLong(g->start),
        PyLong_FromUnsignedLongLong(g->end),
        PyLong_FromUnsignedLong(g->stream),
        PyLong_FromUnsignedLong(g->device),
        PyLong_FromUnsignedLong(g->graph_id),
        PyLong_FromUnsignedLongLong(g->graph_node_id),
    };
    return new_record(&r->activity_layout, make_activity, args);
}

/* ---- --memory: the memory calls and records drain_memory() hands over */

static PyObject *
memory_call_object(const void *item)
{
    const MemoryCall *call = item;
    return Py_BuildValue("(kO)", (unsigned long)call->correlation_id, (PyObject *)call->site);
}

static PyObject *
memory_fact_object(const void *item)
{
    const MemoryFact *f = item;
    return Py_BuildValue("(kNkKKKkkN)", (unsigned long)f->correlation_id,
                         PyBool_FromLong(f->allocation), (unsigned long)f->memory_kind,
                         (unsigned long long)f->address, (unsigned long long)f->bytes,
                         (unsigned long long)f->timestamp, (unsigned long)f->device,
                         (unsigned long)f->stream, PyBool_FromLong(f->is_async));
}

/* A list of make(item) for `count` items of `size` bytes; freed either way. NULL with an
 * error. */
static PyObject *
list_of(void *items, size_t count, size_t size, PyObject *(*make)(const void *))
{
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        PyObject *item = make((const char *)items + i * size);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    free(items);
    return list;
}

PyObject *
memory_drained(MemoryCall *calls, size_t call_count, MemoryFact *facts, size_t fact_count,
               unsigned long long dropped)
{
    PyObject *call_list = list_of(calls, call_count, sizeof *calls, memory_call_object);
    PyObject *fact_list = list_of(facts, fact_count, sizeof *facts, memory_fact_object);
    if (call_list == NULL || fact_list == NULL) {
        Py_XDECREF(call_list);
        Py_XDECREF(fact_list);
        return NULL;
    }
    return Py_BuildValue("(NNK)", call_list, fact_list, dropped);
}
