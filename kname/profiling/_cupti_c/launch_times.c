/*
 * Each line's launch times in the join in C (see launch_times.h): launch_times.py's LaunchTimes,
 * in the same steps.
 */
#include "profiling/_cupti_c/launch_times.h"

/* _bounded_put: `id`'s entry in `m` (a, b), the oldest dropped past max_pending. */
static void
times_put(Join *j, Map *m, uint32_t id, uint64_t a, uint64_t b)
{
    MapEntry *entry = map_put(m, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = a;
    entry->b = b;
    if ((Py_ssize_t)m->live > j->max_pending)
        map_remove(m, map_oldest(m)->key, NULL);
}

/* LaunchTimes.launch: an outermost timed launch call kept until its first GPU record; a call
 * made inside another, the link to it (its GPU record may carry either's id). The C join is
 * handed finished calls: an untimed one is not kept. */
void
times_launch(Join *j, const Launch *launch)
{
    if (!j->times_on)
        return;
    if (launch->parent)
        times_put(j, &j->outer_of, launch->correlation_id, launch->parent, 0);
    else if (!launch->graph && launch->end > launch->start && launch->start > 0)
        times_put(j, &j->timed_calls, launch->correlation_id, launch->start, launch->end);
}

/* The last end of `g`'s stream (NULL: past MAX_STREAMS, or no memory: not kept). */
static uint64_t *
stream_end(Join *j, const GpuRecord *g)
{
    uint64_t key = ((uint64_t)g->device << 32) | g->stream;
    int64_t found = index_get(&j->stream_of, key);
    if (found >= 0)
        return &j->stream_ends[found];
    if (j->stream_count >= MAX_STREAMS
        || !grow((void **)&j->stream_ends, &j->stream_room, j->stream_count, sizeof(uint64_t))
        || !index_set(&j->stream_of, key, (uint32_t)j->stream_count))
        return NULL;
    j->stream_ends[j->stream_count] = 0;
    return &j->stream_ends[j->stream_count++];
}

/* LaunchTimes.count: a GPU record joined to site `s` (-1: not counted). */
void
times_count(Join *j, int64_t s, const GpuRecord *g, int graph)
{
    uint64_t *end = stream_end(j, g);
    uint64_t previous_end = end != NULL ? *end : 0;
    MapEntry call, link;
    uint32_t outer = g->correlation_id;
    if (map_remove(&j->outer_of, g->correlation_id, &link))
        outer = (uint32_t)link.a;
    if (s >= 0 && !graph && map_remove(&j->timed_calls, outer, &call) && g->kind == GPU_KERNEL) {
        SiteTotal *t = &j->sites[s];
        uint64_t from = previous_end > call.a ? previous_end : call.a;
        t->launch_calls++;
        t->launch_cpu_ns += call.b - call.a;
        if (previous_end && g->start > from)
            t->idle_ns += g->start - from;
    }
    if (end != NULL && g->end > previous_end)
        *end = g->end;
}
