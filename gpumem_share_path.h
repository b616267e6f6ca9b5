/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_share_path.h - the share's data path: its state, the per-line
 * records and locks, the miss queue (both halves of its handshake: the GPU
 * poster and the host server's take), the merge of one line and the fill
 * hook the cache calls. NOT FOR DIRECT INCLUSION: include gpumem_share.h
 * (the share's control: create and destroy, get/put, release, acquire,
 * merge, flush, the server, statistics; its USAGE, CONTRACT and DESIGN),
 * or gpumem_cache.h, which includes this.
 *
 * Why apart from gpumem_share.h: as for the tier (gpumem_tier_path.h), the
 * cache calls the fill hook directly, so it must be defined in every file
 * that uses the cache, below the cache, while the share's control uses the
 * cache's public API above it (docs/headers.md). Built on the cache's
 * layout and the tier's data path (a line coming up from an owner's host
 * tier), whose private names it uses by design.
 *
 * GPUMEM_CACHE_SHARE=0 compiles the hook out: see gpumem_cache.h.
 */
#ifndef GPUMEM_SHARE_PATH_H
#define GPUMEM_SHARE_PATH_H

#include "gpumem_tier_path.h"

/* ---- the share's hook ------------------------------------------------------
 *
 * A cache that is one owner of a share (gpumem_share.h: several caches over
 * one storage, GAIA's lazy release consistency) reads every missed line
 * through the share instead of straight from the backing: the share picks
 * the source (a peer owner's valid copy, or storage after merging what other
 * owners released) and records the copy's version, under the line's lock;
 * on the device it posts the miss to a host thread that does that (the
 * share's miss queue). One direct call at the miss path's one I/O site,
 * defined below the cache for the same reasons as the tier's hooks (top of
 * this header); with no share attached it is never made. GPUMEM_CACHE_SHARE=0
 * compiles it out, and a cache attached to a share is then refused
 * (GPUMEM_ESTATE). */
struct gpumem_share;

/* ---- the share's state ----------------------------------------------------
 * The share's USAGE, CONTRACT and DESIGN are at the top of gpumem_share.h. */
#if GPUMEM_CACHE_SHARE
/* Owners: storage (never a cache), the host, GPU 0..7. */
#define GPUMEM_SHARE_MAX_OWNERS 10u
enum { GPUMEM_SHARE_STORAGE = 0, GPUMEM_SHARE_HOST = 1, GPUMEM_SHARE_GPU0 = 2 };
#ifndef GPUMEM_SHARE_LOCKS
#define GPUMEM_SHARE_LOCKS 4096u /* line locks, line l uses l mod this */
#endif
#define GPUMEM__SHARE_NONE 0xFFFFFFFFu

/* What the share knows of one line, kept only while some owner has a copy
 * of it (or owes it a version bump): GAIA's time-stamp version table for
 * one page. Read and written under the line's lock only. */
typedef struct gpumem__share_entry {
    uint64_t line;     /* the line, or GPUMEM_CACHE_EMPTY for a free entry */
    uint32_t holders;  /* owners (bits) whose cache holds a copy, in slot[o] */
    uint32_t cdirty;   /* consistency-dirty: written since the owner's last release */
    uint32_t dirty;    /* written since the last merge: the copy is pinned (a reference the
                          share holds), storage lacks its writes, only a merge writes it */
    uint32_t based;    /* owners whose copy has a pristine base (base[o]) */
    uint32_t owed;     /* GPU owners whose copy a host thread merged while their kernels may run:
                          the pin stays, for the owner to drop (gpumem__share_settle) */
    uint32_t listed;   /* owners whose list (written[o]) holds the line: a release to make
                          (cdirty) or a pin to drop (owed); the entry lives while listed */
    uint32_t slot[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t writers[GPUMEM_SHARE_MAX_OWNERS]; /* threads of owner o holding the line to write */
    uint32_t base[GPUMEM_SHARE_MAX_OWNERS];    /* base buffer of o's copy */
    uint32_t rel[GPUMEM_SHARE_MAX_OWNERS];     /* releases of this line by owner o */
    uint32_t gen;                              /* merges of this line so far */
    uint32_t copy_gen[GPUMEM_SHARE_MAX_OWNERS]; /* gen when o's copy was read: a copy older
                          than the last merge lacks its unreleased writes, so is no source */
    uint32_t vv[GPUMEM_SHARE_MAX_OWNERS][GPUMEM_SHARE_MAX_OWNERS]; /* vv[o]: version vector of o's
                          copy; vv[0] that of storage's content */
} gpumem__share_entry;

enum { /* counter indices (gpumem_share_stats order) */
    GPUMEM__SS_STORAGE_READS, GPUMEM__SS_PEER_READS, GPUMEM__SS_MERGES, GPUMEM__SS_MERGED_COPIES,
    GPUMEM__SS_ON_DEMAND_MERGES, GPUMEM__SS_BASES, GPUMEM__SS_BASES_ELIDED, GPUMEM__SS_BUMPS,
    GPUMEM__SS_INVALIDATED, GPUMEM__SS_KEPT_CONCURRENT, GPUMEM__SS_VIOLATIONS, GPUMEM__SS_STORAGE_TRANSFERS,
    GPUMEM__SS_PEER_TRANSFERS, GPUMEM__SS_TIER_HITS, GPUMEM__SS_TIER_STALE, GPUMEM__SS_SERVED,
    GPUMEM__SS_POST_TIMEOUTS, GPUMEM__SS_OWED_PINS, GPUMEM__SS_N
};

/* ---- the miss queue: GPU threads' misses, served by a host thread ----------
 *
 * A GPU thread never runs a fill itself (the fill's body - locks, a merge,
 * a peer copy - would cost every kernel that can miss 45 more registers, and
 * GAIA serves every fault on the CPU too). It posts the request in a cell of
 * this ring, in memory both sides reach (pinned host memory mapped into the
 * GPU, or managed memory), and waits; a host thread (gpumem_share_server_start,
 * gpumem_share.h) runs the fill and answers.
 *
 * No word is read-modify-written by both the host and a GPU: on pinned host
 * memory such an atomic is not atomic unless the link has native host
 * atomics (cudaDevAttrHostNativeAtomicSupported, 0 on most PCIe machines),
 * while plain loads and stores are. So each cell has two words, each with
 * one writing side, both holding a generation (high bits) and a state:
 *   post, the posters' (compare-and-swapped only by the threads of one GPU
 *   owner - each owner has its own cells - and read by the host):
 *     FREE -> CLAIMED (a poster's CAS) -> POSTED (its release store, after
 *     the request) -> FREE with the next generation (after the answer), or
 *     -> WITHDRAWN (a poster giving up) -> FREE with the next generation;
 *   answer, the servers' (compare-and-swapped only by host threads, read by
 *   the GPU): TAKEN (a server's CAS: one server per request) -> DONE (its
 *   release store, after the status and the slot's bytes) or SKIPPED (it
 *   found the request withdrawn, and did nothing).
 * A poster gives up (its timeout, or no server running) by storing
 * WITHDRAWN, a sequentially consistent fence, then reading answer; a
 * server takes by its CAS to TAKEN, the same fence, then reading post
 * again. With both fences, at least one of the two sees the other's write
 * (Dekker): the server serves only if post still says POSTED for that
 * generation, and the poster leaves only if answer does not say TAKEN -
 * otherwise it waits for DONE or SKIPPED. So a request is served at most
 * once, and never after its poster left (into a slot the cache gave back).
 *
 * answer's generation only moves forward: a server takes a request only
 * from an answer of an older generation (or its own NONE), and its SKIPPED
 * is a CAS from its own TAKEN. A server's look at post may be old by the
 * time it looks at answer - the request answered, its cell freed and
 * posted again, taken by another server - and a take that did not check
 * would put the older generation back over the newer TAKEN; a third server
 * would then see an older answer and serve the newer request a second time
 * (a second fill over a slot its GPU thread had written since). A server
 * passing a cell with nothing posted also moves an answer far behind post
 * up (requests withdrawn untaken never move it): gpumem__share_catch_up. */
enum { GPUMEM__SQ_FREE, GPUMEM__SQ_CLAIMED, GPUMEM__SQ_POSTED, GPUMEM__SQ_WITHDRAWN };         /* post */
enum { GPUMEM__SQ_NONE, GPUMEM__SQ_TAKEN, GPUMEM__SQ_DONE, GPUMEM__SQ_SKIPPED };               /* answer */
enum { GPUMEM__SQ_FILL = 1, GPUMEM__SQ_HOST_ACQUIRE = 2, GPUMEM__SQ_MAKE_ROOM = 3, GPUMEM__SQ_MERGE = 4 };
#define GPUMEM__SQ_STATE(w) ((w) & 7u)
#define GPUMEM__SQ_GEN(w) ((w) & ~7u)
#define GPUMEM__SQ_NEXT_GEN 8u
/* Generation g came before h (modulo 2^32: a server's look is never 2^28
 * requests old, and answer is kept less than 2^28 requests behind post:
 * gpumem__share_catch_up). */
#define GPUMEM__SQ_BEFORE(g, h) ((int32_t)((g) - (h)) < 0)
#define GPUMEM__SQ_CATCH_UP (1u << 24) /* answer this far behind post (2^21 requests) is caught up */

typedef struct gpumem__share_cell {
    uint32_t post;        /* the posters' word (above) */
    uint32_t answer;      /* the servers' word (above) */
    uint32_t kind;        /* GPUMEM__SQ_FILL, _HOST_ACQUIRE, _MAKE_ROOM or _MERGE (gpumem_share.h) */
    uint32_t owner, slot; /* FILL: the GPU owner and the slot its cache claimed; MERGE: the owner */
    int32_t status;       /* the server's answer */
    uint64_t line, n;     /* FILL, MERGE: the line; HOST_ACQUIRE: lines [line, line + n) */
} gpumem__share_cell;

typedef struct gpumem_share_queue {
    uint32_t n_cells;     /* a power of two */
    uint32_t owner_cells; /* cells each GPU owner has, a power of two: GPU owner g's are
                             [g * owner_cells, (g + 1) * owner_cells) */
    uint32_t servers;     /* server pools running; none: a post is refused at once */
    uint64_t timeout_ns;  /* how long a post waits for a free cell, and to be taken */
    gpumem__share_cell *cells;
} gpumem_share_queue;

typedef struct gpumem_share {
    /* set at create, read-only afterwards */
    uint64_t n_lines;
    uint32_t line_bytes, n_owners;
    gpumem_cache *caches[GPUMEM_SHARE_MAX_OWNERS]; /* NULL: storage, or no such owner */
    uint32_t *dir;                 /* per line: entry index + 1, or 0 (none) */
    gpumem__share_entry *entries;
    uint32_t n_entries;
    uint32_t *free_entries;        /* a stack, under pool_lock */
    unsigned char *bases;          /* n_bases line-sized buffers */
    uint32_t n_bases;
    uint32_t *free_bases;          /* a stack, under pool_lock */
    uint64_t *slot_line[GPUMEM_SHARE_MAX_OWNERS]; /* per owner, per slot: the line the share put there */
    uint64_t *written[GPUMEM_SHARE_MAX_OWNERS];   /* per owner: lines listed (cdirty or owed; list_lock) */
    uint64_t *draining[GPUMEM_SHARE_MAX_OWNERS];  /* the list a release works through */
    /* For owners with a host tier below their cache (NULL where none has
     * one). A copy moved down to the tier leaves the share's sight, so
     * whether it may come back up is decided by counts: merges[l] counts the
     * merges of line l (the only writes of a shared line to storage), and
     * filled[o][l] is merges[l] + 1 as of owner o's last fill of l (0: none).
     * Both under the line's lock. */
    uint32_t *merges;
    uint32_t *filled[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t n_written[GPUMEM_SHARE_MAX_OWNERS];
    void *owned_;
    /* hot words */
    uint32_t n_free_entries, n_free_bases;
    uint32_t merge_epoch;          /* merges so far: storage read before a change is stale */
    gpumem__nvme_word pool_lock;
    gpumem__nvme_word list_lock[GPUMEM_SHARE_MAX_OWNERS];
    gpumem__nvme_word release_lock[GPUMEM_SHARE_MAX_OWNERS];
    uint32_t locks[GPUMEM_SHARE_LOCKS];
    uint64_t stats[GPUMEM__SS_N];
    gpumem_event event;            /* host waiters for a lock */
    gpumem_share_queue *queue;     /* GPU owners' misses go here (NULL: refused on the device) */
} gpumem_share;

/* System scope: with a server attached, a host thread fills for GPU threads
 * while they run, so every word of the share (locks, entries, pools,
 * counters, the queue) is shared by the host and the GPUs at once. The
 * caches' own words stay at device scope: a host thread never touches a GPU
 * owner's cache words while its kernels may run (see gpumem__share_fill). */
#define GPUMEM__SDEV GPUMEM_SCOPE_SYSTEM

/* Lines gpumem_share_fetch has chosen to move together - read from storage
 * in one transfer (data), or to copy from one peer (from) - for the fills
 * it then makes on its own thread: the fill hook takes each line from here
 * rather than moving it alone. Thread-local: only the fetching thread's
 * fills see it (a host-only path; the device never fetches). */
typedef struct gpumem__share_stage {
    const gpumem_share *share;
    uint32_t owner, from;       /* from: 0 storage (data holds the lines), else the peer chosen */
    uint64_t first, n;
    const unsigned char *data;  /* line first + i at data + i * line_bytes (from storage) */
    uint32_t epoch;             /* merge_epoch before the read: a merge since makes data stale */
} gpumem__share_stage;
#ifdef __cplusplus
#define GPUMEM__THREAD_LOCAL thread_local
#else
#define GPUMEM__THREAD_LOCAL _Thread_local
#endif
static GPUMEM__THREAD_LOCAL const gpumem__share_stage *gpumem__share_staged;

/* Whether this thread posts its misses in GPU owners' caches (and a GPU
 * owner's release, its host part) to the miss queue: every GPU thread, and
 * a host thread standing for one (gpumem_share_thread_as_gpu: the CPU tests
 * run the GPU's path with it). */
static GPUMEM__THREAD_LOCAL int gpumem__share_as_gpu;
static GPUMEM__THREAD_LOCAL int gpumem__share_serving; /* a server thread (gpumem_share_server_start) */
GPUMEM_API int gpumem__share_posts(void) {
#if GPUMEM_ON_DEVICE
    return 1;
#else
    return gpumem__share_as_gpu;
#endif
}

GPUMEM_API void gpumem__share_count(gpumem_share *s, uint32_t which, uint64_t n) {
    gpumem_atomic_fetch_add_u64(&s->stats[which], n, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}

/* The share's locks (line locks, pool, lists, releases): gpumem__spin_*
 * at system scope (host servers and GPU threads both take them), waiters
 * parked on the share's event on the host, so every unlock wakes them;
 * tries look first (host servers and GPU threads contend on line locks). */
GPUMEM_API int gpumem__share_trylock(uint32_t *w) { return gpumem__spin_trylock(w, GPUMEM__SDEV, 1); }
GPUMEM_API void gpumem__share_lock(gpumem_share *s, uint32_t *w) { gpumem__spin_lock(w, GPUMEM__SDEV, 1, &s->event); }
GPUMEM_API void gpumem__share_unlock(gpumem_share *s, uint32_t *w) { gpumem__spin_unlock(w, GPUMEM__SDEV, &s->event); }
GPUMEM_API uint32_t *gpumem__share_line_lock(gpumem_share *s, uint64_t line) {
    return &s->locks[line % GPUMEM_SHARE_LOCKS];
}

/* ---- posting to the miss queue ------------------------------------------------ */

#ifndef GPUMEM_SHARE_SERVER_SLEEP_NS
#define GPUMEM_SHARE_SERVER_SLEEP_NS 20000L /* a polling host thread looks again after 20 us */
#endif

/* One round of a wait nobody can wake: the device backs off (nanosleep,
 * growing); a host thread - a poster standing for a GPU thread, an idle
 * server, a fill waiting for a writer - spins briefly, then sleeps
 * GPUMEM_SHARE_SERVER_SLEEP_NS a round (a GPU thread cannot wake it, and
 * the server does not notify). */
GPUMEM_API void gpumem__share_pause(gpumem_backoff *b) {
#if GPUMEM_ON_DEVICE
    gpumem_backoff_pause(b);
#else
    if (!gpumem_backoff_pause(b)) gpumem__host_sleep_ns(GPUMEM_SHARE_SERVER_SLEEP_NS);
#endif
}

/* Claim a free cell of GPU owner o (post: FREE -> CLAIMED, same
 * generation) among its own - so that no two GPUs ever compare-and-swap one
 * word, which is not atomic across devices on host memory either - looking
 * from a place that spreads posters over them; NULL once the deadline
 * passes. Device scope on the device: only this owner's threads, on this
 * GPU, write post. */
GPUMEM_API gpumem__share_cell *gpumem__share_claim_cell(gpumem_share_queue *q, uint32_t o, uint32_t spread,
                                                       uint64_t deadline, uint32_t *gen) {
    gpumem_backoff wait = gpumem_backoff_start();
    const uint32_t count = q->owner_cells, first = (o - GPUMEM_SHARE_GPU0) * count;
    uint32_t i;
    for (;;) {
        for (i = 0; i < count; i++) {
            gpumem__share_cell *cell = &q->cells[first + ((spread + i) & (count - 1))];
            uint32_t w = gpumem_atomic_load_u32(&cell->post, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
            /* Acquire: the cell's last poster freed it with a release after
             * reading its answer, so that read comes before the writes of
             * this request. The claim publishes nothing; POSTED does. */
            if (GPUMEM__SQ_STATE(w) == GPUMEM__SQ_FREE &&
                gpumem_atomic_cas_u32(&cell->post, &w, GPUMEM__SQ_GEN(w) | GPUMEM__SQ_CLAIMED, GPUMEM_ORDER_ACQUIRE,
                                      GPUMEM_SCOPE_DEVICE)) {
                *gen = GPUMEM__SQ_GEN(w);
                return cell;
            }
        }
        if (gpumem_deadline_passed(deadline)) return (gpumem__share_cell *)0;
        gpumem__share_pause(&wait);
    }
}

/* Give a cell back: the next generation, free. Release: this poster's read
 * of the answer comes before the next poster's writes. */
GPUMEM_API void gpumem__share_free_cell(gpumem__share_cell *cell, uint32_t gen) {
    gpumem_atomic_store_u32(&cell->post, (gen + GPUMEM__SQ_NEXT_GEN) | GPUMEM__SQ_FREE, GPUMEM_ORDER_RELEASE,
                            GPUMEM__SDEV);
}

/* Post one request, in a cell of GPU owner `poster`, and wait for its
 * answer: the status, or ETIMEDOUT if it was withdrawn (the deadline
 * passed, or no server runs) - then it is never served. */
GPUMEM_API gpumem_status gpumem__share_post_once(gpumem_share *s, gpumem_share_queue *q, uint32_t kind,
                                                 uint32_t poster, uint32_t owner, uint64_t line, uint64_t n,
                                                 uint32_t slot, uint64_t deadline) {
    gpumem_backoff wait = gpumem_backoff_start();
    uint32_t gen = 0, a;
    int withdrawing = 0;
    gpumem__share_cell *cell = gpumem__share_claim_cell(q, poster, (uint32_t)line * 0x9E3779B9u + gpumem_sm_id(), deadline, &gen);
    if (!cell) { /* every cell of this owner busy until the deadline */
        gpumem__share_count(s, GPUMEM__SS_POST_TIMEOUTS, 1);
        return GPUMEM_ETIMEDOUT;
    }
    cell->kind = kind;
    cell->owner = owner;
    cell->slot = slot;
    cell->line = line;
    cell->n = n;
    /* Release at system scope: the request's fields reach the host before
     * the state that says they are there. */
    gpumem_atomic_store_u32(&cell->post, gen | GPUMEM__SQ_POSTED, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    for (;;) {
        /* Acquire: DONE makes the status, and the slot's data the host wrote
         * before it, visible to this thread. Only this generation's answer
         * counts: an older one is a finished request's. */
        a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
        if (a == (gen | GPUMEM__SQ_DONE)) {
            gpumem_status st = (gpumem_status)cell->status;
            gpumem__share_free_cell(cell, gen);
            return st;
        }
        if (a == (gen | GPUMEM__SQ_SKIPPED)) break; /* the server saw it withdrawn */
        if (!withdrawing && a != (gen | GPUMEM__SQ_TAKEN) &&
            (gpumem_deadline_passed(deadline) ||
             !gpumem_atomic_load_u32(&q->servers, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV))) {
            /* Withdraw: WITHDRAWN, the fence, then look at the answer (the
             * server does the mirror image: see the protocol above). */
            gpumem_atomic_store_u32(&cell->post, gen | GPUMEM__SQ_WITHDRAWN, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
            gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM__SDEV);
            a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV);
            if (GPUMEM__SQ_GEN(a) != gen || GPUMEM__SQ_STATE(a) == GPUMEM__SQ_NONE) break; /* not taken: never will be */
            withdrawing = 1; /* taken: it ends DONE (served) or SKIPPED (the server saw WITHDRAWN) */
            continue;
        }
        gpumem__share_pause(&wait);
    }
    gpumem__share_free_cell(cell, gen);
    gpumem__share_count(s, GPUMEM__SS_POST_TIMEOUTS, 1);
    return GPUMEM_ETIMEDOUT;
}

/* Post a request for GPU owner `poster`'s thread and wait for the host's
 * answer (the status it returns).
 * ESTATE at once when no queue is attached or no server runs; ETIMEDOUT
 * when no cell came free, or no server took the request, within the
 * queue's timeout (it is then never served). A fill answered EAGAIN (a
 * writer held the line, so a merge could not be made) is posted again after
 * a pause, until the same timeout (then ETIMEDOUT); any other request's
 * EAGAIN is returned at once (a host acquire finding a host thread's stale
 * copy held). */
GPUMEM_API gpumem_status gpumem__share_post(gpumem_share *s, uint32_t kind, uint32_t poster, uint32_t owner,
                                            uint64_t line, uint64_t n, uint32_t slot) {
    gpumem_share_queue *q = s->queue;
    gpumem_backoff again = gpumem_backoff_start();
    uint64_t deadline;
    gpumem_status st;
    if (!q || !gpumem_atomic_load_u32(&q->servers, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV)) return GPUMEM_ESTATE;
    deadline = gpumem_deadline_ns(q->timeout_ns);
    for (;;) {
        st = gpumem__share_post_once(s, q, kind, poster, owner, line, n, slot, deadline);
        if (st != GPUMEM_EAGAIN || kind != GPUMEM__SQ_FILL) return st;
        gpumem__share_pause(&again); /* a writer holds the line: let it put it down */
        /* Held up the whole timeout: ETIMEDOUT, not EAGAIN, which the
         * cache would count as a full cache and gpumem_share_get would
         * answer by making room. */
        if (gpumem_deadline_passed(deadline)) return GPUMEM_ETIMEDOUT;
    }
}

/* The line the share last put in owner o's slot k (EMPTY: none). Written
 * under the line's lock by the slot's filler; read without it by acquire's
 * scan, hence atomics. */
GPUMEM_API uint64_t gpumem__share_slot_line(gpumem_share *s, uint32_t o, uint32_t k) {
    return gpumem_atomic_load_u64(&s->slot_line[o][k], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}
GPUMEM_API void gpumem__share_set_slot_line(gpumem_share *s, uint32_t o, uint32_t k, uint64_t line) {
    gpumem_atomic_store_u64(&s->slot_line[o][k], line, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}

/* The owner a cache is, or GPUMEM__SHARE_NONE. */
GPUMEM_API uint32_t gpumem__share_owner(const gpumem_share *s, const gpumem_cache *c) {
    uint32_t o;
    for (o = 1; o < s->n_owners; o++)
        if (s->caches[o] == c) return o;
    return GPUMEM__SHARE_NONE;
}

/* ---- taking from the miss queue: the server's half of the handshake ------- */

#if !GPUMEM_ON_DEVICE
/* Take the request a look at the cell's post word found (`seen`: POSTED,
 * generation gen) for this server: 1 if it is this server's to serve now,
 * 0 if it is another server's, withdrawn, or answered already. The look
 * may be old by now - the request answered, its cell freed and posted
 * again, perhaps taken by another server - so the take is a CAS only from
 * an older answer (or this generation's NONE, a fresh queue's), and a take
 * that finds post moved on gives the answer back by a CAS from its own
 * TAKEN: a newer generation is never overwritten (the protocol, at the
 * queue's definition above). */
GPUMEM_API int gpumem__share_take(gpumem__share_cell *cell, uint32_t seen) {
    const uint32_t gen = GPUMEM__SQ_GEN(seen);
    uint32_t a;
    if (GPUMEM__SQ_STATE(seen) != GPUMEM__SQ_POSTED) return 0;
    a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    if (a != (gen | GPUMEM__SQ_NONE) && !GPUMEM__SQ_BEFORE(GPUMEM__SQ_GEN(a), gen)) return 0;
    /* One server per request (only host threads write answer); then the
     * fence and a second look at post: the poster may be withdrawing (the
     * mirror image, in gpumem__share_post_once). */
    if (!gpumem_atomic_cas_u32(&cell->answer, &a, gen | GPUMEM__SQ_TAKEN, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV)) return 0;
    gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM__SDEV);
    /* Acquire: the request's fields were written before POSTED's release. */
    if (gpumem_atomic_load_u32(&cell->post, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV) == (gen | GPUMEM__SQ_POSTED)) return 1;
    /* Withdrawn (its GPU thread has given its slot back, or waits for
     * SKIPPED), or answered and posted again since the look. */
    a = gen | GPUMEM__SQ_TAKEN;
    gpumem_atomic_cas_u32(&cell->answer, &a, gen | GPUMEM__SQ_SKIPPED, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    return 0;
}

/* answer moves only when a request is taken, post at every request: on a
 * cell whose requests are all withdrawn untaken (servers slower than a
 * short timeout) answer falls behind, and 2^28 requests behind the modular
 * order would call it newer than post and refuse every take there. A
 * server passing a cell with nothing posted (`seen`) moves an answer more
 * than 2^21 requests behind up to the request before post's: SKIPPED, a
 * finished one (a poster waiting for its answer has seen it TAKEN, so it is
 * not behind). A CAS: a take or another catch-up in between wins. */
GPUMEM_API void gpumem__share_catch_up(gpumem__share_cell *cell, uint32_t seen) {
    uint32_t a = gpumem_atomic_load_u32(&cell->answer, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    if (GPUMEM__SQ_BEFORE(GPUMEM__SQ_GEN(a), GPUMEM__SQ_GEN(seen) - GPUMEM__SQ_CATCH_UP))
        gpumem_atomic_cas_u32(&cell->answer, &a, (GPUMEM__SQ_GEN(seen) - GPUMEM__SQ_NEXT_GEN) | GPUMEM__SQ_SKIPPED,
                              GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
}
#endif

/* ---- version vectors: fixed length n_owners, trivially small ------------ */

GPUMEM_API int gpumem_share_vv_leq(const uint32_t *a, const uint32_t *b, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++)
        if (a[i] > b[i]) return 0;
    return 1;
}
GPUMEM_API void gpumem_share_vv_max_into(uint32_t *a, const uint32_t *b, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++)
        if (b[i] > a[i]) a[i] = b[i];
}
/* Neither is below the other: concurrent writes, a merge is needed. */
GPUMEM_API int gpumem_share_vv_concurrent(const uint32_t *a, const uint32_t *b, uint32_t n) {
    return !gpumem_share_vv_leq(a, b, n) && !gpumem_share_vv_leq(b, a, n);
}

/* The newest released state of the line: storage's vector, every copy's,
 * and every owner's own release count, element by element. */
GPUMEM_API void gpumem__share_home(const gpumem_share *s, const gpumem__share_entry *e, uint32_t *home) {
    uint32_t o;
    for (o = 0; o < s->n_owners; o++) home[o] = e->rel[o] > e->vv[0][o] ? e->rel[o] : e->vv[0][o];
    for (o = 1; o < s->n_owners; o++)
        if (e->holders & (1u << o)) gpumem_share_vv_max_into(home, e->vv[o], s->n_owners);
}

/* ---- entries and bases ------------------------------------------------------ */

/* The line's entry (the caller holds the line's lock), or NULL. */
GPUMEM_API gpumem__share_entry *gpumem__share_find(gpumem_share *s, uint64_t line) {
    uint32_t i = gpumem_atomic_load_u32(&s->dir[line], GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    return i ? &s->entries[i - 1] : (gpumem__share_entry *)0;
}

/* Take the line's lock and return its entry (NULL: none); *lk is the lock,
 * for gpumem__share_unlock. */
GPUMEM_API gpumem__share_entry *gpumem__share_lock_entry(gpumem_share *s, uint64_t line, uint32_t **lk) {
    *lk = gpumem__share_line_lock(s, line);
    gpumem__share_lock(s, *lk);
    return gpumem__share_find(s, line);
}

/* The line's entry, made if there is none (NULL: none left). */
GPUMEM_API gpumem__share_entry *gpumem__share_get_entry(gpumem_share *s, uint64_t line) {
    gpumem__share_entry *e = gpumem__share_find(s, line);
    uint32_t i = GPUMEM__SHARE_NONE;
    if (e) return e;
    gpumem__share_lock(s, &s->pool_lock.v);
    if (s->n_free_entries) i = s->free_entries[--s->n_free_entries];
    gpumem__share_unlock(s, &s->pool_lock.v);
    if (i == GPUMEM__SHARE_NONE) return (gpumem__share_entry *)0;
    e = &s->entries[i];
    memset(e, 0, sizeof *e);
    e->line = line;
    gpumem_atomic_store_u32(&s->dir[line], i + 1, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    return e;
}

/* Free the entry if nothing is left to know: no copy, no pending bump. */
GPUMEM_API void gpumem__share_maybe_free(gpumem_share *s, gpumem__share_entry *e) {
    if (e->holders || e->cdirty || e->dirty || e->owed || e->listed) return;
    gpumem_atomic_store_u32(&s->dir[e->line], 0, GPUMEM_ORDER_RELAXED, GPUMEM__SDEV);
    e->line = GPUMEM_CACHE_EMPTY;
    gpumem__share_lock(s, &s->pool_lock.v);
    s->free_entries[s->n_free_entries++] = (uint32_t)(e - s->entries);
    gpumem__share_unlock(s, &s->pool_lock.v);
}

GPUMEM_API unsigned char *gpumem__share_base(gpumem_share *s, uint32_t b) {
    return s->bases + (size_t)b * s->line_bytes;
}

GPUMEM_API uint32_t gpumem__share_take_base(gpumem_share *s) {
    uint32_t b = GPUMEM__SHARE_NONE;
    gpumem__share_lock(s, &s->pool_lock.v);
    if (s->n_free_bases) b = s->free_bases[--s->n_free_bases];
    gpumem__share_unlock(s, &s->pool_lock.v);
    return b;
}

GPUMEM_API void gpumem__share_drop_base(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (!(e->based & (1u << o))) return;
    e->based &= ~(1u << o);
    gpumem__share_lock(s, &s->pool_lock.v);
    s->free_bases[s->n_free_bases++] = e->base[o];
    gpumem__share_unlock(s, &s->pool_lock.v);
}

/* The data of owner o's copy (o holds it). */
GPUMEM_API unsigned char *gpumem__share_copy(gpumem_share *s, const gpumem__share_entry *e, uint32_t o) {
    return gpumem__slot_data(s->caches[o], e->slot[o]);
}

/* A server thread runs while every GPU owner's kernels may: it must never
 * touch a GPU owner's cache words (the rule below). Checked where the share
 * touches a cache's words for another thread - its pins - and counted as a
 * violation, so that the CPU tests, whose every run asserts none, would see
 * a path that broke it. */
GPUMEM_API void gpumem__share_check_touch(gpumem_cache *c) {
#if GPUMEM_ON_DEVICE
    (void)c;
#else
    uint32_t o;
    if (!gpumem__share_serving || !c->share) return;
    o = gpumem__share_owner(c->share, c);
    if (o >= GPUMEM_SHARE_GPU0 && o != GPUMEM__SHARE_NONE) gpumem__share_count(c->share, GPUMEM__SS_VIOLATIONS, 1);
#endif
}

/* The share's pins (gpumem__line_pin), each checked as a touch of the
 * owner's cache words. */
GPUMEM_API int gpumem__share_pin(gpumem_cache *c, uint64_t line, uint32_t slot, int held) {
    gpumem__share_check_touch(c);
    return gpumem__line_pin(c, line, slot, held);
}

GPUMEM_API void gpumem__share_unpin(gpumem_cache *c, uint64_t line) {
    gpumem__share_check_touch(c);
    gpumem__line_unpin(c, line);
}

/* Whether a host thread may touch owner o's cache words now: the host
 * owner's always (only host threads do), a GPU owner's only at that owner's
 * kernel boundary (`at_boundary`: the call is the owner's own - its acquire,
 * release, merge or flush). Its words are device-scope atomics that its
 * running kernels use: a host RMW on them would not be atomic with theirs.
 * The device only ever touches its own owner's words. */
GPUMEM_API int gpumem__share_may_touch(uint32_t o, uint32_t at_boundary) {
    return o < GPUMEM_SHARE_GPU0 || o == at_boundary;
}

/* Put the line on owner o's list, once (the caller holds the line's lock):
 * what the owner's next release, acquire or flush walks - its writes to
 * release (cdirty) and the pins a merge left it (owed) - so that those cost
 * O(lines the owner wrote), never O(lines resident). Every listed line has
 * an entry (it lives while listed), so a list holds n_entries at most. */
GPUMEM_API void gpumem__share_list(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (e->listed & (1u << o)) return;
    e->listed |= 1u << o;
    gpumem__share_lock(s, &s->list_lock[o].v);
    s->written[o][s->n_written[o]++] = e->line;
    gpumem__share_unlock(s, &s->list_lock[o].v);
}

/* Owner o drops the pins a merge left it (the caller holds the line's lock;
 * o's own call: its words are its own to touch). */
GPUMEM_API void gpumem__share_settle(gpumem_share *s, gpumem__share_entry *e, uint32_t o) {
    if (!(e->owed & (1u << o))) return;
    e->owed &= ~(1u << o);
    gpumem__share_unpin(s->caches[o], e->line);
}

/* ---- the merge of one line --------------------------------------------------- */

/* Write every copy written since the last merge into storage (the caller
 * holds the line's lock): read storage into `scratch` (slot k of `pool`, the
 * I/O made by cache c), lay each copy written without a base over it whole
 * (a copy is without a base only if its owner was the only holder, up to
 * date, when it first wrote: at most one such copy, and storage has not
 * moved since, so its unwritten bytes are storage's), then each based copy's
 * changed bytes (copy vs base) in owner order, so on overlapping bytes the
 * highest owner's write wins, the same on every run (a byte rewritten with
 * its base's value is no change: the race rule is per byte). The copies
 * merged together hold concurrent writes only: an acquire merges a stale
 * copy its owner wrote before dropping it, so no write made after an
 * acquire shares a merge with one released before it. Write it back. Then
 * storage's vector takes every merged copy's, the copies are unpinned (a
 * GPU owner's only at_boundary, else the pin is owed: gpumem__share_may_touch)
 * and their bases dropped: the next write takes a base again, from the copy
 * as it is then. EAGAIN while an owner holds a written copy to write (its
 * bytes may be changing; nothing is written then); EIO: storage failed,
 * everything stays as it was. */
GPUMEM_API gpumem_status gpumem__share_merge_line(gpumem_share *s, gpumem__share_entry *e, gpumem_cache *c,
                                                  const gpumem__slot_pool *pool, uint32_t k, uint32_t at_boundary) {
    unsigned char *scratch = gpumem__pool_data(c, pool, k);
    uint32_t o, pass, i;
    gpumem_status st;
    if (!e->dirty) return GPUMEM_OK;
    for (o = 1; o < s->n_owners; o++)
        if ((e->dirty & (1u << o)) && e->writers[o]) return GPUMEM_EAGAIN;
    if ((st = gpumem__cache_io_pool(c, 0, e->line, pool, k)) != GPUMEM_OK) return st;
    for (pass = 0; pass < 2; pass++)
        for (o = 1; o < s->n_owners; o++) {
            const unsigned char *copy, *base;
            if (!(e->dirty & (1u << o)) || (pass == 0) != !(e->based & (1u << o))) continue;
            copy = gpumem__share_copy(s, e, o);
            if (pass == 0) {
                memcpy(scratch, copy, s->line_bytes);
                continue;
            }
            base = gpumem__share_base(s, e->base[o]);
            /* Eight bytes compared at a time (lines are whole 512-byte
             * blocks); only a word that differs is merged byte by byte. */
            for (i = 0; i < s->line_bytes; i += 8) {
                uint64_t now, was;
                uint32_t b;
                memcpy(&now, copy + i, 8);
                memcpy(&was, base + i, 8);
                if (now == was) continue;
                for (b = i; b < i + 8; b++)
                    if (copy[b] != base[b]) scratch[b] = copy[b];
            }
        }
    if ((st = gpumem__cache_io_pool(c, 1, e->line, pool, k)) != GPUMEM_OK) return st;
    for (o = 1; o < s->n_owners; o++) {
        if (!(e->dirty & (1u << o))) continue;
        gpumem_share_vv_max_into(e->vv[0], e->vv[o], s->n_owners);
        gpumem__share_drop_base(s, e, o);
        /* A GPU owner whose kernels may be running keeps its pin, owed: it
         * drops it itself (gpumem__share_settle: its next write of the line
         * reuses it; its acquire, release, merge or flush drops it). */
        if (gpumem__share_may_touch(o, at_boundary)) {
            gpumem__share_unpin(s->caches[o], e->line);
        } else {
            e->owed |= 1u << o;
            gpumem__share_list(s, e, o); /* its next release, acquire or flush drops it */
            gpumem__share_count(s, GPUMEM__SS_OWED_PINS, 1);
        }
        gpumem__share_count(s, GPUMEM__SS_MERGED_COPIES, 1);
    }
    e->dirty = 0;
    e->gen++;
    if (s->merges) s->merges[e->line]++; /* host tiers' copies filled before are stale now */
    /* After the write: a fetch that read storage before this saw the epoch
     * before it, and its fills drop what it read (gpumem__share_fill). */
    gpumem_atomic_fetch_add_u32(&s->merge_epoch, 1, GPUMEM_ORDER_RELEASE, GPUMEM__SDEV);
    gpumem__share_count(s, GPUMEM__SS_MERGES, 1);
    return GPUMEM_OK;
}

/* Some other owner released writes that storage does not have yet. */
GPUMEM_API int gpumem__share_released_elsewhere(const gpumem_share *s, const gpumem__share_entry *e, uint32_t o) {
    uint32_t p;
    for (p = 1; p < s->n_owners; p++)
        if (p != o && (e->dirty & (1u << p)) && e->rel[p] > e->vv[0][p]) return 1;
    return 0;
}

/* ---- the fill hook ------------------------------------------------------------ */

/* Forget owner o's record of the line in its slot k, which the cache is
 * refilling (the old line was evicted or invalidated clean: a written copy
 * is pinned until merged, so it cannot have been). */
GPUMEM_API void gpumem__share_forget_slot(gpumem_share *s, uint32_t o, uint32_t k) {
    const uint64_t old = gpumem__share_slot_line(s, o, k);
    uint32_t *lk;
    gpumem__share_entry *e;
    if (old == GPUMEM_CACHE_EMPTY) return;
    e = gpumem__share_lock_entry(s, old, &lk);
    if (e && (e->holders & (1u << o)) && e->slot[o] == k) {
        if (e->dirty & (1u << o)) gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1); /* pinned: cannot be */
        e->holders &= ~(1u << o);
        gpumem__share_maybe_free(s, e);
    }
    gpumem__share_set_slot_line(s, o, k, GPUMEM_CACHE_EMPTY);
    gpumem__share_unlock(s, lk);
}

/* Whether peer p's copy can be read from: valid in its cache, written by
 * nobody since the last merge (so no writer is changing it: writers
 * register under the line's lock, which the caller holds), read since that
 * merge (so it has every write storage has, released or not), and holding
 * everything released (home: gpumem__share_home). A stale copy never is. */
GPUMEM_API int gpumem__share_is_source(const gpumem_share *s, const gpumem__share_entry *e, uint32_t p,
                                       const uint32_t *home) {
    return (e->holders & (1u << p)) && !(e->dirty & (1u << p)) && e->copy_gen[p] == e->gen &&
           gpumem_share_vv_leq(home, e->vv[p], s->n_owners);
}

/* A peer's copy to read from for owner o, preferring `want` (0: any);
 * returns its owner, or 0 for none. The host owner's copy is pinned for the
 * copy (gpumem__share_unpin after it). A GPU owner's is not: its cache words
 * are not the host's to touch while its kernels run, and none is needed.
 * The share's record says the copy is in slot[p], valid, and read or filled
 * under this line's lock; the slot's bytes change only in a fill of that
 * slot, which first forgets the old line under the old line's lock
 * (gpumem__share_forget_slot), or in a fill of this line, under this
 * line's lock; and a writer of the copy registers under this lock too. So
 * while the caller holds the lock, the bytes in slot[p] are the copy's,
 * even if p's cache has dropped the line meanwhile (the bytes stay until
 * the slot is filled again). */
GPUMEM_API uint32_t gpumem__share_peer(gpumem_share *s, gpumem__share_entry *e, uint32_t o, uint32_t want) {
    uint32_t home[GPUMEM_SHARE_MAX_OWNERS], p, i;
    gpumem__share_home(s, e, home);
    for (i = 0; i < s->n_owners; i++) {
        p = i == 0 ? want : i; /* `want` first, then every owner in turn */
        if (p == 0 || p == o || (i != 0 && p == want) || !gpumem__share_is_source(s, e, p, home)) continue;
        if (!gpumem__share_may_touch(p, 0) || gpumem__share_pin(s->caches[p], e->line, e->slot[p], 0)) return p;
    }
    return 0;
}

/* If owner o's host tier holds `line`, claim its copy there (*cp, and
 * *claimed: the tier is exclusive with the cache, so the fill frees it
 * whatever it does) and say whether it may be taken (the caller holds the
 * line's lock): 1 when the line was not merged since o's last fill of it.
 * A fill's copy is storage's content (read from storage, or from a peer
 * read since the last merge, which is the same bytes), and only a merge
 * writes a shared line to storage. So the copy is storage's content now:
 * taking it is a storage read (it gets storage's version vector), and
 * every release that storage lacks makes the fill merge before this, which
 * makes the copy stale. 0 when it is not there, or stale (counted). A dirty
 * copy cannot be there: the share's copies are clean (one is counted as a
 * violation and dropped). */
GPUMEM_API int gpumem__share_tier_claim(gpumem_share *s, gpumem_cache *c, uint32_t o, uint64_t line,
                                        gpumem__tier_copy *cp, int *claimed) {
    const uint32_t *filled = s->filled[o];
    *claimed = 0;
    if (!c->tier || !gpumem__tier_lookup(c->tier, line, cp)) return 0;
    *claimed = 1;
    if (cp->dirty) {
        gpumem__share_count(s, GPUMEM__SS_VIOLATIONS, 1);
        cp->dirty = 0; /* a write made around the share: not kept */
    }
    if (filled && s->merges && filled[line] != 0 && filled[line] == s->merges[line] + 1) return 1;
    gpumem__share_count(s, GPUMEM__SS_TIER_STALE, 1);
    return 0;
}

#if !GPUMEM_ON_DEVICE
/* Owner c's miss on `line` into its slot k (the cache holds the line BUSY
 * and the slot), on a host thread: if another owner released writes storage
 * lacks, merge them into storage first (GAIA's merge at fault time: slot k
 * is the scratch); then take the line from the owner's host tier if its
 * copy there is still good, else copy it from a peer's valid copy if there
 * is one, else read storage; record the copy and its version vector.
 * Everything under the line's lock, so no merge writes storage while the
 * line is read and no writer starts on a source while it is copied.
 * `served`: for a GPU thread, by the miss queue's server, while the owner's
 * kernels run: the I/O goes through the host owner's cache (its pairs are
 * host threads'; the slot's bus address is the owner's, so the data still
 * lands in the owner's slot), the owner's tier is not looked in (a queue
 * refuses GPU owners with one: its words are device-scope), and a merge a
 * writer holds up is answered EAGAIN at once (the server never waits for a
 * GPU thread: that writer may be waiting on the server). */
static inline gpumem_status gpumem__share_fill_here(gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k,
                                                    int served) {
    const uint32_t o = gpumem__share_owner(s, c);
    const gpumem__share_stage *sg = served ? 0 : gpumem__share_staged;
    gpumem_cache *io = served ? s->caches[GPUMEM_SHARE_HOST] : c;
    uint32_t *lk = gpumem__share_line_lock(s, line), p;
    gpumem__share_entry *e;
    gpumem_status st = GPUMEM_OK;
    gpumem_backoff wait = gpumem_backoff_start();
    int tier_claimed = 0;
    gpumem__tier_copy cp;
    if (o == GPUMEM__SHARE_NONE || !io) return GPUMEM_ESTATE;
    if (gpumem__share_slot_line(s, o, k) != line) gpumem__share_forget_slot(s, o, k);
    for (;;) {
        gpumem__share_lock(s, lk);
        if (!(e = gpumem__share_get_entry(s, line))) {
            gpumem__share_unlock(s, lk);
            return GPUMEM_ENOMEM;
        }
        if (!gpumem__share_released_elsewhere(s, e, o)) break;
        st = gpumem__share_merge_line(s, e, io, &c->pool, k, 0);
        if (st == GPUMEM_OK) {
            gpumem__share_count(s, GPUMEM__SS_ON_DEMAND_MERGES, 1);
            break;
        }
        gpumem__share_unlock(s, lk);
        if (st != GPUMEM_EAGAIN || served) return st;
        gpumem__share_pause(&wait); /* a writer holds a released copy: let it put the line down */
    }
    /* A line of a run gpumem_share_fetch moves together, on this thread:
     * its source was chosen for the run, and its transfer counted there. */
    if (sg && (sg->share != s || sg->owner != o || line - sg->first >= sg->n)) sg = 0;
    if (!served && gpumem__share_tier_claim(s, c, o, line, &cp, &tier_claimed)) {
        memcpy(gpumem__slot_data(c, k), cp.src, s->line_bytes);
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]); /* as storage read now (see the claim) */
        gpumem__share_count(s, GPUMEM__SS_TIER_HITS, 1);
    } else if (sg && !sg->from &&
        gpumem_atomic_load_u32(&s->merge_epoch, GPUMEM_ORDER_ACQUIRE, GPUMEM__SDEV) == sg->epoch) {
        /* Storage has not changed since the run was read: its bytes are storage's. */
        memcpy(gpumem__slot_data(c, k), sg->data + (size_t)(line - sg->first) * s->line_bytes, s->line_bytes);
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_READS, 1);
    } else if ((p = gpumem__share_peer(s, e, o, sg ? sg->from : 0)) != 0) {
        gpumem_copy_lanes(gpumem__slot_data(c, k), gpumem__share_copy(s, e, p), s->line_bytes, 0, 1);
        if (gpumem__share_may_touch(p, 0)) gpumem__share_unpin(s->caches[p], line); /* pinned by _peer */
        memcpy(e->vv[o], e->vv[p], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_PEER_READS, 1);
        if (!sg || sg->from != p) gpumem__share_count(s, GPUMEM__SS_PEER_TRANSFERS, 1);
    } else if ((st = gpumem__cache_io_pool(io, 0, line, &c->pool, k)) == GPUMEM_OK) {
        memcpy(e->vv[o], e->vv[0], sizeof e->vv[o]);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_READS, 1);
        gpumem__share_count(s, GPUMEM__SS_STORAGE_TRANSFERS, gpumem__cache_io_cmds(io, 0));
    }
    if (tier_claimed) gpumem__tier_fetch_done(c->tier, line, &cp); /* taken or stale: the tier slot is free */
    if (st == GPUMEM_OK) {
        e->holders |= 1u << o;
        e->copy_gen[o] = e->gen;
        e->slot[o] = k;
        gpumem__share_set_slot_line(s, o, k, line);
        if (s->filled[o]) s->filled[o][line] = s->merges[line] + 1;
    } else {
        gpumem__share_maybe_free(s, e);
    }
    gpumem__share_unlock(s, lk);
    return st;
}
#endif

/* The hook: owner c's miss on `line` into its slot k. A GPU thread posts it
 * to the miss queue and waits for the host's answer: the fill's body stays
 * off the device, where ptxas would count its registers in every kernel
 * that can miss (it took the cached element read from 48 to 93). A host
 * thread fills here, unless it stands for a GPU thread (the CPU tests). */
GPUMEM__CACHE_HOOK gpumem_status gpumem__share_fill(gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k) {
    const uint32_t o = gpumem__share_owner(s, c);
    if (o == GPUMEM__SHARE_NONE) return GPUMEM_ESTATE;
    if (o >= GPUMEM_SHARE_GPU0 && gpumem__share_posts()) return gpumem__share_post(s, GPUMEM__SQ_FILL, o, o, line, 0, k);
#if GPUMEM_ON_DEVICE
    return GPUMEM_ESTATE; /* the host owner's cache, on the device: not a GPU's */
#else
    return gpumem__share_fill_here(s, c, line, k, 0);
#endif
}
#else
GPUMEM_API gpumem_status gpumem__share_fill(struct gpumem_share *s, gpumem_cache *c, uint64_t line, uint32_t k) {
    return (void)s, (void)c, (void)line, (void)k, GPUMEM_ESTATE;
}
#endif /* GPUMEM_CACHE_SHARE */

#endif /* GPUMEM_SHARE_PATH_H */
