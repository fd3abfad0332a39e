/*
 * The GOT slots the driver hook writes (got_slots.c): one scan of every loaded object, again
 * when objects were loaded since, and every slot written back.
 */
#ifndef KNAME_NATIVE_GOT_SLOTS_H
#define KNAME_NATIVE_GOT_SLOTS_H

#include <stddef.h>

#if defined(KNAME_NVTX) && defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define KNAME_DRIVER_HOOK 1

/* What a slot naming `name` (holding `current`; the object spans [low, high)) is to hold: NULL
 * or `current` to leave it. */
typedef void *(*SlotReplacement)(const char *name, void *current, void *low, void *high);

/* Slots may be written from now on, by `replacement`, in every object but the one loaded at
 * `own_base` (kname._native); the next got_rescan() scans every object. */
INTERNAL void got_begin(void *own_base, SlotReplacement replacement);
/* Every object loaded since the last scan patched: 0 where a slot could not be written. */
INTERNAL int got_rescan(void);
/* Every slot written back to what it held first; no slot is written until got_begin(). */
INTERNAL void got_restore(void);
/* How many slots hold a replacement now, and whether slots may be written. */
INTERNAL size_t got_slots_written(int *installed);
#endif

#endif /* KNAME_NATIVE_GOT_SLOTS_H */
