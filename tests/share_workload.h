/* The share's concurrent workloads (tests/test_share.c, tests/stress.c under
 * ThreadSanitizer and ASan): host thread groups stand for the devices, every
 * byte read checked by content, every byte written kept in a model. Each
 * returns 0, or 1 with run->why saying what was wrong. */
#ifndef SHARE_WORKLOAD_H
#define SHARE_WORKLOAD_H
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include "share_rig.h"

enum { SHARE_WL_LINES = 64, SHARE_WL_MAX_THREADS = 32 };

/* Workload flags: a host tier below each cache; the GPU owners' threads
 * (owners 2..) stand for GPU threads, their misses served through the miss
 * queue by a server thread (a queue refuses GPU owners with a tier). */
enum { SHARE_WL_TIER = 1, SHARE_WL_SERVED = 2, SHARE_WL_SHORT_TIMEOUT = 4 };
/* SHARE_WL_SHORT_TIMEOUT (with SERVED): the queue's timeout is 20 us, so
 * GPU threads' requests are withdrawn all the time, some while a server
 * takes them: a request served after its poster left would land in a slot
 * the cache has given back, which the content checks would see. */

typedef struct share_run {
    gpumem_share_stats stats;
    char why[256];
} share_run;

typedef struct share_wl {
    share_rig rig;
    uint32_t n_threads, per_owner, ops, random, rounds, served;
    pthread_barrier_t barrier;
    pthread_mutex_t lock;
    int failed;
    char why[256];
    unsigned char model[SHARE_WL_LINES][SHARE_RIG_LINE];
} share_wl;

typedef struct share_thread {
    share_wl *w;
    uint32_t tid, owner;
} share_thread;

static void share_wl_fail(share_wl *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&w->lock);
    if (!w->failed) vsnprintf(w->why, sizeof w->why, fmt, ap);
    w->failed = 1;
    pthread_mutex_unlock(&w->lock);
    va_end(ap);
}

/* ---- producer -> consumer ------------------------------------------------------- */

static unsigned char share_pattern(uint32_t round, uint32_t l, uint32_t b) {
    return (unsigned char)(round * 31u + l * 7u + b + 1u);
}

static void *share_pc_thread(void *arg) {
    share_thread *t = (share_thread *)arg;
    share_wl *w = t->w;
    gpumem_share *sh = w->rig.share;
    uint32_t r, l, b, o = t->owner;
    if (w->served && o >= GPUMEM_SHARE_GPU0) gpumem_share_thread_as_gpu(1);
    for (r = 1; r <= w->rounds; r++) {
        const uint32_t producer = 1 + r % (w->rig.n_owners - 1);
        unsigned char *p;
        if (o == producer) {
            for (l = 0; l < SHARE_WL_LINES; l++) {
                if (share_rig_get(&w->rig, o, l, 1, &p) != GPUMEM_OK) {
                    share_wl_fail(w, "round %u: owner %u could not write line %u", r, o, l);
                    continue;
                }
                for (b = 0; b < SHARE_RIG_LINE; b++) p[b] = share_pattern(r, l, b);
                gpumem_share_put(sh, o, l, 1);
            }
            if (share_rig_release(&w->rig, o, 0, SHARE_WL_LINES) != GPUMEM_OK)
                share_wl_fail(w, "round %u: release by %u failed", r, o);
        }
        pthread_barrier_wait(&w->barrier); /* the signal */
        if (o != producer) {
            gpumem_status st;
            while ((st = gpumem_share_acquire(sh, o, 0, SHARE_WL_LINES)) == GPUMEM_EAGAIN) {
            }
            if (st != GPUMEM_OK) share_wl_fail(w, "round %u: acquire by %u: status %u", r, o, (uint32_t)st);
            for (l = 0; l < SHARE_WL_LINES; l++) {
                if (share_rig_get(&w->rig, o, l, 0, &p) != GPUMEM_OK) {
                    share_wl_fail(w, "round %u: owner %u could not read line %u", r, o, l);
                    continue;
                }
                for (b = 0; b < SHARE_RIG_LINE; b++)
                    if (p[b] != share_pattern(r, l, b)) {
                        share_wl_fail(w, "round %u: owner %u read a stale line %u (byte %u)", r, o, l, b);
                        break;
                    }
                gpumem_share_put(sh, o, l, 0);
            }
        }
        pthread_barrier_wait(&w->barrier);
    }
    return NULL;
}

/* ---- writers of disjoint bytes, and random mixes ---------------------------------- */

static uint32_t share_rand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (uint32_t)(*x >> 11);
}

/* Byte b of every line belongs to thread b mod n_threads: one writer per
 * byte, so the model is exact. */
static void *share_mix_thread(void *arg) {
    share_thread *t = (share_thread *)arg;
    share_wl *w = t->w;
    gpumem_share *sh = w->rig.share;
    const uint32_t o = t->owner, per = SHARE_RIG_LINE / w->n_threads;
    uint64_t x = 0x9E3779B97F4A7C15ull * (t->tid + 1);
    uint32_t i, j, v = 0;
    if (w->served && o >= GPUMEM_SHARE_GPU0) gpumem_share_thread_as_gpu(1);
    for (i = 0; i < w->ops; i++) {
        const uint32_t op = share_rand(&x) % 100, l = share_rand(&x) % SHARE_WL_LINES;
        unsigned char *p;
        if (op < 55) { /* write four of my bytes */
            if (share_rig_get(&w->rig, o, l, 1, &p) != GPUMEM_OK) {
                share_wl_fail(w, "owner %u thread %u: write of line %u refused", o, t->tid, l);
                continue;
            }
            for (j = 0; j < 4; j++) {
                uint32_t b = t->tid + (share_rand(&x) % per) * w->n_threads;
                v = v % 255 + 1;
                p[b] = (unsigned char)v;
                w->model[l][b] = (unsigned char)v;
            }
            gpumem_share_put(sh, o, l, 1);
        } else if (op < 80 && w->random) { /* read: my bytes are as I left them */
            if (share_rig_get(&w->rig, o, l, 0, &p) != GPUMEM_OK) {
                share_wl_fail(w, "owner %u thread %u: read of line %u refused", o, t->tid, l);
                continue;
            }
            for (j = 0; j < per; j++) {
                uint32_t b = t->tid + j * w->n_threads;
                if (p[b] != w->model[l][b]) {
                    share_wl_fail(w, "owner %u lost its own write: line %u byte %u (holds %u)", o, l, b, (uint32_t)p[b]);
                    break;
                }
            }
            gpumem_share_put(sh, o, l, 0);
        } else if (op < 88) {
            if (t->tid % w->per_owner == 0) gpumem_share_release(sh, o, 0, SHARE_WL_LINES);
        } else if (op < 95) {
            if (w->random) gpumem_share_acquire(sh, o, 0, SHARE_WL_LINES); /* EAGAIN: held, fine */
        } else if (w->served && o >= GPUMEM_SHARE_GPU0) {
            /* A GPU cannot flush or merge while its kernels run: a release. */
            gpumem_share_release(sh, o, 0, SHARE_WL_LINES); /* EAGAIN / ETIMEDOUT (host part): fine */
        } else if (op < 98) {
            gpumem_share_flush(sh, o); /* EAGAIN: a line was being written, fine */
        } else {
            gpumem_share_merge(sh, o, l, 1);
        }
    }
    return NULL;
}

static int share_wl_run(share_wl *w, void *(*fn)(void *)) {
    pthread_t th[SHARE_WL_MAX_THREADS];
    share_thread args[SHARE_WL_MAX_THREADS];
    uint32_t i;
    pthread_barrier_init(&w->barrier, NULL, w->n_threads);
    pthread_mutex_init(&w->lock, NULL);
    for (i = 0; i < w->n_threads; i++) {
        args[i].w = w;
        args[i].tid = i;
        args[i].owner = 1 + i / w->per_owner;
        pthread_create(&th[i], NULL, fn, &args[i]);
    }
    for (i = 0; i < w->n_threads; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&w->barrier);
    pthread_mutex_destroy(&w->lock);
    return w->failed;
}

/* After every owner's release and flush, storage holds the model. */
static int share_wl_settle(share_wl *w) {
    uint32_t o, l, b;
    for (o = 1; o < w->rig.n_owners; o++) {
        gpumem_status st = gpumem_share_release(w->rig.share, o, 0, SHARE_WL_LINES);
        if ((st = share_rig_flush(&w->rig, o)) != GPUMEM_OK) {
            share_wl_fail(w, "flush of owner %u: status %u", o, (uint32_t)st);
            return 1;
        }
    }
    for (l = 0; l < SHARE_WL_LINES; l++)
        for (b = 0; b < SHARE_RIG_LINE; b++)
            if (share_rig_stored(&w->rig, l, b) != w->model[l][b]) {
                share_wl_fail(w, "storage line %u byte %u holds %u, the last write was %u", l, b,
                              (uint32_t)share_rig_stored(&w->rig, l, b), (uint32_t)w->model[l][b]);
                return 1;
            }
    return 0;
}

static int share_wl_end(share_wl *w, int failed, share_run *run) {
    gpumem_status st;
    gpumem_share_get_stats(w->rig.share, &run->stats);
    snprintf(run->why, sizeof run->why, "%s", w->why);
    if ((st = share_rig_free(&w->rig)) != GPUMEM_OK && !failed) {
        snprintf(run->why, sizeof run->why, "share destroy: status %d", (int)st);
        failed = 1;
    }
    free(w);
    return failed;
}

/* SHARE_WL_TIER: caches of 8 slots, each over a host tier that can hold
 * every line (copies go down and come back up all the time). */
static share_wl *share_wl_new(uint32_t n_owners, uint32_t n_ctrls, uint32_t n_slots, int flags, share_run *run) {
    share_wl *w = (share_wl *)calloc(1, sizeof *w);
    const int tier = flags & SHARE_WL_TIER;
    memset(run, 0, sizeof *run);
    if (!w) return NULL;
    w->served = (flags & SHARE_WL_SERVED) != 0;
    if (share_rig_make_tiered(&w->rig, n_owners, n_ctrls, SHARE_WL_LINES, tier ? 8 : n_slots,
                              tier ? SHARE_WL_LINES : 0) != GPUMEM_OK ||
        (w->served && share_rig_serve(&w->rig, 64, flags & SHARE_WL_SHORT_TIMEOUT ? 20000 : 0) != GPUMEM_OK)) {
        snprintf(run->why, sizeof run->why, "setup failed");
        share_rig_free(&w->rig);
        free(w);
        return NULL;
    }
    return w;
}

/* Without a tier the caches hold every line, so copies outlive rounds;
 * with one, they outlive them in the tier. */
static int share_producer_consumer(uint32_t n_owners, uint32_t n_ctrls, uint32_t rounds, int flags, share_run *run) {
    share_wl *w = share_wl_new(n_owners, n_ctrls, SHARE_WL_LINES, flags, run);
    if (!w) return 1;
    w->n_threads = n_owners - 1;
    w->per_owner = 1;
    w->rounds = rounds;
    return share_wl_end(w, share_wl_run(w, share_pc_thread), run);
}

/* random 0: writes, releases and merges (false sharing); 1: reads checked,
 * acquires and flushes too, in caches of 8 slots (flags: SHARE_WL_*). */
static int share_mix(uint32_t n_owners, uint32_t n_ctrls, uint32_t random, int flags, uint32_t per_owner, uint32_t ops,
                     share_run *run) {
    share_wl *w = share_wl_new(n_owners, n_ctrls, random ? 8 : SHARE_WL_LINES / 2, flags, run);
    int failed;
    if (!w) return 1;
    w->per_owner = per_owner;
    w->n_threads = (n_owners - 1) * per_owner;
    w->ops = ops;
    w->random = random;
    failed = share_wl_run(w, share_mix_thread);
    if (!failed) failed = share_wl_settle(w);
    return share_wl_end(w, failed, run);
}

/* ---- a reference model of lazy release consistency ---------------------------------
 *
 * One thread plays every owner, one operation at a time, at random: writes,
 * reads, releases and acquires of random ranges, merges, flushes, tokens
 * handed on. Caches of 4 slots for 16 lines (eviction all the time), over
 * memory or controllers, with host tiers or with the GPU owners' misses
 * served (the thread stands for a GPU thread while it plays one). Every
 * byte's values only grow, so the model needs no history: byte b of a line
 * holds at least floor[o] for owner o - the value as of the newest release
 * o has acquired since (or its own write) - and at most its newest value.
 * Owner o writes only its own bytes [8o, 8o + 8) of each line; the token
 * bytes [96, 100) are written only by the line's token holder, and the
 * token goes from owner to owner by release -> acquire, so every write of a
 * token byte happens after the one before: a merge that let an earlier
 * write win, or a read of an old one after the acquire, is caught. Nothing
 * is held between operations, so an acquire must end OK at once. After a
 * release and a flush of every owner, storage holds every byte's newest
 * value. */
enum { SHARE_MD_LINES = 16, SHARE_MD_TOKEN = 96, SHARE_MD_BYTES = 100 };

typedef struct share_md {
    share_rig rig;
    uint32_t served;
    unsigned char cur[SHARE_MD_LINES][SHARE_MD_BYTES];      /* newest value */
    unsigned char rel[SHARE_MD_LINES][SHARE_MD_BYTES];      /* as of its writer's newest release */
    unsigned char floor[GPUMEM_SHARE_MAX_OWNERS][SHARE_MD_LINES][SHARE_MD_BYTES];
    uint32_t token[SHARE_MD_LINES];                         /* the owner that may write the token bytes */
    uint32_t passing[SHARE_MD_LINES];                       /* released by the holder for this owner (0: none) */
} share_md;

/* Whose byte b is (the token's holder for the token bytes). */
static inline uint32_t share_md_writer(const share_md *m, uint32_t l, uint32_t b) {
    return b >= SHARE_MD_TOKEN ? m->token[l] : b / 8;
}

static inline void share_md_as(share_md *m, uint32_t o) {
    if (m->served) gpumem_share_thread_as_gpu(o >= GPUMEM_SHARE_GPU0);
}

/* The model's side of owner o's release of [first, first + n). */
static inline void share_md_released(share_md *m, uint32_t o, uint32_t first, uint32_t n) {
    uint32_t l, b;
    for (l = first; l < first + n; l++)
        for (b = 0; b < SHARE_MD_BYTES; b++)
            if (share_md_writer(m, l, b) == o) m->rel[l][b] = m->cur[l][b];
}

/* ... and of owner o's acquire. */
static inline void share_md_acquired(share_md *m, uint32_t o, uint32_t first, uint32_t n) {
    uint32_t l, b;
    for (l = first; l < first + n; l++)
        for (b = 0; b < SHARE_MD_BYTES; b++)
            if (m->rel[l][b] > m->floor[o][l][b]) m->floor[o][l][b] = m->rel[l][b];
}

static inline int share_md_release(share_md *m, uint32_t o, uint32_t first, uint32_t n, share_run *run) {
    gpumem_status st;
    share_md_as(m, o);
    st = share_rig_release(&m->rig, o, first, n);
    if (st != GPUMEM_OK) return snprintf(run->why, sizeof run->why, "release(%u, %u, %u): %s", o, first, n, gpumem_status_str(st)), 1;
    share_md_released(m, o, first, n);
    if (o >= GPUMEM_SHARE_GPU0 && m->rig.caches[GPUMEM_SHARE_HOST]) share_md_acquired(m, GPUMEM_SHARE_HOST, first, n);
    return 0;
}

static inline int share_md_acquire(share_md *m, uint32_t o, uint32_t first, uint32_t n, share_run *run) {
    gpumem_status st;
    share_md_as(m, o);
    if (o >= GPUMEM_SHARE_GPU0 && m->rig.caches[GPUMEM_SHARE_HOST]) share_md_released(m, GPUMEM_SHARE_HOST, first, n);
    st = gpumem_share_acquire(m->rig.share, o, first, n);
    if (st != GPUMEM_OK)
        return snprintf(run->why, sizeof run->why, "acquire(%u, %u, %u) with nothing held: %s", o, first, n, gpumem_status_str(st)), 1;
    share_md_acquired(m, o, first, n);
    return 0;
}

static inline int share_model(uint32_t n_owners, uint32_t n_ctrls, int flags, uint64_t seed, uint32_t ops, share_run *run) {
    share_md *m = (share_md *)calloc(1, sizeof *m);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint32_t i, l, b, o, bad = 0;
    gpumem_status st;
    memset(run, 0, sizeof *run);
    if (!m) return snprintf(run->why, sizeof run->why, "no memory"), 1;
    m->served = (flags & SHARE_WL_SERVED) != 0;
    if ((st = share_rig_make_tiered(&m->rig, n_owners, n_ctrls, SHARE_MD_LINES, 4, flags & SHARE_WL_TIER ? 8 : 0)) != GPUMEM_OK ||
        (m->served && (st = share_rig_serve(&m->rig, 64, 0)) != GPUMEM_OK)) {
        snprintf(run->why, sizeof run->why, "rig: %s", gpumem_status_str(st));
        free(m);
        return 1;
    }
    for (l = 0; l < SHARE_MD_LINES; l++) m->token[l] = 1 + l % (n_owners - 1);
    for (i = 0; i < ops && !bad; i++) {
        const uint32_t op = share_rand(&x) % 100, first = share_rand(&x) % SHARE_MD_LINES;
        const uint32_t n = 1 + share_rand(&x) % (SHARE_MD_LINES - first);
        unsigned char *p;
        o = 1 + share_rand(&x) % (n_owners - 1);
        l = first;
        share_md_as(m, o);
        if (op < 35) { /* a write: an own byte, or a token byte if o holds the token */
            b = (share_rand(&x) % 2 && m->token[l] == o && !m->passing[l]) ? SHARE_MD_TOKEN + share_rand(&x) % 4
                                                                            : o * 8 + share_rand(&x) % 8;
            if (m->cur[l][b] == 255) continue;
            if ((st = share_rig_get(&m->rig, o, l, 1, &p)) != GPUMEM_OK) {
                bad = (uint32_t)snprintf(run->why, sizeof run->why, "op %u: owner %u write of line %u: %s", i, o, l, gpumem_status_str(st));
                break;
            }
            p[b] = ++m->cur[l][b];
            m->floor[o][l][b] = m->cur[l][b];
            gpumem_share_put(m->rig.share, o, l, 1);
        } else if (op < 70) { /* a read of the whole line, every byte checked */
            if ((st = share_rig_get(&m->rig, o, l, 0, &p)) != GPUMEM_OK) {
                bad = (uint32_t)snprintf(run->why, sizeof run->why, "op %u: owner %u read of line %u: %s", i, o, l, gpumem_status_str(st));
                break;
            }
            for (b = 0; b < SHARE_MD_BYTES && !bad; b++)
                if (p[b] < m->floor[o][l][b] || p[b] > m->cur[l][b])
                    bad = (uint32_t)snprintf(run->why, sizeof run->why,
                                             "op %u: owner %u read line %u byte %u = %u: the model allows %u..%u (writer %u)",
                                             i, o, l, b, p[b], m->floor[o][l][b], m->cur[l][b], share_md_writer(m, l, b));
            gpumem_share_put(m->rig.share, o, l, 0);
        } else if (op < 80) {
            bad = (uint32_t)share_md_release(m, o, first, n, run);
        } else if (op < 90) {
            bad = (uint32_t)share_md_acquire(m, o, first, n, run);
        } else if (op < 95) { /* the token of line l handed on: release by its holder, acquire by the next */
            const uint32_t h = m->token[l], g = 1 + share_rand(&x) % (n_owners - 1);
            if (!(bad = (uint32_t)share_md_release(m, h, l, 1, run)) && !(bad = (uint32_t)share_md_acquire(m, g, l, 1, run)))
                m->token[l] = g;
        } else if (op < 98) { /* merges and flushes: host calls (a GPU owner's at its boundary) */
            gpumem_share_thread_as_gpu(0);
            st = op < 97 ? gpumem_share_merge(m->rig.share, o, first, n) : gpumem_share_flush(m->rig.share, o);
            if (st != GPUMEM_OK) bad = (uint32_t)snprintf(run->why, sizeof run->why, "op %u: merge/flush by %u: %s", i, o, gpumem_status_str(st));
        }
    }
    gpumem_share_thread_as_gpu(0);
    for (o = 1; o < n_owners && !bad; o++) bad = (uint32_t)share_md_release(m, o, 0, SHARE_MD_LINES, run);
    gpumem_share_thread_as_gpu(0);
    for (o = 1; o < n_owners && !bad; o++)
        if ((st = gpumem_share_flush(m->rig.share, o)) != GPUMEM_OK)
            bad = (uint32_t)snprintf(run->why, sizeof run->why, "final flush by %u: %s", o, gpumem_status_str(st));
    for (l = 0; l < SHARE_MD_LINES && !bad; l++)
        for (b = 0; b < SHARE_MD_BYTES && !bad; b++)
            if (share_rig_stored(&m->rig, l, b) != m->cur[l][b])
                bad = (uint32_t)snprintf(run->why, sizeof run->why, "after every flush line %u byte %u holds %u, not the newest %u (writer %u)",
                                         l, b, share_rig_stored(&m->rig, l, b), m->cur[l][b], share_md_writer(m, l, b));
    gpumem_share_get_stats(m->rig.share, &run->stats);
    if (!bad && run->stats.violations)
        bad = (uint32_t)snprintf(run->why, sizeof run->why, "%llu violations", (unsigned long long)run->stats.violations);
    if ((st = share_rig_free(&m->rig)) != GPUMEM_OK && !bad)
        bad = (uint32_t)snprintf(run->why, sizeof run->why, "destroy: %s", gpumem_status_str(st));
    free(m);
    return bad ? 1 : 0;
}

#endif
