/* A share over 1..9 caches (owners) in front of one storage: memory, or
 * one or two software controllers (striped), each owner with its own queue
 * pair on every controller, and optionally a host tier below each cache.
 * Storage bytes are read back directly for the checks. Used by
 * tests/test_share.c and tests/stress.c. */
#ifndef SHARE_RIG_H
#define SHARE_RIG_H
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpumem_share.h"
#include "gpumem_swctl.h"
#include "gpumem_tier.h"

enum { SHARE_RIG_LINE = 512 };

typedef struct share_rig {
    uint32_t n_owners, n_ctrls, n_lines;
    unsigned char *mem; /* memory storage (n_ctrls 0) */
    gpumem_swctl *ctls[2];
    gpumem_nvme_qp *pairs[GPUMEM_SHARE_MAX_OWNERS][2];
    gpumem_cache *caches[GPUMEM_SHARE_MAX_OWNERS];
    gpumem_tier *tiers[GPUMEM_SHARE_MAX_OWNERS];
    gpumem_share *share;
    void *queue_mem;              /* the miss queue (share_rig_serve) */
    gpumem_share_server *server;  /* its server thread */
} share_rig;

/* Owners 1..n_owners-1, each a cache of n_slots slots over n_lines lines of
 * SHARE_RIG_LINE bytes, all zero at first; tier_slots > 0: each cache has
 * a host tier of that many slots below it, every eviction moved there (tier
 * order placement). */
static gpumem_status share_rig_make_slots(share_rig *r, uint32_t n_owners, uint32_t n_ctrls, uint32_t n_lines,
                                          const uint32_t *slots, uint32_t tier_slots);

static gpumem_status share_rig_make_tiered(share_rig *r, uint32_t n_owners, uint32_t n_ctrls, uint32_t n_lines,
                                           uint32_t n_slots, uint32_t tier_slots) {
    uint32_t slots[GPUMEM_SHARE_MAX_OWNERS], o;
    for (o = 0; o < GPUMEM_SHARE_MAX_OWNERS; o++) slots[o] = n_slots;
    return share_rig_make_slots(r, n_owners, n_ctrls, n_lines, slots, tier_slots);
}

/* The same with slots[o] slots in owner o's cache. */
static gpumem_status share_rig_make_slots(share_rig *r, uint32_t n_owners, uint32_t n_ctrls, uint32_t n_lines,
                                          const uint32_t *slots, uint32_t tier_slots) {
    gpumem_share_desc sd = gpumem_share_desc_default(n_owners);
    gpumem_status st;
    uint32_t o, j;
    memset(r, 0, sizeof *r);
    sd.n_entries = 2 * n_lines; /* room for every line, whatever the caches hold */
    r->n_owners = n_owners;
    r->n_ctrls = n_ctrls;
    r->n_lines = n_lines;
    if (!n_ctrls && !(r->mem = (unsigned char *)calloc(n_lines, SHARE_RIG_LINE))) return GPUMEM_ENOMEM;
    for (j = 0; j < n_ctrls; j++) {
        gpumem_swctl_config c = gpumem_swctl_config_default();
        c.lba_bytes = 512;
        c.n_blocks = (n_lines / n_ctrls + 1) * (SHARE_RIG_LINE / 512);
        if ((st = gpumem_swctl_create(&c, &r->ctls[j])) != GPUMEM_OK) return st;
        for (o = 1; o < n_owners; o++)
            if ((st = gpumem_swctl_add_qp(r->ctls[j], 64, &r->pairs[o][j])) != GPUMEM_OK) return st;
    }
    for (j = 0; j < n_ctrls; j++)
        if ((st = gpumem_swctl_start(r->ctls[j])) != GPUMEM_OK) return st;
    for (o = 1; o < n_owners; o++) {
        gpumem_cache_desc d = gpumem_cache_desc_default();
        d.n_lines = n_lines;
        d.line_bytes = SHARE_RIG_LINE;
        d.n_slots = slots[o];
        d.full_sweeps = 4;
        if (n_ctrls) {
            gpumem_nvme_ns ns = gpumem_swctl_ns(r->ctls[0]);
            d.backing = gpumem_cache_backing_nvme(r->pairs[o], n_ctrls, 1, &ns, 0, GPUMEM_CACHE_STRIPE);
        } else {
            d.backing = gpumem_cache_backing_memory(r->mem);
        }
        if ((st = gpumem_cache_create(&d, &r->caches[o])) != GPUMEM_OK) return st;
        sd.caches[o] = r->caches[o];
        if (tier_slots) {
            gpumem_tier_desc td = gpumem_tier_desc_default(r->caches[o], tier_slots);
            td.placement = GPUMEM_TIER_ORDER;
            if ((st = gpumem_tier_create(&td, &r->tiers[o])) != GPUMEM_OK) return st;
        }
    }
    return gpumem_share_create(&sd, &r->share);
}

static inline gpumem_status share_rig_make(share_rig *r, uint32_t n_owners, uint32_t n_ctrls, uint32_t n_lines,
                                           uint32_t n_slots) {
    return share_rig_make_tiered(r, n_owners, n_ctrls, n_lines, n_slots, 0);
}

/* Line l where storage holds it (memory, or a controller's RAM: striped). */
static unsigned char *share_rig_stored_at(const share_rig *r, uint32_t l) {
    if (!r->n_ctrls) return r->mem + (size_t)l * SHARE_RIG_LINE;
    return (unsigned char *)gpumem_swctl_ram(r->ctls[l % r->n_ctrls]) + (size_t)(l / r->n_ctrls) * SHARE_RIG_LINE;
}

/* Byte b of line l as storage holds it. */
static unsigned char share_rig_stored(const share_rig *r, uint32_t l, uint32_t b) {
    return share_rig_stored_at(r, l)[b];
}

/* Attach a miss queue of `cells` (timeout_ns: 0 for the default) and start
 * its server: the owners' threads that stand for GPU threads
 * (gpumem_share_thread_as_gpu) then have their misses served by it. */
static gpumem_status share_rig_serve(share_rig *r, uint32_t cells, uint64_t timeout_ns) {
    size_t bytes = gpumem_share_queue_bytes(cells);
    gpumem_status st;
    if (!bytes || !(r->queue_mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) return GPUMEM_ENOMEM;
    if ((st = gpumem_share_queue_init(r->share, r->queue_mem, bytes, cells, timeout_ns)) != GPUMEM_OK) return st;
    return gpumem_share_server_start(r->share, 0, &r->server);
}

static gpumem_status share_rig_free(share_rig *r) {
    gpumem_status st;
    uint32_t o, j;
    if (r->server) gpumem_share_server_stop(r->server);
    st = r->share ? gpumem_share_destroy(r->share) : GPUMEM_OK;
    free(r->queue_mem);
    for (o = 1; o < r->n_owners; o++) {
        if (r->tiers[o]) gpumem_tier_destroy(r->tiers[o]);
        gpumem_cache_destroy(r->caches[o]);
    }
    for (j = 0; j < r->n_ctrls; j++) gpumem_swctl_destroy(r->ctls[j]);
    free(r->mem);
    return st;
}

/* Sleep ns nanoseconds (below a second): gpumem__host_sleep_ns's twin,
 * because that one is declared for the host pass only, and nvcc's device
 * pass parses these helpers too (make share-cuda builds test_share as CUDA). */
static inline void share_rig_sleep_ns(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Retries give up after this long, not after a count: a count can run out
 * in a fraction of a second while the thread it waits for is not scheduled
 * (ThreadSanitizer on 2 busy cores), and a time still reports a hang. */
#define SHARE_RIG_PATIENCE_NS 30000000000ull

/* Take a line, retrying while the owner's cache is full of its own pinned
 * writes or no base is free: a host thread merges its writes (flush), then
 * tries again; a thread standing for a GPU thread cannot flush (get asked
 * the server to make room already), so it pauses and tries again, and also
 * after ETIMEDOUT (a queue with a short timeout: its request was withdrawn). */
static gpumem_status share_rig_get(share_rig *r, uint32_t o, uint32_t l, int write, unsigned char **p) {
    gpumem_status st;
    uint64_t give_up = gpumem_clock_ns() + SHARE_RIG_PATIENCE_NS;
    while (((st = gpumem_share_get(r->share, o, l, write, (void **)p)) == GPUMEM_EAGAIN ||
            (st == GPUMEM_ETIMEDOUT && gpumem__share_posts())) &&
           gpumem_clock_ns() < give_up) {
        if (gpumem__share_posts()) share_rig_sleep_ns(20000);
        else gpumem_share_flush(r->share, o);
    }
    return st;
}

/* Release, again while the host's part (a GPU owner's release: the host's
 * acquire) answers EAGAIN (a host thread holds a stale copy) or ETIMEDOUT
 * (withdrawn, a queue with a short timeout). */
static gpumem_status share_rig_release(share_rig *r, uint32_t o, uint32_t first, uint32_t n) {
    gpumem_status st;
    uint64_t give_up = gpumem_clock_ns() + SHARE_RIG_PATIENCE_NS;
    while (((st = gpumem_share_release(r->share, o, first, n)) == GPUMEM_EAGAIN || st == GPUMEM_ETIMEDOUT) &&
           gpumem_clock_ns() < give_up)
        share_rig_sleep_ns(20000);
    return st;
}

/* Flush, again while it answers EAGAIN (a server thread still ends a GPU
 * owner's request). */
static inline gpumem_status share_rig_flush(share_rig *r, uint32_t o) {
    gpumem_status st;
    uint64_t give_up = gpumem_clock_ns() + SHARE_RIG_PATIENCE_NS;
    while ((st = gpumem_share_flush(r->share, o)) == GPUMEM_EAGAIN && gpumem_clock_ns() < give_up)
        share_rig_sleep_ns(20000);
    return st;
}
#endif
