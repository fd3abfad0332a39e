/*
 * An insertion-ordered map of correlation ids (one of join.py's dicts), for the join in C: each
 * key keeps two numbers, entries stay in the order they were put (the oldest is first), lookups
 * by linear probing. See id_map.h.
 */
#include "profiling/_cupti_c/id_map.h"

#include <stdlib.h>
#include <string.h>

static inline size_t
map_home(const Map *m, uint32_t key)
{
    return (size_t)(key * 2654435761u) & (m->index_size - 1);
}

static size_t
map_slot(const Map *m, uint32_t key)
{
    size_t mask = m->index_size - 1, i = map_home(m, key);
    while (m->index[i] != 0 && m->entries[m->index[i] - 1].key != key)
        i = (i + 1) & mask;
    return i;
}

MapEntry *
map_find(const Map *m, uint32_t key)
{
    if (m->live == 0)
        return NULL;
    uint32_t at = m->index[map_slot(m, key)];
    return at ? &m->entries[at - 1] : NULL;
}

static void
map_reindex(Map *m)
{
    memset(m->index, 0, m->index_size * sizeof *m->index);
    for (size_t p = m->head; p < m->tail; p++) {
        if (m->entries[p].live)
            m->index[map_slot(m, m->entries[p].key)] = (uint32_t)p + 1;
    }
}

/* The entry of `key`, made at the end when new (its values zero); NULL: no memory. An existing
 * key keeps its place, as in a dict. */
MapEntry *
map_put(Map *m, uint32_t key)
{
    MapEntry *found = map_find(m, key);
    if (found != NULL)
        return found;
    if ((m->live + 1) * 2 > m->index_size) {
        size_t size = m->index_size ? 2 * m->index_size : 64;
        uint32_t *index = malloc(size * sizeof *index);
        if (index == NULL)
            return NULL;
        free(m->index);
        m->index = index;
        m->index_size = size;
        map_reindex(m);
    }
    if (m->tail == m->capacity) {
        if (m->capacity && m->live * 2 <= m->capacity) { /* half of it is dead: compacted */
            size_t to = 0;
            for (size_t p = m->head; p < m->tail; p++) {
                if (m->entries[p].live)
                    m->entries[to++] = m->entries[p];
            }
            m->head = 0;
            m->tail = to;
            map_reindex(m);
        }
        else {
            size_t capacity = m->capacity ? 2 * m->capacity : 64;
            MapEntry *grown = realloc(m->entries, capacity * sizeof *grown);
            if (grown == NULL)
                return NULL;
            m->entries = grown;
            m->capacity = capacity;
        }
    }
    MapEntry *entry = &m->entries[m->tail];
    *entry = (MapEntry){key, 1, 0, 0};
    m->index[map_slot(m, key)] = (uint32_t)m->tail + 1;
    m->tail++;
    m->live++;
    return entry;
}

/* `key`'s entry removed: 1 (its values in *out, when given), or 0 when there is none. */
int
map_remove(Map *m, uint32_t key, MapEntry *out)
{
    if (m->live == 0)
        return 0;
    size_t mask = m->index_size - 1, i = map_slot(m, key);
    if (m->index[i] == 0)
        return 0;
    MapEntry *entry = &m->entries[m->index[i] - 1];
    if (out != NULL)
        *out = *entry;
    entry->live = 0;
    m->live--;
    /* Backward-shift deletion: each later entry of the probe run moves up unless its home
     * lies cyclically in (i, j], so that no run is broken. */
    for (size_t j = (i + 1) & mask; m->index[j] != 0; j = (j + 1) & mask) {
        size_t home = map_home(m, m->entries[m->index[j] - 1].key);
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            m->index[i] = m->index[j];
            i = j;
        }
    }
    m->index[i] = 0;
    while (m->head < m->tail && !m->entries[m->head].live)
        m->head++;
    if (m->live == 0)
        m->head = m->tail = 0;
    return 1;
}

/* The oldest entry (NULL when empty). */
MapEntry *
map_oldest(Map *m)
{
    return m->live ? &m->entries[m->head] : NULL;
}

void
map_free(Map *m)
{
    free(m->entries);
    free(m->index);
    memset(m, 0, sizeof *m);
}
