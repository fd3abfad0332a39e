/*
 * kname._native_cupti's Ledger: kname.profiling.memory.Ledger's accounting in C, event for event
 * the same (tests/profiling/test_memory.py holds the two equal with hypothesis): each allocation
 * charged to its line, its free to the same line wherever it happens, a line's own peak, the
 * view's peak and what each line held there (found lazily by epochs, as the Python one does),
 * the bounded timeline of live bytes. torch's allocator tracker hands its events over by the
 * thousand every settle; torch_tracker.c adds them here straight from its buffer (ledger_add),
 * where the Python ledger cost about 0.5 us a block and its free and a tuple each. state() hands
 * the totals to Python (memory_hooks.TrackedBlocks loads them into the view's memory.Ledger).
 *
 * The blocks held are an open-addressing table keyed by address (linear probing, deletion by
 * backward shift, at most half full); the lines a dict {name: index} beside an array of totals.
 * Everything here runs with the GIL held.
 */
#include "profiling/_cupti_c/ledger.h" /* first: it includes Python.h */

#include <string.h>

#define EMPTY (-1)
#define FIRST_SLOTS 1024 /* a power of 2 */

typedef struct {
    PyObject *name; /* strong */
    int64_t allocated, allocations, freed, frees, live, peak;
    int64_t at_peak, epoch; /* what it held at the view's peak, valid while epoch is the view's */
} LineTotals;

typedef struct {
    uint64_t address, size;
    Py_ssize_t line; /* EMPTY: a free slot */
} Block;

typedef struct {
    int64_t ns, live;
} Point;

struct NativeLedger {
    PyObject_HEAD
    PyObject *index; /* {name: its index in lines} */
    LineTotals *lines;
    Py_ssize_t line_count, line_room;
    Block *blocks;
    size_t slots, held;
    Py_ssize_t max_blocks, max_points;
    int64_t live, peak, peak_ns, unmatched, untracked, epoch;
    Point *points; /* max_points + 1 */
    Py_ssize_t point_count;
};

/* ------------------------------------------------------------------ the blocks held */

static inline size_t
home_of(const NativeLedger *l, uint64_t address)
{
    uint64_t h = address * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing: 512-aligned addresses */
    return (size_t)(h ^ (h >> 32)) & (l->slots - 1);
}

/* The slot of `address`, or the empty one where it would go. */
static Block *
find_block(const NativeLedger *l, uint64_t address)
{
    size_t mask = l->slots - 1;
    for (size_t i = home_of(l, address);; i = (i + 1) & mask) {
        Block *b = &l->blocks[i];
        if (b->line == EMPTY || b->address == address)
            return b;
    }
}

static Block *
empty_blocks(size_t slots)
{
    Block *blocks = PyMem_Malloc(slots * sizeof(Block));
    for (size_t i = 0; blocks != NULL && i < slots; i++)
        blocks[i].line = EMPTY;
    return blocks;
}

/* Twice the slots, every block moved; -1 with an error (the table as it was). */
static int
grow_blocks(NativeLedger *l)
{
    Block *old = l->blocks;
    size_t old_slots = l->slots;
    Block *blocks = empty_blocks(2 * old_slots);
    if (blocks == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    l->blocks = blocks;
    l->slots = 2 * old_slots;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].line != EMPTY)
            *find_block(l, old[i].address) = old[i];
    PyMem_Free(old);
    return 0;
}

/* The slot `i` emptied: each block after it in its run moves back where its probe finds it. */
static void
remove_block(NativeLedger *l, size_t i)
{
    size_t mask = l->slots - 1;
    for (size_t j = (i + 1) & mask; l->blocks[j].line != EMPTY; j = (j + 1) & mask) {
        size_t home = home_of(l, l->blocks[j].address);
        /* It may move to i unless its home lies in (i, j], cyclically. */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            l->blocks[i] = l->blocks[j];
            i = j;
        }
    }
    l->blocks[i].line = EMPTY;
    l->held--;
}

/* ------------------------------------------------------------------ lines and the timeline */

/* The index of `name`'s totals, made on first use; -1 with an error. */
static Py_ssize_t
line_of(NativeLedger *l, PyObject *name)
{
    PyObject *found = PyDict_GetItemWithError(l->index, name);
    if (found != NULL)
        return PyLong_AsSsize_t(found);
    if (PyErr_Occurred())
        return -1;
    if (l->line_count == l->line_room) {
        Py_ssize_t room = l->line_room ? 2 * l->line_room : 64;
        LineTotals *grown = PyMem_Realloc(l->lines, (size_t)room * sizeof(LineTotals));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        l->lines = grown;
        l->line_room = room;
    }
    PyObject *number = PyLong_FromSsize_t(l->line_count);
    if (number == NULL || PyDict_SetItem(l->index, name, number) < 0) {
        Py_XDECREF(number);
        return -1;
    }
    Py_DECREF(number);
    l->lines[l->line_count] = (LineTotals){.name = Py_NewRef(name), .epoch = -1};
    return l->line_count++;
}

/* `line` holds `delta` more bytes; what it held at the view's latest peak saved first. */
static inline void
change(NativeLedger *l, LineTotals *line, int64_t delta)
{
    if (line->epoch != l->epoch) {
        line->at_peak = line->live;
        line->epoch = l->epoch;
    }
    line->live += delta;
}

/* The live bytes now, at `ns`; past max_points, neighbours merge two by two keeping the later
 * time and the higher bytes (a last odd point kept), as memory.Timeline does. */
static void
add_point(NativeLedger *l, int64_t ns)
{
    Point *p = l->points;
    p[l->point_count++] = (Point){ns, l->live};
    if (l->point_count <= l->max_points)
        return;
    Py_ssize_t kept = 0, n = l->point_count;
    for (Py_ssize_t i = 0; i + 1 < n; i += 2)
        p[kept++] = (Point){p[i + 1].ns, p[i].live > p[i + 1].live ? p[i].live : p[i + 1].live};
    if (n % 2)
        p[kept++] = p[n - 1];
    l->point_count = kept;
}

/* ------------------------------------------------------------------ events */

static void
free_block(NativeLedger *l, uint64_t address, int64_t ns)
{
    Block *b = find_block(l, address);
    if (b->line == EMPTY) {
        l->unmatched++;
        return;
    }
    LineTotals *line = &l->lines[b->line];
    int64_t size = (int64_t)b->size;
    change(l, line, -size);
    line->freed += size;
    line->frees++;
    l->live -= size;
    remove_block(l, (size_t)(b - l->blocks));
    add_point(l, ns);
}

int
ledger_add(NativeLedger *l, uint64_t address, PyObject *name, int64_t ns, uint64_t size)
{
    if (name == NULL) {
        free_block(l, address, ns);
        return 0;
    }
    if (find_block(l, address)->line != EMPTY) /* allocated again: its free was not seen */
        free_block(l, address, ns);
    if ((Py_ssize_t)l->held >= l->max_blocks) {
        l->untracked++;
        return 0;
    }
    Py_ssize_t index = line_of(l, name);
    if (index < 0 || (2 * (l->held + 1) > l->slots && grow_blocks(l) < 0))
        return -1;
    LineTotals *line = &l->lines[index];
    change(l, line, (int64_t)size);
    line->allocated += (int64_t)size;
    line->allocations++;
    if (line->live > line->peak)
        line->peak = line->live;
    *find_block(l, address) = (Block){address, size, index};
    l->held++;
    l->live += (int64_t)size;
    if (l->live > l->peak) {
        l->peak = l->live;
        l->peak_ns = ns;
        l->epoch++; /* every line holds now what it will hold at this peak */
    }
    add_point(l, ns);
    return 0;
}

/* ------------------------------------------------------------------ the type */

static PyObject *
ledger_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"max_points", "max_blocks", NULL};
    Py_ssize_t max_points = 512, max_blocks = 4000000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nn:Ledger", keywords, &max_points,
                                     &max_blocks))
        return NULL;
    if (max_points < 1 || max_blocks < 0) {
        PyErr_SetString(PyExc_ValueError, "Ledger: max_points >= 1 and max_blocks >= 0");
        return NULL;
    }
    NativeLedger *l = (NativeLedger *)type->tp_alloc(type, 0);
    if (l == NULL)
        return NULL;
    l->max_points = max_points;
    l->max_blocks = max_blocks;
    l->slots = FIRST_SLOTS;
    l->index = PyDict_New();
    l->blocks = empty_blocks(l->slots);
    l->points = PyMem_Malloc((size_t)(max_points + 1) * sizeof(Point));
    if (l->index == NULL || l->blocks == NULL || l->points == NULL) {
        Py_DECREF(l);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return (PyObject *)l;
}

static void
ledger_dealloc(NativeLedger *l)
{
    for (Py_ssize_t i = 0; i < l->line_count; i++)
        Py_DECREF(l->lines[i].name);
    PyMem_Free(l->lines);
    PyMem_Free(l->blocks);
    PyMem_Free(l->points);
    Py_XDECREF(l->index);
    Py_TYPE(l)->tp_free((PyObject *)l);
}

/* take(events): each (address, name or None for a free, ns, size), in order. */
static PyObject *
ledger_take(NativeLedger *l, PyObject *events)
{
    PyObject *each = PyObject_GetIter(events);
    if (each == NULL)
        return NULL;
    PyObject *item;
    while ((item = PyIter_Next(each)) != NULL) {
        unsigned long long address, size;
        long long ns;
        PyObject *name;
        int ok = PyArg_ParseTuple(item, "KOLK:Ledger.take", &address, &name, &ns, &size);
        if (ok && name != Py_None && !PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "Ledger.take: a name is a str, or None for a free");
            ok = 0;
        }
        ok = ok && ledger_add(l, address, name == Py_None ? NULL : name, ns, size) == 0;
        Py_DECREF(item);
        if (!ok) {
            Py_DECREF(each);
            return NULL;
        }
    }
    Py_DECREF(each);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* state() -> ([(name, allocated, allocations, freed, frees, live, peak, at_peak)], live, peak,
 * peak_ns, unmatched_frees, untracked, [(ns, live)]): memory.Ledger.load's argument. */
static PyObject *
ledger_state(NativeLedger *l, PyObject *unused)
{
    (void)unused;
    PyObject *lines = PyList_New(l->line_count);
    PyObject *points = PyList_New(l->point_count);
    for (Py_ssize_t i = 0; lines != NULL && points != NULL && i < l->line_count; i++) {
        const LineTotals *t = &l->lines[i];
        int64_t at_peak = t->epoch == l->epoch ? t->at_peak : t->live;
        PyObject *row = Py_BuildValue("(OLLLLLLL)", t->name, (long long)t->allocated,
                                      (long long)t->allocations, (long long)t->freed,
                                      (long long)t->frees, (long long)t->live,
                                      (long long)t->peak, (long long)at_peak);
        if (row == NULL)
            Py_CLEAR(lines);
        else
            PyList_SET_ITEM(lines, i, row);
    }
    for (Py_ssize_t i = 0; lines != NULL && points != NULL && i < l->point_count; i++) {
        PyObject *point =
            Py_BuildValue("(LL)", (long long)l->points[i].ns, (long long)l->points[i].live);
        if (point == NULL)
            Py_CLEAR(points);
        else
            PyList_SET_ITEM(points, i, point);
    }
    if (lines == NULL || points == NULL) {
        Py_XDECREF(lines);
        Py_XDECREF(points);
        return NULL;
    }
    return Py_BuildValue("(NLLLLLN)", lines, (long long)l->live, (long long)l->peak,
                         (long long)l->peak_ns, (long long)l->unmatched,
                         (long long)l->untracked, points);
}

static PyMethodDef ledger_methods[] = {
    {"take", (PyCFunction)ledger_take, METH_O,
     "take(events): each (address, name or None for a free, ns, size), in order."},
    {"state", (PyCFunction)ledger_state, METH_NOARGS,
     "state() -> (lines, live, peak, peak_ns, unmatched_frees, untracked, points)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject NativeLedgerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kname._native_cupti.Ledger",
    .tp_doc = "memory.Ledger's accounting in C, for torch's tracked blocks "
              "(kname/profiling/_cupti_c/ledger.c).",
    .tp_basicsize = sizeof(NativeLedger),
    .tp_new = ledger_new,
    .tp_dealloc = (destructor)ledger_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = ledger_methods,
};

int
ledger_ready(PyObject *module)
{
    if (PyType_Ready(&NativeLedgerType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Ledger", (PyObject *)&NativeLedgerType);
}
