/*
 * The join of kname._native_cupti (see join.h): join.py's tables (an
 * insertion-ordered map of correlation ids for each of its dicts: id_map.c; an insert-only table
 * for the totals), its steps, and a snapshot of its totals for profile(). Each line's launch
 * times are launch_times.c's.
 */
#include "profiling/_cupti_c/join.h"

#include "profiling/_cupti_c/launch_times.h"

#include <stdlib.h>
#include <string.h>

/* ---- the join's state */

void
join_free(Join *j)
{
    map_free(&j->pending);
    map_free(&j->children);
    map_free(&j->recent);
    map_free(&j->externals);
    map_free(&j->orphans);
    map_free(&j->graphs);
    index_free(&j->site_of);
    index_free(&j->kernel_of);
    index_free(&j->replay_line);
    index_free(&j->replay_of);
    map_free(&j->timed_calls);
    map_free(&j->outer_of);
    index_free(&j->stream_of);
    free(j->stream_ends);
    graph_nodes_free(&j->nodes);
    free(j->ids);
    free(j->records);
    free(j->sites);
    free(j->kernels);
    free(j->replays);
    free(j->memory.is_memory_api);
    free(j->memory.calls);
    free(j->memory.facts);
    memset(j, 0, sizeof *j);
}

/* ---- lists */

static int
append_id(Join *j, MapEntry *list, uint32_t id)
{
    uint32_t node;
    if (j->id_free) {
        node = j->id_free - 1;
        j->id_free = j->ids[node].next;
    }
    else {
        if (!grow((void **)&j->ids, &j->id_room, j->id_count, sizeof *j->ids))
            return 0;
        node = (uint32_t)j->id_count++;
    }
    j->ids[node] = (IdNode){id, 0};
    if (list->a == 0)
        list->a = node + 1;
    else
        j->ids[list->b - 1].next = node + 1;
    list->b = node + 1;
    return 1;
}

static int
append_record(Join *j, MapEntry *list, const GpuRecord *record)
{
    uint32_t node;
    if (j->record_free) {
        node = j->record_free - 1;
        j->record_free = j->records[node].next;
    }
    else {
        if (!grow((void **)&j->records, &j->record_room, j->record_nodes, sizeof *j->records))
            return 0;
        node = (uint32_t)j->record_nodes++;
    }
    j->records[node] = (RecordNode){*record, 0};
    if (list->a == 0)
        list->a = node + 1;
    else
        j->records[list->b - 1].next = node + 1;
    list->b = node + 1;
    return 1;
}

/* ---- totals */

static inline uint64_t
duration_of(const GpuRecord *g)
{
    return g->end > g->start ? g->end - g->start : 0;
}

/* The totals of `site`, made on first use (join.py's _totals); -1: no memory. */
static int64_t
site_totals(Join *j, const void *site)
{
    int64_t found = index_get(&j->site_of, (uint64_t)(uintptr_t)site);
    if (found >= 0)
        return found;
    if (!grow((void **)&j->sites, &j->site_room, j->site_count, sizeof *j->sites)
        || !index_set(&j->site_of, (uint64_t)(uintptr_t)site, (uint32_t)j->site_count))
        return -1;
    j->sites[j->site_count] = (SiteTotal){site, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    return (int64_t)j->site_count++;
}

/* SiteTotals.add: one GPU record counted at `site`; the site's index, or -1 (no memory). */
static int64_t
count_record(Join *j, const void *site, const GpuRecord *g)
{
    int64_t s = site_totals(j, site);
    uint32_t work = work_of(g);
    uint64_t key = ((uint64_t)s << 32) | work;
    int64_t k = s < 0 ? -1 : index_get(&j->kernel_of, key);
    if (s >= 0 && k < 0) {
        if (grow((void **)&j->kernels, &j->kernel_room, j->kernel_count, sizeof *j->kernels)
            && index_set(&j->kernel_of, key, (uint32_t)j->kernel_count)) {
            k = (int64_t)j->kernel_count++;
            j->kernels[k] = (KernelTotal){work, 0, 0, 0};
            SiteTotal *t = &j->sites[s];
            if (t->head == 0)
                t->head = (uint32_t)k + 1;
            else
                j->kernels[t->tail - 1].next = (uint32_t)k + 1;
            t->tail = (uint32_t)k + 1;
        }
    }
    if (k < 0) {
        j->no_memory = 1;
        return -1;
    }
    SiteTotal *t = &j->sites[s];
    uint64_t duration = duration_of(g);
    t->launches++;
    t->gpu_ns += duration;
    if (!t->first || g->correlation_id < t->first)
        t->first = g->correlation_id;
    j->kernels[k].launches++;
    j->kernels[k].gpu_ns += duration;
    return s;
}

/* The totals of site `s` replayed at `replay`, made on first use; -1: no memory. */
static int64_t
replay_totals(Join *j, int64_t s, const void *replay)
{
    int64_t line = index_get(&j->replay_line, (uint64_t)(uintptr_t)replay);
    if (line < 0) {
        line = (int64_t)j->replay_line.count;
        if (!index_set(&j->replay_line, (uint64_t)(uintptr_t)replay, (uint32_t)line))
            return -1;
    }
    uint64_t key = ((uint64_t)s << 32) | (uint64_t)line;
    int64_t r = index_get(&j->replay_of, key);
    if (r >= 0)
        return r;
    if (!grow((void **)&j->replays, &j->replay_room, j->replay_count, sizeof *j->replays)
        || !index_set(&j->replay_of, key, (uint32_t)j->replay_count))
        return -1;
    r = (int64_t)j->replay_count++;
    j->replays[r] = (ReplayTotal){replay, 0, 0, 0};
    SiteTotal *t = &j->sites[s];
    if (t->replay_head == 0)
        t->replay_head = (uint32_t)r + 1;
    else
        j->replays[t->replay_tail - 1].next = (uint32_t)r + 1;
    t->replay_tail = (uint32_t)r + 1;
    return r;
}

/* _count: a record launched at `site`; graph work goes to the line that made its node. */
static void
join_count(Join *j, const void *site, const GpuRecord *g)
{
    if (!(g->graph_node_id || g->graph_id)) {
        times_count(j, count_record(j, site, g), g, 0);
        return;
    }
    const void *capture;
    if (!graph_nodes_charged(&j->nodes, g->graph_node_id, g->graph_id, g->correlation_id, site,
                             &capture)) {
        int64_t s = count_record(j, site, g); /* add_unseen */
        if (s >= 0) {
            j->sites[s].unseen_launches++;
            j->sites[s].unseen_gpu_ns += duration_of(g);
        }
        times_count(j, s, g, 1);
        return;
    }
    int64_t s = count_record(j, capture, g); /* add_replayed */
    times_count(j, s, g, 1);
    int64_t r = s < 0 ? -1 : replay_totals(j, s, site);
    if (s >= 0 && r < 0)
        j->no_memory = 1;
    if (r >= 0) {
        j->replays[r].launches++;
        j->replays[r].gpu_ns += duration_of(g);
    }
}

/* ---- join.py's steps */

static void
join_remember(Join *j, uint32_t id, const void *site)
{
    MapEntry *entry = map_put(&j->recent, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = (uint64_t)(uintptr_t)site;
    if ((Py_ssize_t)j->recent.live > j->recent_window)
        map_remove(&j->recent, map_oldest(&j->recent)->key, NULL);
}

static void
join_retire_one(Join *j, uint32_t id, const void *site)
{
    if (map_remove(&j->pending, id, NULL))
        join_remember(j, id, site);
}

/* The calls nested in `id` leave the children table; each is retired when `retire` is set. */
static void
join_take_children(Join *j, uint32_t id, const void *site, int retire)
{
    MapEntry list;
    if (!map_remove(&j->children, id, &list))
        return;
    for (uint32_t node = (uint32_t)list.a; node != 0;) {
        IdNode child = j->ids[node - 1];
        j->ids[node - 1].next = j->id_free;
        j->id_free = node;
        if (retire)
            join_retire_one(j, child.id, site);
        node = child.next;
    }
}

/* _retire: joined, the launch and the calls nested around it leave the pending table. */
static void
join_retire(Join *j, uint32_t id, uint32_t parent, const void *site)
{
    join_retire_one(j, id, site);
    join_take_children(j, id, site, 1);
    if (parent) {
        join_retire_one(j, parent, site);
        join_take_children(j, parent, site, 1);
    }
}

/* _site_of: the site of a record with this correlation id (NULL: not known yet). */
static const void *
join_site_of(Join *j, uint32_t id)
{
    MapEntry *launch = map_find(&j->pending, id);
    if (launch != NULL) {
        const void *site = (const void *)(uintptr_t)launch->a;
        uint32_t parent = (uint32_t)launch->b;
        if (launch->b >> 32) {
            if (map_put(&j->graphs, id) == NULL)
                j->no_memory = 1;
        }
        else
            join_retire(j, id, parent, site);
        return site;
    }
    MapEntry *recent = map_find(&j->recent, id);
    if (recent != NULL)
        return (const void *)(uintptr_t)recent->a;
    if (map_remove(&j->externals, id, NULL)) { /* no external sites here: kname tags nothing */
        join_remember(j, id, j->unattributed);
        return j->unattributed;
    }
    return NULL;
}

/* _adopt: the records parked under `id` go to the site it now has. */
static void
join_adopt(Join *j, uint32_t id)
{
    MapEntry list;
    if (!map_remove(&j->orphans, id, &list))
        return;
    for (uint32_t node = (uint32_t)list.a; node != 0;) {
        RecordNode orphan = j->records[node - 1];
        j->records[node - 1].next = j->record_free;
        j->record_free = node;
        j->orphan_count--;
        const void *site = join_site_of(j, orphan.record.correlation_id);
        join_count(j, site != NULL ? site : j->unattributed, &orphan.record);
        node = orphan.next;
    }
}

static void
join_park(Join *j, const GpuRecord *g)
{
    if ((Py_ssize_t)j->orphan_count >= j->max_pending) {
        count_record(j, j->unattributed, g); /* past the bound: counted, not kept */
        return;
    }
    MapEntry *list = map_put(&j->orphans, g->correlation_id);
    if (list == NULL || !append_record(j, list, g)) {
        if (list != NULL && list->a == 0)
            map_remove(&j->orphans, g->correlation_id, NULL);
        j->no_memory = 1;
        count_record(j, j->unattributed, g);
        return;
    }
    j->orphan_count++;
}

/* _trim: past max_pending, the oldest tenth of the pending launches goes at once. */
static void
join_trim(Join *j)
{
    Py_ssize_t excess = (Py_ssize_t)j->pending.live - j->max_pending;
    if (excess <= 0)
        return;
    Py_ssize_t count = excess > j->max_pending / 10 ? excess : j->max_pending / 10;
    for (Py_ssize_t i = 0; i < count && j->pending.live; i++) {
        uint32_t id = map_oldest(&j->pending)->key;
        map_remove(&j->pending, id, NULL);
        join_take_children(j, id, NULL, 0);
    }
    j->dropped += (uint64_t)count;
    j->trimmed = 1;
}

/* add_launch */
static void
join_launch(Join *j, const Launch *launch, const void *site)
{
    uint32_t id = launch->correlation_id;
    times_launch(j, launch); /* first: its GPU records may be waiting (join_adopt) */
    j->launch_count++;
    if (!j->first || id < j->first)
        j->first = id;
    MapEntry *entry = map_put(&j->pending, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = (uint64_t)(uintptr_t)site;
    entry->b = (uint64_t)launch->parent | ((uint64_t)(launch->graph != 0) << 32);
    if (launch->parent) {
        MapEntry *list = map_put(&j->children, launch->parent);
        if (list == NULL || !append_id(j, list, id)) {
            if (list != NULL && list->a == 0)
                map_remove(&j->children, launch->parent, NULL);
            j->no_memory = 1;
        }
    }
    if (j->orphans.live && map_find(&j->orphans, id) != NULL)
        join_adopt(j, id);
    if ((Py_ssize_t)j->pending.live > j->max_pending)
        join_trim(j);
}

/* add_activities, for one record */
static void
join_record(Join *j, const GpuRecord *g)
{
    j->record_count++;
    const void *site = join_site_of(j, g->correlation_id);
    if (site == NULL)
        join_park(j, g);
    else
        join_count(j, site, g);
}

/* add_externals, for one link (there are no external sites: nothing was tagged) */
static void
join_external(Join *j, uint32_t id, uint64_t external_id)
{
    if (map_find(&j->pending, id) != NULL || map_find(&j->recent, id) != NULL)
        return; /* a launch record names it already */
    MapEntry *entry = map_put(&j->externals, id);
    if (entry == NULL) {
        j->no_memory = 1;
        return;
    }
    entry->a = external_id;
    if ((Py_ssize_t)j->externals.live > j->recent_window)
        map_remove(&j->externals, map_oldest(&j->externals)->key, NULL);
    join_adopt(j, id);
}

/* ---- --memory: memory calls and records kept apart, for Python */

static int
is_memory_call(const MemoryWaiting *m, const Launch *launch)
{
    return m->on && launch->api < m->api_count && m->is_memory_api[launch->api];
}

static void
memory_keep_call(MemoryWaiting *m, uint32_t correlation_id, const void *site)
{
    if (m->call_count >= m->max_waiting
        || !grow((void **)&m->calls, &m->call_room, m->call_count, sizeof *m->calls)) {
        m->dropped++;
        return;
    }
    m->calls[m->call_count++] = (MemoryCall){correlation_id, site};
}

void
memory_keep_fact(MemoryWaiting *m, const MemoryFact *fact)
{
    if (m->fact_count >= m->max_waiting
        || !grow((void **)&m->facts, &m->fact_room, m->fact_count, sizeof *m->facts)) {
        m->dropped++;
        return;
    }
    m->facts[m->fact_count++] = *fact;
}

void
join_launches(Join *j, const Launch *launches, Py_ssize_t count, const void *no_frame)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        const void *site = launches[i].site != NULL ? launches[i].site : no_frame;
        if (is_memory_call(&j->memory, &launches[i]))
            memory_keep_call(&j->memory, launches[i].correlation_id, site);
        else
            join_launch(j, &launches[i], site);
    }
}

void
join_graph_nodes(Join *j, const NodeEvent *events, Py_ssize_t count, const void *no_frame)
{
    for (Py_ssize_t i = 0; i < count; i++)
        graph_nodes_add(&j->nodes, &events[i], no_frame);
}

void
join_records(Join *j, const GpuRecord *records, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (records[i].kind == GPU_EXTERNAL)
            join_external(j, records[i].correlation_id, records[i].start);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (records[i].kind != GPU_EXTERNAL)
            join_record(j, &records[i]);
    }
}

/* ---- a snapshot of the totals (profile()) */

void
snapshot_free(Snapshot *s)
{
    free(s->sites);
    free(s->kernels);
    free(s->replays);
    memset(s, 0, sizeof *s);
}

/* One more record counted in the snapshot's last site (the unattributed one, at its end). */
static int
snapshot_count(Snapshot *s, SiteCount *site, const GpuRecord *g)
{
    uint32_t work = work_of(g);
    KernelCount *kernel = NULL;
    for (size_t i = site->start; i < site->start + site->count; i++) {
        if (s->kernels[i].work == work)
            kernel = &s->kernels[i];
    }
    if (kernel == NULL) {
        if (!grow((void **)&s->kernels, &s->kernel_room, s->kernel_count, sizeof *s->kernels))
            return 0;
        kernel = &s->kernels[s->kernel_count++];
        *kernel = (KernelCount){work, 0, 0};
        site->count++;
    }
    if (!site->first || g->correlation_id < site->first)
        site->first = g->correlation_id;
    kernel->launches++;
    kernel->gpu_ns += duration_of(g);
    return 1;
}

static int
snapshot_site(Snapshot *s, const Join *j, const SiteTotal *t, SiteCount *into)
{
    *into = (SiteCount){t->site, t->first, s->kernel_count, 0, s->replay_count, 0,
                        t->unseen_launches, t->unseen_gpu_ns, t->launch_calls, t->launch_cpu_ns,
                        t->idle_ns};
    for (uint32_t k = t->head; k != 0; k = j->kernels[k - 1].next) {
        if (!grow((void **)&s->kernels, &s->kernel_room, s->kernel_count, sizeof *s->kernels))
            return 0;
        const KernelTotal *kernel = &j->kernels[k - 1];
        s->kernels[s->kernel_count++] = (KernelCount){kernel->work, kernel->launches,
                                                      kernel->gpu_ns};
        into->count++;
    }
    for (uint32_t r = t->replay_head; r != 0; r = j->replays[r - 1].next) {
        if (!grow((void **)&s->replays, &s->replay_room, s->replay_count, sizeof *s->replays))
            return 0;
        const ReplayTotal *replay = &j->replays[r - 1];
        s->replays[s->replay_count++] = (ReplayCount){replay->replay, replay->launches,
                                                      replay->gpu_ns};
        into->replay_count++;
    }
    return 1;
}

int
join_snapshot(const Join *j, Snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->sites = malloc((j->site_count ? j->site_count : 1) * sizeof *s->sites);
    if (s->sites == NULL)
        return 0;
    const SiteTotal *unattributed = NULL;
    for (size_t i = 0; i < j->site_count; i++) {
        if (j->sites[i].site == j->unattributed)
            unattributed = &j->sites[i];
        else if (!snapshot_site(s, j, &j->sites[i], &s->sites[s->site_count++]))
            return 0;
    }
    s->unattributed = (SiteCount){j->unattributed, 0, s->kernel_count, 0, s->replay_count, 0,
                                  0, 0, 0, 0, 0};
    if (unattributed != NULL && !snapshot_site(s, j, unattributed, &s->unattributed))
        return 0;
    for (size_t p = j->orphans.head; p < j->orphans.tail; p++) {
        const MapEntry *list = &j->orphans.entries[p];
        for (uint32_t node = list->live ? (uint32_t)list->a : 0; node != 0;
             node = j->records[node - 1].next) {
            const GpuRecord *orphan = &j->records[node - 1].record;
            if (j->first && orphan->correlation_id >= j->first) {
                if (!snapshot_count(s, &s->unattributed, orphan))
                    return 0;
            }
            else
                s->earlier++;
        }
    }
    for (size_t p = j->pending.head; p < j->pending.tail; p++) {
        const MapEntry *launch = &j->pending.entries[p];
        int graph_seen = (launch->b >> 32) && map_find(&j->graphs, launch->key) != NULL;
        s->unmatched += launch->live && !graph_seen;
    }
    s->dropped = j->dropped;
    return 1;
}

