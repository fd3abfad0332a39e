/*
 * The tracked state (tracked_sites.h) and the table of known sites: BUCKETS buckets of WAYS ways,
 * each way the name of the blocks allocated at one instruction reached through the same library
 * frames from one user line (KnownSite), read without the GIL under the state's lock, written
 * under the GIL once a miss's line is found.
 */
#include "profiling/_cupti_c/tracked_sites.h" /* first: it includes Python.h */

#include <string.h>

TrackedState tracked = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The bucket of the known sites of blocks allocated at `position`: the ways of one instruction
 * (a library's, reached from several user lines: each nn.Linear's forward) and of others. */
static inline KnownSite *
known_bucket(const void *position)
{
    uintptr_t h = (uintptr_t)position >> 1;
    return &tracked.known[((h ^ (h >> 8)) & (BUCKETS - 1)) * WAYS];
}

#ifdef FRAMES_WITHOUT_GIL

/* The known site of a block allocated while `frame` runs (borrowed), or NULL. Lock held. The
 * frames above are read once, as far as the deepest way asks. */
PyObject *
known_site(Frame *frame)
{
    if (!tracked.remember)
        return NULL;
    const void *position = frame_position(frame);
    void *code = frame_code(frame);
    const KnownSite *bucket = known_bucket(position);
    uint64_t sites_generation = generation_of(tracked.sites);
    void *codes[WALK_KEPT];
    const void *positions[WALK_KEPT];
    int walked = 0;
    Frame *f = frame;
    for (int way = 0; way < WAYS; way++) {
        const KnownSite *k = &bucket[way];
        if (k->name == NULL || k->position != position || k->code != code
            || k->sites_generation != sites_generation)
            continue;
        if (k->depth == 0)
            return k->name;
        if (k->kinds_generation != generation_of(tracked.kinds))
            continue;
        for (; walked < k->depth && (f = frame_back(f)) != NULL; walked++) {
            codes[walked] = frame_code(f);
            positions[walked] = frame_position(f);
        }
        if (walked >= k->depth && positions[k->depth - 1] == k->user
            && memcmp(codes, k->codes, (size_t)k->depth * sizeof(void *)) == 0)
            return k->name;
    }
    return NULL;
}

/* `frame` and those above it, into `miss` (the thread's own frames: read without the GIL). */
void
record_chain(Frame *frame, Miss *miss)
{
    int depth = 0;
    for (Frame *f = frame; f != NULL && depth < CHAIN; f = frame_back(f), depth++) {
        miss->codes[depth] = frame_code(f);
        miss->lastis[depth] = frame_lasti(f);
        miss->positions[depth] = frame_position(f);
    }
    miss->depth = depth;
}
#endif

/* The site of `miss` by the dicts along its frames, as cached_site finds a live frame's
 * (borrowed; NULL: not found, or an error set); `k` filled for known_site where found. */
PyObject *
chain_site(TorchMemory *m, const Miss *miss, KnownSite *k)
{
    *k = (KnownSite){.position = miss->positions[0],
                     .code = miss->codes[0],
                     .sites_generation = generation_of(m->sites),
                     .kinds_generation = generation_of(m->kinds)};
    if (miss->depth == 0)
        return NULL;
    PyObject *name = own_site_at(m, miss->codes[0], miss->lastis[0]);
    if (name != NULL || PyErr_Occurred())
        return name;
    int kind = kind_of_code(m, miss->codes[0]);
    if (!PASSED_OVER(kind))
        return NULL;
    for (int depth = 1; depth < miss->depth; depth++) {
        kind = kind_of_code(m, miss->codes[depth]);
        if (kind == KIND_USER) {
            name = own_site_at(m, miss->codes[depth], miss->lastis[depth]);
            k->depth = depth <= WALK_KEPT ? depth : -1; /* -1: not to be kept */
            for (int i = 0; i < depth && i < WALK_KEPT; i++)
                k->codes[i] = miss->codes[i + 1];
            k->user = miss->positions[depth];
            return name;
        }
        if (!PASSED_OVER(kind))
            return NULL;
    }
    return NULL;
}

/* Whether `a` and `b` name the same frames (their names aside). */
static int
same_frames(const KnownSite *a, const KnownSite *b)
{
    return a->position == b->position && a->code == b->code && a->depth == b->depth
           && a->user == b->user
           && memcmp(a->codes, b->codes, (size_t)a->depth * sizeof(void *)) == 0;
}

/* `k` (its name kept) into the known sites, where this owner remembers: in its bucket, over the
 * way with the same frames, else an empty or stale one, else the ways in turn. */
void
remember_known(TorchMemory *m, KnownSite *k, PyObject *kept)
{
    if (!m->remember || k->depth < 0 || tracked.owner != m)
        return;
    k->name = kept;
    pthread_mutex_lock(&tracked.lock);
    KnownSite *bucket = known_bucket(k->position);
    KnownSite *into = NULL;
    for (int way = 0; way < WAYS && into == NULL; way++)
        if (bucket[way].name != NULL && same_frames(&bucket[way], k))
            into = &bucket[way];
    for (int way = 0; way < WAYS && into == NULL; way++)
        if (bucket[way].name == NULL || bucket[way].sites_generation != k->sites_generation
            || bucket[way].kinds_generation != k->kinds_generation)
            into = &bucket[way];
    if (into == NULL)
        into = &bucket[tracked.evictions++ % WAYS];
    *into = *k;
    pthread_mutex_unlock(&tracked.lock);
}
