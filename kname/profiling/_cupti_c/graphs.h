/*
 * CUDA graph nodes and the lines that made them, in C: the twin of kname/profiling/graphs.py for
 * the join kname._native_cupti keeps (join.c). graphs.py is the specification:
 * the same events, the same rules (a clone's site wins over the copy instantiation reports as
 * made; an update names the replays launched after it; destroyed nodes are kept in a window of
 * the last `recent_nodes`; past `max_nodes` live nodes, new ones are not kept), and
 * tests/profiling/test_native_cupti_join.py checks that both give the same Profile. A site is a name the
 * recorder keeps (a pointer is a name). Everything here runs under the recorder's activity_lock.
 */
#ifndef KNAME_NATIVE_CUPTI_GRAPHS_H
#define KNAME_NATIVE_CUPTI_GRAPHS_H

#include "_common_c/common.h" /* first: it includes Python.h */

#include <stdint.h>

/* What happened to a graph node: kname.profiling.records.NODE_EVENTS, numbered from 1 in that
 * order (the module's GRAPH_EVENTS names them). */
enum {
    NODE_CREATED = 1,
    NODE_CLONED,
    NODE_UPDATED,
    NODE_DESTROYED,
    GRAPH_DESTROYED,
    EXEC_DESTROYED,
    NODE_EVENT_COUNT = EXEC_DESTROYED
};

/* One of CUPTI's graph resource callbacks, as the recorder keeps it (GraphNodeRecord's fields). */
typedef struct {
    uint64_t node, original;
    const void *site; /* NODE_CREATED: a name the recorder keeps; NULL: no Python frame */
    uint32_t graph, graph_exec, correlation_id;
    uint8_t event;
} NodeEvent;

/* An index of 64-bit keys to 32-bit values, with removal (open addressing, backward shift);
 * the join's tables of sites, kernels and replay lines are such indexes too. */
typedef struct {
    uint64_t *keys;
    uint32_t *values; /* value + 1; 0: empty */
    size_t size, count;
} Index64;

/* The value under `key`, or -1. */
INTERNAL int64_t index_get(const Index64 *x, uint64_t key);
/* `key` -> `value`, replacing what it had; 0: no memory. */
INTERNAL int index_set(Index64 *x, uint64_t key, uint32_t value);
INTERNAL void index_remove(Index64 *x, uint64_t key);
INTERNAL void index_free(Index64 *x);

typedef struct {
    uint64_t id;
    const void *site;    /* NULL: made where kname did not see */
    uint64_t container;  /* what destroys it with it: a graph's id, or an executable graph's
                          * id | 1 << 32 */
    uint32_t prev, next; /* the container's other live nodes (index + 1; 0: none) */
    uint32_t updates;    /* its first update (index + 1; 0: none) */
    uint8_t live;
} GraphNode;

typedef struct {
    uint32_t after;   /* for the replays launched after this correlation id */
    const void *site; /* NULL: the node now runs as one kname did not see made */
    uint32_t next;    /* the next update (index + 1) */
} NodeUpdate;

typedef struct {
    uint32_t correlation_id; /* the earliest launch of a graph seen */
    const void *site;        /* its line */
} FirstLaunch;

#define MAX_GRAPHS 65536

typedef struct {
    Py_ssize_t max_nodes, recent_nodes;
    GraphNode *nodes; /* a pool: a freed slot is on the free list */
    size_t node_count, node_room;
    uint32_t node_free; /* + 1 */
    NodeUpdate *updates;
    size_t update_count, update_room;
    uint32_t update_free; /* + 1 */
    Index64 by_id;      /* node id -> node */
    Index64 containers; /* container -> its first live node */
    uint64_t *destroyed; /* a ring of the ids destroyed lately, oldest at `head` */
    size_t head, destroyed_count, destroyed_room;
    size_t live, kept;
    Index64 first_of;        /* a launched graph's id -> its earliest launch in `firsts` */
    FirstLaunch *firsts;     /* graphs.py's _first_launches, at most MAX_GRAPHS */
    size_t first_count, first_room;
    uint64_t not_kept;
    int capped;    /* nodes were not kept at the bound: said at the next report */
    int no_memory; /* something was not kept for want of memory */
} GraphNodes;

/* GraphNodes.add: one event, in the order CUPTI's callbacks came (a made node with no Python
 * frame at `no_frame`). */
INTERNAL void graph_nodes_add(GraphNodes *g, const NodeEvent *e, const void *no_frame);

/* GraphNodes.site_of: 1 and the site in *site that made `node`, for its work in the replay with
 * this correlation id; 0 where kname did not see it made. */
INTERNAL int graph_nodes_site(const GraphNodes *g, uint64_t node, uint32_t correlation_id,
                              const void **site);

/* GraphNodes.charged: 1 and in *site the line a replayed record of `node` (launched as `graph`
 * with this correlation id at `replay`) goes to: the node's own line, or `replay` where the graph
 * is a library's own (graphs.py's follows_replay); 0 where kname did not see the node made.
 * `replay` and every site are str objects the recorder keeps (read without the GIL: immutable). */
INTERNAL int graph_nodes_charged(GraphNodes *g, uint64_t node, uint32_t graph,
                                 uint32_t correlation_id, const void *replay, const void **site);

INTERNAL void graph_nodes_free(GraphNodes *g);

/* Room for one more of `count` items of `size` in *items (doubled when full); 0: no memory.
 * The join's pools use it too. */
INTERNAL int grow(void **items, size_t *room, size_t count, size_t size);

#endif /* KNAME_NATIVE_CUPTI_GRAPHS_H */
