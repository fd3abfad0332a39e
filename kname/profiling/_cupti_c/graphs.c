/*
 * CUDA graph nodes and the lines that made them, in C (see graphs.h): the index of
 * 64-bit keys, the pool of nodes and their updates, graphs.py's steps.
 */
#include "profiling/_cupti_c/graphs.h"

#include <stdlib.h>
#include <string.h>

#define EXEC_CONTAINER ((uint64_t)1 << 32)

/* ---- the index (the join's tables are such indexes too) */

static inline size_t
index_home(const Index64 *x, uint64_t key)
{
    key ^= key >> 31;
    key *= 0xbf58476d1ce4e5b9u;
    key ^= key >> 29;
    return (size_t)key & (x->size - 1);
}

static size_t
index_slot(const Index64 *x, uint64_t key)
{
    size_t mask = x->size - 1, i = index_home(x, key);
    while (x->values[i] != 0 && x->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

/* The value under `key`, or -1. */
int64_t
index_get(const Index64 *x, uint64_t key)
{
    if (x->count == 0)
        return -1;
    size_t i = index_slot(x, key);
    return x->values[i] ? (int64_t)x->values[i] - 1 : -1;
}

/* `key` -> `value`, replacing what it had; 0: no memory. */
int
index_set(Index64 *x, uint64_t key, uint32_t value)
{
    if ((x->count + 1) * 2 > x->size) {
        Index64 grown = {NULL, NULL, x->size ? 2 * x->size : 64, 0};
        grown.keys = malloc(grown.size * sizeof *grown.keys);
        grown.values = calloc(grown.size, sizeof *grown.values);
        if (grown.keys == NULL || grown.values == NULL) {
            free(grown.keys);
            free(grown.values);
            return 0;
        }
        for (size_t i = 0; i < x->size; i++) {
            if (x->values[i] != 0) {
                size_t at = index_slot(&grown, x->keys[i]);
                grown.keys[at] = x->keys[i];
                grown.values[at] = x->values[i];
                grown.count++;
            }
        }
        free(x->keys);
        free(x->values);
        *x = grown;
    }
    size_t i = index_slot(x, key);
    x->count += x->values[i] == 0;
    x->keys[i] = key;
    x->values[i] = value + 1;
    return 1;
}

void
index_remove(Index64 *x, uint64_t key)
{
    if (x->count == 0)
        return;
    size_t mask = x->size - 1, i = index_slot(x, key);
    if (x->values[i] == 0)
        return;
    x->count--;
    /* Backward-shift deletion, as the join's map does: no probe run is broken. */
    for (size_t j = (i + 1) & mask; x->values[j] != 0; j = (j + 1) & mask) {
        size_t home = index_home(x, x->keys[j]);
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            x->keys[i] = x->keys[j];
            x->values[i] = x->values[j];
            i = j;
        }
    }
    x->values[i] = 0;
}

void
index_free(Index64 *x)
{
    free(x->keys);
    free(x->values);
    memset(x, 0, sizeof *x);
}

/* ---- the pools (and the join's) */

int
grow(void **items, size_t *room, size_t count, size_t size)
{
    if (count < *room)
        return 1;
    size_t more = *room ? 2 * *room : 64;
    void *grown = realloc(*items, more * size);
    if (grown == NULL)
        return 0;
    *items = grown;
    *room = more;
    return 1;
}

static void
free_updates(GraphNodes *g, GraphNode *n)
{
    for (uint32_t u = n->updates; u != 0;) {
        uint32_t next = g->updates[u - 1].next;
        g->updates[u - 1].next = g->update_free;
        g->update_free = u;
        u = next;
    }
    n->updates = 0;
}

/* ---- containers: each one's live nodes, a list through the nodes */

static void
link_node(GraphNodes *g, uint32_t at)
{
    GraphNode *n = &g->nodes[at];
    int64_t first = index_get(&g->containers, n->container);
    n->prev = 0;
    n->next = first >= 0 ? (uint32_t)first + 1 : 0;
    if (!index_set(&g->containers, n->container, at)) {
        g->no_memory = 1; /* destroyed with its container no more: with itself, or by the cap */
        n->next = 0;
        return;
    }
    if (first >= 0)
        g->nodes[first].prev = at + 1;
}

static void
unlink_node(GraphNodes *g, uint32_t at)
{
    GraphNode *n = &g->nodes[at];
    if (n->next)
        g->nodes[n->next - 1].prev = n->prev;
    if (n->prev)
        g->nodes[n->prev - 1].next = n->next;
    else if (index_get(&g->containers, n->container) == (int64_t)at) {
        if (n->next)
            index_set(&g->containers, n->container, n->next - 1); /* replaces: no memory taken */
        else
            index_remove(&g->containers, n->container);
    }
    n->prev = n->next = 0;
}

/* The node gone from the table for good. */
static void
forget_node(GraphNodes *g, uint32_t at)
{
    GraphNode *n = &g->nodes[at];
    free_updates(g, n);
    index_remove(&g->by_id, n->id);
    n->next = g->node_free;
    g->node_free = at + 1;
    g->kept--;
}

/* ---- graphs.py's steps */

static GraphNode *
find(const GraphNodes *g, uint64_t id)
{
    int64_t at = index_get(&g->by_id, id);
    return at >= 0 ? &g->nodes[at] : NULL;
}

/* _sites_of: the site a copy made now takes (its latest update's). */
static const void *
site_now(const GraphNodes *g, uint64_t id)
{
    const GraphNode *n = find(g, id);
    if (n == NULL)
        return NULL;
    const void *site = n->site;
    for (uint32_t u = n->updates; u != 0; u = g->updates[u - 1].next)
        site = g->updates[u - 1].site;
    return site;
}

static void
remember_destroyed(GraphNodes *g, uint64_t id)
{
    if (g->destroyed_count == g->destroyed_room) {
        size_t room = g->destroyed_room ? 2 * g->destroyed_room : 64;
        uint64_t *grown = malloc(room * sizeof *grown);
        if (grown == NULL) { /* not kept a while longer: gone now */
            int64_t at = index_get(&g->by_id, id);
            if (at >= 0 && !g->nodes[at].live)
                forget_node(g, (uint32_t)at);
            g->no_memory = 1;
            return;
        }
        for (size_t i = 0; i < g->destroyed_count; i++)
            grown[i] = g->destroyed[(g->head + i) % g->destroyed_room];
        free(g->destroyed);
        g->destroyed = grown;
        g->destroyed_room = room;
        g->head = 0;
    }
    g->destroyed[(g->head + g->destroyed_count++) % g->destroyed_room] = id;
    while ((Py_ssize_t)g->destroyed_count > g->recent_nodes) {
        uint64_t gone = g->destroyed[g->head];
        g->head = (g->head + 1) % g->destroyed_room;
        g->destroyed_count--;
        int64_t at = index_get(&g->by_id, gone);
        if (at >= 0 && !g->nodes[at].live) /* not made live again since */
            forget_node(g, (uint32_t)at);
    }
}

static void
retire(GraphNodes *g, uint32_t at)
{
    g->nodes[at].live = 0;
    g->live--;
    remember_destroyed(g, g->nodes[at].id);
}

/* _keep's bookkeeping: the node live in the container of `e` (made when new). NULL: not kept
 * (at the bound, said; or no memory). */
static GraphNode *
keep_live(GraphNodes *g, uint64_t id, const NodeEvent *e)
{
    int64_t found = index_get(&g->by_id, id);
    if (found >= 0 && g->nodes[found].live)
        return &g->nodes[found];
    if ((Py_ssize_t)g->live >= g->max_nodes) {
        g->not_kept++;
        g->capped = 1;
        if (found >= 0)
            forget_node(g, (uint32_t)found);
        return NULL;
    }
    uint32_t at;
    if (found >= 0) {
        at = (uint32_t)found;
    }
    else {
        if (g->node_free) {
            at = g->node_free - 1;
            g->node_free = g->nodes[at].next;
        }
        else if (grow((void **)&g->nodes, &g->node_room, g->node_count, sizeof *g->nodes)) {
            at = (uint32_t)g->node_count++;
        }
        else {
            g->no_memory = 1;
            return NULL;
        }
        if (!index_set(&g->by_id, id, at)) {
            g->nodes[at].next = g->node_free;
            g->node_free = at + 1;
            g->no_memory = 1;
            return NULL;
        }
        g->nodes[at] = (GraphNode){id, NULL, 0, 0, 0, 0, 0};
        g->kept++;
    }
    GraphNode *n = &g->nodes[at];
    n->container = e->graph_exec ? (EXEC_CONTAINER | e->graph_exec) : e->graph;
    n->live = 1;
    g->live++;
    link_node(g, at);
    return n;
}

/* _keep: `id` made live, at `site` (its updates forgotten). */
static void
keep_node(GraphNodes *g, uint64_t id, const void *site, const NodeEvent *e)
{
    GraphNode *n = keep_live(g, id, e);
    if (n == NULL)
        return;
    free_updates(g, n);
    n->site = site;
}

/* _update: from the next replay on, the executable graph's node (`original`) runs as the
 * update's graph's `node` does, with its site. */
static void
update(GraphNodes *g, const NodeEvent *e)
{
    const void *site = site_now(g, e->node);
    GraphNode *n = find(g, e->original);
    if ((n == NULL || (n->site == NULL && n->updates == 0)) && site == NULL)
        return; /* neither made where kname saw it: the replay line's, before and after */
    if (n == NULL || n->updates == 0) {
        n = keep_live(g, e->original, e); /* its site so far stays, for the replays before */
        if (n == NULL)
            return;
    }
    uint32_t at;
    if (g->update_free) {
        at = g->update_free - 1;
        g->update_free = g->updates[at].next;
    }
    else if (grow((void **)&g->updates, &g->update_room, g->update_count, sizeof *g->updates)) {
        at = (uint32_t)g->update_count++;
    }
    else {
        g->no_memory = 1;
        return;
    }
    g->updates[at] = (NodeUpdate){e->correlation_id, site, 0};
    if (n->updates == 0) {
        n->updates = at + 1;
        return;
    }
    uint32_t last = n->updates;
    while (g->updates[last - 1].next != 0)
        last = g->updates[last - 1].next;
    g->updates[last - 1].next = at + 1;
}

static void
destroy(GraphNodes *g, uint64_t id)
{
    int64_t at = index_get(&g->by_id, id);
    if (at < 0 || !g->nodes[at].live)
        return;
    unlink_node(g, (uint32_t)at);
    retire(g, (uint32_t)at);
}

static void
destroy_container(GraphNodes *g, uint64_t container)
{
    int64_t first = index_get(&g->containers, container);
    if (first < 0)
        return;
    index_remove(&g->containers, container);
    for (uint32_t at = (uint32_t)first + 1; at != 0;) {
        uint32_t next = g->nodes[at - 1].next;
        g->nodes[at - 1].prev = g->nodes[at - 1].next = 0;
        retire(g, at - 1);
        at = next;
    }
}

void
graph_nodes_add(GraphNodes *g, const NodeEvent *e, const void *no_frame)
{
    switch (e->event) {
    case NODE_CREATED:
        /* Instantiation makes its copies too; a clone's site (from its original) wins. */
        if (find(g, e->node) == NULL)
            keep_node(g, e->node, e->site != NULL ? e->site : no_frame, e);
        break;
    case NODE_CLONED:
        keep_node(g, e->node, site_now(g, e->original), e);
        break;
    case NODE_UPDATED:
        update(g, e);
        break;
    case NODE_DESTROYED:
        destroy(g, e->node);
        break;
    case GRAPH_DESTROYED:
        destroy_container(g, e->graph);
        break;
    case EXEC_DESTROYED:
        destroy_container(g, EXEC_CONTAINER | e->graph_exec);
        break;
    default:
        break;
    }
}

int
graph_nodes_site(const GraphNodes *g, uint64_t node, uint32_t correlation_id, const void **site)
{
    const GraphNode *n = find(g, node);
    if (n == NULL)
        return 0;
    const void *found = n->site;
    for (uint32_t u = n->updates; u != 0; u = g->updates[u - 1].next) {
        if (correlation_id > g->updates[u - 1].after)
            found = g->updates[u - 1].site;
    }
    *site = found;
    return found != NULL;
}

/* callsite.COMPILE_MARK, as graphs.py's follows_replay reads it. */
static const char COMPILE_MARK[] = " (compile)";

/* Whether the str `site` ends with COMPILE_MARK. Read without the GIL: a kept name is immutable
 * and lives as long as the recorder. */
static int
compile_marked(const void *site)
{
    PyObject *name = (PyObject *)site;
    Py_ssize_t mark = (Py_ssize_t)(sizeof COMPILE_MARK - 1), length = PyUnicode_GET_LENGTH(name);
    if (length < mark)
        return 0;
    int kind = PyUnicode_KIND(name);
    const void *data = PyUnicode_DATA(name);
    for (Py_ssize_t i = 0; i < mark; i++) {
        if (PyUnicode_READ(kind, data, length - mark + i) != (Py_UCS4)COMPILE_MARK[i])
            return 0;
    }
    return 1;
}

/* The line of the earliest launch of `graph` seen so far, this one counted (graphs.py's
 * _first_launch); NULL past MAX_GRAPHS graphs or for want of memory. */
static const void *
first_launch(GraphNodes *g, uint32_t graph, uint32_t correlation_id, const void *replay)
{
    int64_t at = index_get(&g->first_of, graph);
    if (at >= 0) {
        FirstLaunch *first = &g->firsts[at];
        if (correlation_id < first->correlation_id)
            *first = (FirstLaunch){correlation_id, replay};
        return first->site;
    }
    if (g->first_count >= MAX_GRAPHS)
        return NULL;
    if (!grow((void **)&g->firsts, &g->first_room, g->first_count, sizeof *g->firsts)
        || !index_set(&g->first_of, graph, (uint32_t)g->first_count)) {
        g->no_memory = 1;
        return NULL;
    }
    g->firsts[g->first_count++] = (FirstLaunch){correlation_id, replay};
    return replay;
}

int
graph_nodes_charged(GraphNodes *g, uint64_t node, uint32_t graph, uint32_t correlation_id,
                    const void *replay, const void **site)
{
    const void *capture;
    if (!graph_nodes_site(g, node, correlation_id, &capture))
        return 0;
    const void *first = first_launch(g, graph, correlation_id, replay);
    /* Names are kept once each (the recorder's `kept`): the same line is the same object. */
    *site = compile_marked(capture) || capture == first ? replay : capture;
    return 1;
}

void
graph_nodes_free(GraphNodes *g)
{
    free(g->nodes);
    free(g->firsts);
    index_free(&g->first_of);
    free(g->updates);
    free(g->destroyed);
    index_free(&g->by_id);
    index_free(&g->containers);
    Py_ssize_t max_nodes = g->max_nodes, recent_nodes = g->recent_nodes;
    memset(g, 0, sizeof *g);
    g->max_nodes = max_nodes;
    g->recent_nodes = recent_nodes;
}
