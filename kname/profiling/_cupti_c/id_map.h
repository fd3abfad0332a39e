/*
 * An insertion-ordered map of correlation ids, the table behind each of join.py's dicts in the
 * join in C (join.c) and its launch times (launch_times.c). Not thread-safe: its users hold the
 * recorder's activity_lock.
 */
#ifndef KNAME_NATIVE_CUPTI_ID_MAP_H
#define KNAME_NATIVE_CUPTI_ID_MAP_H

#include "_common_c/common.h" /* first: it includes Python.h */

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t key;
    uint32_t live;
    uint64_t a, b; /* what the map keeps for the key */
} MapEntry;

typedef struct {
    MapEntry *entries; /* in insertion order; a removed entry stays, dead, until compacted */
    size_t head, tail, capacity, live;
    uint32_t *index;   /* linear probing: an entry's position + 1 (0: empty); live ones only */
    size_t index_size; /* a power of 2, at least twice `live` */
} Map;

/* `key`'s entry, or NULL. */
INTERNAL MapEntry *map_find(const Map *m, uint32_t key);

/* The entry of `key`, made at the end when new (its values zero); NULL: no memory. An existing
 * key keeps its place, as in a dict. */
INTERNAL MapEntry *map_put(Map *m, uint32_t key);

/* `key`'s entry removed: 1 (its values in *out, when given), or 0 when there is none. */
INTERNAL int map_remove(Map *m, uint32_t key, MapEntry *out);

/* The oldest entry (NULL when empty). */
INTERNAL MapEntry *map_oldest(Map *m);

INTERNAL void map_free(Map *m);

#endif /* KNAME_NATIVE_CUPTI_ID_MAP_H */
