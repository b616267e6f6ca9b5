/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_tier_path.h - the host tier's data path: its state and the hooks
 * the cache calls at an acquire, a miss, an eviction and a flush. NOT FOR
 * DIRECT INCLUSION: include gpumem_tier.h (the tier's control: description,
 * init and create, training, statistics, detach; its USAGE and DESIGN) or
 * gpumem_cache.h, which include this.
 *
 * Why apart from gpumem_tier.h: the cache makes direct calls into these
 * hooks (no function pointer on the device), so every file that uses the
 * cache must have their definitions, whatever it includes and in whatever
 * order; and the tier's control uses the cache's public API (flush,
 * acquire). So the data path sits below the cache and the control above
 * it (docs/headers.md). Built on the cache's layout (gpumem_cache_core.h),
 * whose private slot I/O it uses by design.
 *
 * GPUMEM_CACHE_TIER=0 compiles the hooks out (a constant "no tier"): see
 * gpumem_cache.h.
 */
#ifndef GPUMEM_TIER_PATH_H
#define GPUMEM_TIER_PATH_H

#include "gpumem_cache_core.h"

/* ---- the host tier's hooks ----------------------------------------------- */

/* A cache may have a host-memory tier below it, exclusive with it
 * (gpumem_tier.h; gpumem_tier_init attaches it). The cache calls the tier at
 * four points: every acquire (GMT's virtual time), a miss (host memory is
 * looked at before storage), an eviction (keep the line, move it to host
 * memory, or bypass: decided in the search for a slot, carried out after
 * it) and a flush (both tiers are written back). Direct calls, not
 * function pointers, so device code pays no indirect call; defined here,
 * below the cache, so that every file using the cache has them (top of
 * this header). With no tier attached (tier NULL) none is made, and the
 * cache behaves exactly as without one. */
struct gpumem_tier;

/* A line found (and claimed) in the host tier, to be copied into its GPU
 * slot. The warp of a coalesced acquire copies it cooperatively (GMT's
 * zero-copy warp transfer), then gpumem__cache_fill_finish publishes it. */
typedef struct gpumem__tier_copy {
    const unsigned char *src; /* the host slot */
    unsigned char *dst;       /* the cache slot */
    uint32_t bytes;
    uint32_t hslot;           /* host slot, freed once copied */
    uint32_t dirty;           /* the host copy was dirty: so is the line */
    uint32_t pending;         /* 1: the copy is the caller's to make */
    uint32_t slot;            /* the cache slot */
    uint32_t write;           /* the acquire writes */
} gpumem__tier_copy;

/* What the tier did with an evicted line: nothing (the cache writes a dirty
 * line back and drops it), moved it to host memory, or needs a write to
 * storage first (a dirty host line it displaces to make room: *io). (Whether
 * to keep a candidate instead is gpumem__tier_place's GPUMEM_PLACE_KEEP.) */
enum { GPUMEM__TIER_BYPASS = 0, GPUMEM__TIER_MOVED = 1, GPUMEM__TIER_WRITE_FIRST = 2 };
/* That write: `line`, in slot k of the host tier's pool. The cache makes it
 * (a step of its miss path, gpumem__miss_step) and hands the status to
 * gpumem__tier_evict_resume, so that the hook's call does no I/O: on the
 * device a call's registers add to those live around it, and an NVMe
 * command under the hook made it the costliest point of every kernel that
 * acquires a line. The miss path's next I/O takes the same form. */
typedef struct gpumem__tier_io {
    const gpumem__slot_pool *pool;
    uint64_t line;
    uint32_t k;
} gpumem__tier_io;
/* Candidates GMT-Reuse may keep (predicted short reuse) in one search for a
 * slot before it must evict: the paper gives no bound, and without one a cache of lines
 * all predicted short would never free a slot (the simulator uses the same). */
#define GPUMEM_TIER_MAX_SKIPS 16u

/* ---- the tier's state ------------------------------------------------------
 * The DESIGN of the tier (exclusive tiers, host words, the three-tier read
 * path, who owns what when) is at the top of gpumem_tier.h. */
#if GPUMEM_CACHE_TIER
enum { GPUMEM_TIER_GMT_REUSE = 0, GPUMEM_TIER_ORDER = 1, GPUMEM_TIER_NEVER_HOST = 2, GPUMEM_TIER_PLACEMENTS = 3 };

#define GPUMEM_TIER_IN 0x80000000u
#define GPUMEM_TIER_BUSY 0x40000000u
#define GPUMEM_TIER_DIRTY 0x20000000u
#define GPUMEM_TIER_SLOT_MASK 0x1FFFFFFFu
#define GPUMEM_TIER_MAX_SLOTS GPUMEM_TIER_SLOT_MASK
#define GPUMEM_TIER_NO_SAMPLE UINT64_MAX
/* GMT-Reuse: accesses sampled for the model by default (the paper collects
 * "hundreds of thousands" of samples; the simulator fits over 4M accesses). */
#define GPUMEM_TIER_DEFAULT_TRAIN (1ull << 20)

enum { /* counter indices */
    GPUMEM__TS_HOST_HITS, GPUMEM__TS_HOST_MISSES, GPUMEM__TS_MOVES, GPUMEM__TS_DIRTY_MOVES, GPUMEM__TS_BYPASSES,
    GPUMEM__TS_KEEPS, GPUMEM__TS_HOST_EVICTIONS, GPUMEM__TS_WRITEBACKS, GPUMEM__TS_IO_ERRORS,
    GPUMEM__TS_VIOLATIONS, GPUMEM__TS_N
};

typedef struct gpumem_tier {
    /* set at init, read-only afterwards */
    gpumem_cache *cache;
    uint32_t *home;            /* per line: IN | BUSY | DIRTY | host slot */
    gpumem__cache_slot *slots; /* per host slot: lock, policy word, tag */
    uint64_t *free_map;        /* bit per host slot: empty and not taken */
    gpumem__slot_pool pool;    /* the host slots' data */
    uint64_t n_lines;
    uint32_t n_slots, placement, policy;
    uint64_t *samples;         /* the first accesses' lines, for training (NO_SAMPLE: not yet written) */
    uint64_t sample_cap;
    void *owned_;              /* gpumem_tier_create's allocation */
    /* GMT-Reuse's predictor and its trainer's state (behind gmt_lock; rd: the trainer's) */
    gpumem_policy_gmt gmt;
    gpumem_policy_rd rd;
    uint64_t trained;          /* samples consumed by the trainer */
    uint64_t fitted;           /* (VTD, RD) pairs in the fit (a copy of rd.samples, under gmt_lock) */
    uint64_t model_updates;
    uint64_t predicted[4], placed[5];
    /* hot words */
    gpumem__nvme_word gmt_lock;
    gpumem__nvme_word hand;    /* host replacement hand */
    gpumem__nvme_word free_hand; /* the free_map word the next search starts at */
    gpumem__nvme_word n_free;  /* empty host slots not reserved */
    gpumem__nvme_word fills;   /* the policy's fill counter */
    uint64_t vt;               /* virtual time */
    uint64_t pad_[GPUMEM_PAD_BYTES / 8 - 1];
    uint64_t stats[GPUMEM__TS_N];
    gpumem_event event;        /* host waiters for a BUSY host word or a slot lock */
} gpumem_tier;

#define GPUMEM__TDEV GPUMEM_SCOPE_DEVICE

GPUMEM_API size_t gpumem__tier_align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

GPUMEM_API size_t gpumem__tier_map_words(uint32_t n_slots) { return ((size_t)n_slots + 63u) / 64u; }

/* The lowest set bit of x != 0. */
GPUMEM_API uint32_t gpumem__tier_ctz64(uint64_t x) {
#if GPUMEM_ON_DEVICE
    return (uint32_t)__ffsll((long long)x) - 1u;
#else
    return (uint32_t)__builtin_ctzll(x);
#endif
}
/* ---- internals ------------------------------------------------------------- */

GPUMEM_API void gpumem__tier_count(gpumem_tier *t, uint32_t which, uint64_t n) {
    gpumem_atomic_fetch_add_u64(&t->stats[which], n, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
}

GPUMEM_API unsigned char *gpumem__tier_slot_data(const gpumem_tier *t, uint32_t k) {
    return gpumem__pool_data(t->cache, &t->pool, k);
}

/* Share `rank` of `n` of a line copy: 16-byte words, lane-strided, so the n
 * threads of a group touch consecutive words at once (coalesced over PCIe
 * on the device). Line sizes are powers of two >= 512, so the words divide
 * the line; buffers are line aligned within their pools. */
GPUMEM_API void gpumem__tier_copy_part(unsigned char *dst, const unsigned char *src, uint32_t bytes, uint32_t rank,
                                       uint32_t n) {
#if GPUMEM_ON_DEVICE
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    uint32_t i;
    if (n == 1) {
        /* One thread copies the whole line (an eviction's move to host
         * memory, inside the tier's hooks): unrolled only twice. The
         * compiler's own unrolling kept more 16-byte words in flight, and
         * made gpumem__tier_evict the costliest call of every kernel that
         * acquires a line (issue 12; bench/results/registers-*.md).
         * A group's shares keep the full unroll: they run where little
         * else is live. */
#pragma unroll 2
        for (i = 0; i < bytes / 16; i++) d[i] = s[i];
        return;
    }
    for (i = rank; i < bytes / 16; i += n) d[i] = s[i];
#else
    if (rank == 0 && n == 1) memcpy(dst, src, bytes);
    else {
        uint32_t i, chunk = 16;
        for (i = rank * chunk; i < bytes; i += n * chunk) memcpy(dst + i, src + i, chunk);
    }
#endif
}

/* Publish a line's host word (or clear it). Release: the host slot's data,
 * written before, is visible to whoever acquires the word. */
GPUMEM_API void gpumem__tier_set_home(gpumem_tier *t, uint64_t line, uint32_t w) {
    gpumem_atomic_store_u32(&t->home[line], w, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_event_notify(&t->event);
}

/* Claim a present, idle host word for a move or a write-back (CAS to BUSY).
 * Acquire: the host slot's data is the one its publisher wrote. Returns the
 * word as it was, or 0 when it was absent or busy. */
GPUMEM_API uint32_t gpumem__tier_claim(gpumem_tier *t, uint64_t line) {
    uint32_t s = gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    if (!(s & GPUMEM_TIER_IN) || (s & GPUMEM_TIER_BUSY)) return 0;
    return gpumem_atomic_cas_u32(&t->home[line], &s, s | GPUMEM_TIER_BUSY, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) ? s
                                                                                                               : 0;
}

/* GMT's model and its trainer's state: a host trainer and the threads
 * that predict wait for it (gpumem__tier_lock_gmt), so unlock wakes them.
 * Held briefly and tried rarely (a training round, a refit): no look first. */
GPUMEM_API int gpumem__tier_trylock_gmt(gpumem_tier *t) { return gpumem__spin_trylock(&t->gmt_lock.v, GPUMEM__TDEV, 0); }

GPUMEM_API void gpumem__tier_lock_gmt(gpumem_tier *t) { gpumem__spin_lock(&t->gmt_lock.v, GPUMEM__TDEV, 0, &t->event); }

GPUMEM_API void gpumem__tier_unlock_gmt(gpumem_tier *t) { gpumem__spin_unlock(&t->gmt_lock.v, GPUMEM__TDEV, &t->event); }

/* Count a host line's write to storage that ended with status st. */
GPUMEM_API gpumem_status gpumem__tier_written(gpumem_tier *t, gpumem_status st) {
    gpumem__tier_count(t, st == GPUMEM_OK ? GPUMEM__TS_WRITEBACKS : GPUMEM__TS_IO_ERRORS, 1);
    return st;
}

/* Write the line in host slot k (claimed BUSY by the caller) to storage,
 * through the cache's backing. */
GPUMEM_API gpumem_status gpumem__tier_write(gpumem_tier *t, uint64_t line, uint32_t k) {
    return gpumem__tier_written(t, gpumem__cache_io_pool(t->cache, 1, line, &t->pool, k));
}

/* Finish displacing the line of host slot k (locked; its line claimed
 * BUSY), once it is written to storage if it was dirty (`written`: that
 * write's status; OK for a clean line). The line and its word are read
 * again here (the slot lock and BUSY keep both as they were). EIO: the write
 * failed, the line stays (dirty) and the slot is unlocked. */
GPUMEM_API gpumem_status gpumem__tier_displace_done(gpumem_tier *t, uint32_t k, gpumem_status written) {
    const uint64_t victim = gpumem__slot_tag(t->slots, k);
    if (written != GPUMEM_OK) {
        /* keep the only up-to-date copy: its word as it was before our claim */
        gpumem__tier_set_home(
            t, victim, gpumem_atomic_load_u32(&t->home[victim], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) & ~GPUMEM_TIER_BUSY);
        gpumem__slot_unlock(t->slots, k, &t->event);
        return GPUMEM_EIO;
    }
    /* Written (or clean): storage is up to date before the word says "not here". */
    gpumem__tier_set_home(t, victim, 0);
    gpumem__slot_set_tag(t->slots, k, GPUMEM_CACHE_EMPTY);
    gpumem__tier_count(t, GPUMEM__TS_HOST_EVICTIONS, 1);
    return GPUMEM_OK;
}

/* An empty host slot, locked, for a line coming down: a free one if any
 * (reserved through n_free), else - only if `displace` - the replacement
 * policy's victim. A clean victim is displaced here; a dirty one must be
 * written to storage first: *write_first is then set, the slot is locked
 * and its line claimed, and the caller writes it and calls
 * gpumem__tier_displace_done (the search itself does no I/O). EAGAIN: none
 * (full and not displacing, or every candidate moving). */
GPUMEM_API gpumem_status gpumem__tier_alloc(gpumem_tier *t, int displace, uint32_t *out, int *write_first) {
    uint32_t i, n = t->n_slots, f = gpumem_atomic_load_u32(&t->n_free.v, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    *write_first = 0;
    while (f > 0 && !gpumem_atomic_cas_u32(&t->n_free.v, &f, f - 1, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV)) {
    }
    if (f > 0) { /* one set bit is ours: every reserver takes one, and bits are set before the count */
        const uint32_t words = (uint32_t)gpumem__tier_map_words(n);
        for (;;) {
            uint32_t j = gpumem_policy_slot_next(&t->free_hand.v, words);
            uint64_t w = gpumem_atomic_load_u64(&t->free_map[j], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
            while (w) {
                const uint64_t bit = 1ull << gpumem__tier_ctz64(w);
                /* Acquire: the freer's EMPTY tag is visible. */
                if (gpumem_atomic_fetch_and_u64(&t->free_map[j], ~bit, GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) & bit) {
                    uint32_t k = j * 64u + gpumem__tier_ctz64(bit);
                    /* A displacer's hand may hold the lock for a moment. */
                    gpumem__slot_lock(t->slots, k, &t->event);
                    if (gpumem__slot_tag(t->slots, k) != GPUMEM_CACHE_EMPTY) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
                    *out = k;
                    return GPUMEM_OK;
                }
                w = gpumem_atomic_load_u64(&t->free_map[j], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
            }
        }
    }
    if (!displace) return GPUMEM_EAGAIN;
    for (i = 0; i < gpumem_policy_slot_sweep_len(t->policy, n); i++) {
        uint32_t k = gpumem_policy_slot_next(&t->hand.v, n), s;
        uint64_t victim;
        if (!gpumem__slot_trylock(t->slots, k)) continue;
        victim = gpumem__slot_tag(t->slots, k);
        /* Empty slots are the reservers'; lines being moved up or written are busy. */
        if (victim == GPUMEM_CACHE_EMPTY || !gpumem_policy_slot_consider(t->policy, &t->slots[k].ref) ||
            (s = gpumem__tier_claim(t, victim)) == 0) {
            gpumem__slot_unlock(t->slots, k, &t->event);
            continue;
        }
        if ((s & GPUMEM_TIER_SLOT_MASK) != k) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
        *out = k;
        *write_first = (s & GPUMEM_TIER_DIRTY) != 0;
        return *write_first ? GPUMEM_OK : gpumem__tier_displace_done(t, k, GPUMEM_OK);
    }
    return GPUMEM_EAGAIN;
}

/* GMT-Reuse's decision for an eviction candidate, with its figures. */
GPUMEM_API uint32_t gpumem__tier_decide(gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    uint32_t where;
    if (t->placement == GPUMEM_TIER_NEVER_HOST) return GPUMEM_PLACE_BYPASS;
    if (t->placement == GPUMEM_TIER_ORDER) return GPUMEM_PLACE_HOST;
    gpumem__tier_lock_gmt(t);
    t->predicted[gpumem_policy_gmt_predict(&t->gmt, line)]++;
    where = gpumem_policy_gmt_place(&t->gmt, line,
                                    gpumem_atomic_load_u64(&t->vt, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV), skips_left);
    t->placed[where]++;
    gpumem__tier_unlock_gmt(t);
    return where;
}

/* ---- the cache's hooks ------------------------------------------------------ */

/* Every acquire: one tick of virtual time; the first ones are samples. */
GPUMEM__CACHE_HOOK void gpumem__tier_on_access(struct gpumem_tier *t, uint64_t line) {
    uint64_t vt;
    if (t->placement != GPUMEM_TIER_GMT_REUSE) return;
    vt = gpumem_atomic_fetch_add_u64(&t->vt, 1, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    /* Release: the trainer reads the sample only once it is written. */
    if (vt < t->sample_cap) gpumem_atomic_store_u64(&t->samples[vt], line, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
}

/* A GPU-cache miss on `line` (its filler holds the line's BUSY): if the
 * line is in host memory, claim its host copy (1, *cp filled in but for the
 * GPU slot), else 0: read storage. */
GPUMEM__CACHE_HOOK int gpumem__tier_lookup(struct gpumem_tier *t, uint64_t line, gpumem__tier_copy *cp) {
    uint32_t s;
    cp->pending = 0;
    /* Learn where it should have gone - when the predictor is free at once:
     * under contention it learns from a sample of the misses (as the cache's
     * sequential policies see a sample of the hits), and no miss queues
     * behind another's learning. */
    if (t->placement == GPUMEM_TIER_GMT_REUSE && gpumem__tier_trylock_gmt(t)) {
        gpumem_policy_gmt_on_fetch(&t->gmt, line, gpumem_atomic_load_u64(&t->vt, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV));
        gpumem__tier_unlock_gmt(t);
    }
    for (;;) {
        s = gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV);
        if (!(s & GPUMEM_TIER_IN)) { /* storage is up to date (a displacement wrote it before clearing) */
            gpumem__tier_count(t, GPUMEM__TS_HOST_MISSES, 1);
            return 0;
        }
        if (!(s & GPUMEM_TIER_BUSY) && (s = gpumem__tier_claim(t, line)) != 0) break;
        /* Being displaced (written to storage) or written back: wait it out. */
        GPUMEM_WAIT_UNTIL(&t->event, !(gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_ACQUIRE, GPUMEM__TDEV) &
                                       GPUMEM_TIER_BUSY));
    }
    cp->hslot = s & GPUMEM_TIER_SLOT_MASK;
    cp->src = gpumem__tier_slot_data(t, cp->hslot);
    cp->bytes = t->cache->line_bytes;
    cp->dirty = (s & GPUMEM_TIER_DIRTY) != 0;
    gpumem__tier_count(t, GPUMEM__TS_HOST_HITS, 1);
    return 1;
}

/* No GPU slot for it after all (a full cache): give the host copy back, and
 * take back the lookup's count (the fill it counted did not happen). */
GPUMEM__CACHE_HOOK void gpumem__tier_undo_lookup(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp,
                                         int in_host) {
    if (in_host) gpumem__tier_set_home(t, line, GPUMEM_TIER_IN | (cp->dirty ? GPUMEM_TIER_DIRTY : 0) | cp->hslot);
    gpumem__tier_count(t, in_host ? GPUMEM__TS_HOST_HITS : GPUMEM__TS_HOST_MISSES, (uint64_t)0 - 1);
}

/* The line is copied up: mark it dirty in the cache first (a flush then sees
 * it there), then free its host slot. */
GPUMEM__CACHE_HOOK void gpumem__tier_fetch_done(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp) {
    uint32_t k = cp->hslot;
    if (cp->dirty)
        gpumem_atomic_fetch_or_u32(gpumem__line_state(t->cache, line), GPUMEM_CACHE_DIRTY, GPUMEM_ORDER_RELAXED,
                                   GPUMEM__CDEV);
    gpumem__slot_lock(t->slots, k, &t->event);
    if (gpumem__slot_tag(t->slots, k) != line) gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
    gpumem__slot_set_tag(t->slots, k, GPUMEM_CACHE_EMPTY);
    gpumem_atomic_store_u32(&t->slots[k].ref, 0, GPUMEM_ORDER_RELAXED, GPUMEM__TDEV);
    gpumem__tier_set_home(t, line, 0);
    gpumem__slot_unlock(t->slots, k, &t->event);
    /* The bit after the tag is EMPTY (release), the count after the bit. */
    gpumem_atomic_fetch_or_u64(&t->free_map[k / 64u], 1ull << (k % 64u), GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
    gpumem_atomic_fetch_add_u32(&t->n_free.v, 1, GPUMEM_ORDER_RELEASE, GPUMEM__TDEV);
}

/* A GPU eviction candidate `line`, owned by the evictor: where should it
 * go (GPUMEM_PLACE_*)? KEEP (predicted short reuse, at most skips_left
 * more in this search) is counted here; the others are carried out by
 * gpumem__tier_evict once the cache's search for a slot has ended. */
GPUMEM__CACHE_HOOK uint32_t gpumem__tier_place(struct gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    const uint32_t where = gpumem__tier_decide(t, line, skips_left);
    if (where == GPUMEM_PLACE_KEEP) gpumem__tier_count(t, GPUMEM__TS_KEEPS, 1);
    return where;
}

/* Move the line evicted from GPU slot `slot` (its tag; the evictor owns it:
 * slot lock, BUSY) into host slot k (locked, empty). The line and its DIRTY
 * bit are read here, from the slot and the line's word, which that
 * ownership keeps as they were. */
GPUMEM_API uint32_t gpumem__tier_move(gpumem_tier *t, uint32_t slot, uint32_t k) {
    const uint64_t line = gpumem__slot_tag(t->cache->slots, slot);
    const int dirty = (gpumem_atomic_load_u32(gpumem__line_state(t->cache, line), GPUMEM_ORDER_RELAXED,
                                              GPUMEM__CDEV) &
                       GPUMEM_CACHE_DIRTY) != 0;
    gpumem__tier_copy_part(gpumem__tier_slot_data(t, k), gpumem__slot_data(t->cache, slot), t->cache->line_bytes, 0,
                           1);
    gpumem__slot_set_tag(t->slots, k, line);
    gpumem_policy_slot_fill(t->policy, &t->slots[k].ref, &t->fills.v);
    gpumem__tier_set_home(t, line, GPUMEM_TIER_IN | (dirty ? GPUMEM_TIER_DIRTY : 0) | k);
    gpumem__slot_unlock(t->slots, k, &t->event);
    gpumem__tier_count(t, GPUMEM__TS_MOVES, 1);
    if (dirty) gpumem__tier_count(t, GPUMEM__TS_DIRTY_MOVES, 1);
    return GPUMEM__TIER_MOVED;
}

/* Carry out placement `where` (gpumem__tier_place's, not KEEP) of the line
 * evicted from GPU slot `slot`, owned by the evictor: move it to host
 * memory, or leave it to the cache (bypass). When the host slot found for
 * it holds a dirty line to displace, that line must reach storage first:
 * GPUMEM__TIER_WRITE_FIRST, *io says what to write, and the cache calls
 * gpumem__tier_evict_resume with the write's status. */
GPUMEM__CACHE_HOOK uint32_t gpumem__tier_evict(struct gpumem_tier *t, uint32_t slot, uint32_t where,
                                              gpumem__tier_io *io) {
    uint32_t k = 0;
    int write_first = 0;
    if (where == GPUMEM_PLACE_BYPASS) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1);
        return GPUMEM__TIER_BYPASS;
    }
    /* Exclusive tiers: a line in a GPU slot has no host copy. */
    if (gpumem_atomic_load_u32(&t->home[gpumem__slot_tag(t->cache->slots, slot)], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) != 0) {
        gpumem__tier_count(t, GPUMEM__TS_VIOLATIONS, 1);
        return GPUMEM__TIER_BYPASS;
    }
    if (gpumem__tier_alloc(t, where == GPUMEM_PLACE_HOST, &k, &write_first) != GPUMEM_OK) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1); /* full: GMT-Reuse's "discard when full" */
        return GPUMEM__TIER_BYPASS;
    }
    if (write_first) {
        io->pool = &t->pool;
        io->line = gpumem__slot_tag(t->slots, k);
        io->k = k;
        return GPUMEM__TIER_WRITE_FIRST;
    }
    return gpumem__tier_move(t, slot, k);
}

/* The displaced line of *io has been written (`written`: the status): free
 * its host slot and move the evicted line in, or, if the write failed, keep
 * the displaced line (dirty) and bypass. */
GPUMEM__CACHE_HOOK uint32_t gpumem__tier_evict_resume(struct gpumem_tier *t, uint32_t slot, const gpumem__tier_io *io,
                                                     gpumem_status written) {
    if (gpumem__tier_displace_done(t, io->k, gpumem__tier_written(t, written)) != GPUMEM_OK) {
        gpumem__tier_count(t, GPUMEM__TS_BYPASSES, 1); /* the displaced line's write failed */
        return GPUMEM__TIER_BYPASS;
    }
    return gpumem__tier_move(t, slot, io->k);
}

/* Write every dirty host line to storage and mark it clean. A line being
 * moved up meanwhile is left to the cache (EAGAIN if it is dirty: it is
 * being filled). *written counts lines written. */
GPUMEM__CACHE_HOOK gpumem_status gpumem__tier_writeback(struct gpumem_tier *t, uint64_t *written) {
    uint32_t k;
    uint64_t n = 0;
    gpumem_status result = GPUMEM_OK;
    for (k = 0; k < t->n_slots; k++) {
        uint64_t line;
        uint32_t s;
        gpumem__slot_lock(t->slots, k, &t->event);
        line = gpumem__slot_tag(t->slots, k);
        if (line == GPUMEM_CACHE_EMPTY ||
            !(gpumem_atomic_load_u32(&t->home[line], GPUMEM_ORDER_RELAXED, GPUMEM__TDEV) & GPUMEM_TIER_DIRTY)) {
            gpumem__slot_unlock(t->slots, k, &t->event);
            continue;
        }
        if ((s = gpumem__tier_claim(t, line)) == 0) { /* moving up (its filler waits for this lock) */
            if (result == GPUMEM_OK) result = GPUMEM_EAGAIN;
        } else if (gpumem__tier_write(t, line, k) == GPUMEM_OK) {
            n++;
            gpumem__tier_set_home(t, line, s & ~GPUMEM_TIER_DIRTY);
        } else {
            result = GPUMEM_EIO;
            gpumem__tier_set_home(t, line, s);
        }
        gpumem__slot_unlock(t->slots, k, &t->event);
    }
    if (written) *written = n;
    return result;
}
#else /* compiled out: never called (GPUMEM__HAS_TIER is a constant 0) */
GPUMEM_API void gpumem__tier_on_access(struct gpumem_tier *t, uint64_t line) { (void)t, (void)line; }
GPUMEM_API int gpumem__tier_lookup(struct gpumem_tier *t, uint64_t line, gpumem__tier_copy *cp) {
    return (void)t, (void)line, (void)cp, 0;
}
GPUMEM_API void gpumem__tier_undo_lookup(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp,
                                         int in_host) {
    (void)t, (void)line, (void)cp, (void)in_host;
}
GPUMEM_API void gpumem__tier_fetch_done(struct gpumem_tier *t, uint64_t line, const gpumem__tier_copy *cp) {
    (void)t, (void)line, (void)cp;
}
GPUMEM_API uint32_t gpumem__tier_place(struct gpumem_tier *t, uint64_t line, uint32_t skips_left) {
    return (void)t, (void)line, (void)skips_left, GPUMEM_PLACE_BYPASS;
}
GPUMEM_API uint32_t gpumem__tier_evict(struct gpumem_tier *t, uint32_t slot, uint32_t where, gpumem__tier_io *io) {
    return (void)t, (void)slot, (void)where, (void)io, GPUMEM__TIER_BYPASS;
}
GPUMEM_API uint32_t gpumem__tier_evict_resume(struct gpumem_tier *t, uint32_t slot, const gpumem__tier_io *io,
                                              gpumem_status written) {
    return (void)t, (void)slot, (void)io, (void)written, GPUMEM__TIER_BYPASS;
}
GPUMEM_API gpumem_status gpumem__tier_writeback(struct gpumem_tier *t, uint64_t *written) {
    return (void)t, (void)written, GPUMEM_OK;
}
GPUMEM_API void gpumem__tier_copy_part(unsigned char *dst, const unsigned char *src, uint32_t bytes, uint32_t rank,
                                       uint32_t n) {
    (void)dst, (void)src, (void)bytes, (void)rank, (void)n;
}
#endif /* GPUMEM_CACHE_TIER */

#endif /* GPUMEM_TIER_PATH_H */
