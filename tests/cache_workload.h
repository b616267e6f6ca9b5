/* The multi-threaded cache workload shared by the Criterion suite
 * (test_cache.c) and the sanitizer driver (stress_cache.c). No assertions: it
 * counts, and the callers check.
 *
 * The data behind the cache is an array of 64-bit words; word w starts as
 * initial_word(w), so a line read from the wrong place, a stale slot or torn
 * data is caught by content. Threads do random operations:
 *   - read a random line through gpumem_cache_acquire and check every word;
 *     with hold_check, yield while still holding it and check it again (a
 *     line in use must never be evicted and its slot never reused);
 *   - with write_permille > 0, threads own the words w with w % threads ==
 *     id and write new values into their own words only (many threads write
 *     into each line); reads of own words must see the last value written.
 *     After the run the caller flushes and compares the backing with
 *     `expect` byte for byte;
 *   - with use_ref, the same through gpumem_cache_ref, in runs of
 *     consecutive words (the reference keeps its line between accesses).
 * A full cache (GPUMEM_EAGAIN) is counted and retried after dropping what
 * the thread holds; that is the documented rule.
 *
 * With tier_slots > 0 a host tier (gpumem_tier.h) sits below the cache: the
 * same workload then runs through all three tiers (test_tier.c), in `rounds`
 * rounds with both tiers checked quiescent (no line in both) in between. */
#ifndef GPUMEM_TEST_CACHE_WORKLOAD_H
#define GPUMEM_TEST_CACHE_WORKLOAD_H

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_tier.h" /* includes gpumem_cache.h */
#include "gpumem_swctl.h"

static uint64_t initial_word(uint64_t w) { return w * 0x9E3779B97F4A7C15ull ^ 0x5bd1e995ull; }
static uint64_t written_word(uint64_t w, uint64_t round) { return (w * 0xC2B2AE3D27D4EB4Full) ^ (round << 1) ^ 1; }

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double cache_test_scale(void) {
    const char *s = getenv("GPUMEM_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

typedef struct cache_cfg {
    uint32_t line_bytes;
    uint64_t n_lines;
    uint32_t n_slots;
    uint32_t policy;
    uint32_t threads;
    uint32_t ops;            /* per thread */
    uint32_t write_permille; /* share of writes (own words only) */
    int hold_check;
    int use_ref;
    int flusher;             /* one more thread writes back and invalidates all the time */
    int prefetcher;          /* one more thread prefetches random lines all the time (instead of a flusher) */
    uint32_t full_sweeps;
    /* NVMe backing (n_ctrls 0: memory) */
    uint32_t n_ctrls;
    uint32_t pairs_per_ctrl;
    uint32_t layout;
    uint32_t depth;
    uint64_t latency_ns;
    /* a host tier below the cache (tier_slots 0: none) */
    uint32_t tier_slots;
    uint32_t tier_placement; /* GPUMEM_TIER_* */
    uint32_t tier_policy;    /* GPUMEM_POLICY_FIFO or _CLOCK */
    uint32_t tier_model;     /* GMT-Reuse after round 1: TIER_MODEL_* */
    uint32_t rounds;         /* 0: 1 */
} cache_cfg;

/* GMT-Reuse's model after the first round: trained on the samples, or set
 * so that every line is predicted for storage, or for the GPU (kept). */
enum { TIER_MODEL_TRAINED = 0, TIER_MODEL_STORAGE = 1, TIER_MODEL_KEEP = 2 };

typedef struct cache_result {
    uint64_t ops, acquires, eagain, eio, other_status, bad_data, words_checked;
    gpumem_cache_stats stats;
    uint64_t quiescent_problems;
    uint64_t flushed;
    gpumem_status flush_status;
    uint64_t backing_mismatches; /* words in the backing that differ from expect */
    uint64_t ctl_violations, ctl_reads, ctl_writes;
    uint64_t flusher_rounds, flusher_errors;
    uint64_t prefetch_ok, prefetch_eagain; /* the prefetcher's calls, by status */
    gpumem_tier_stats tier;
} cache_result;

typedef struct cache_setup {
    cache_cfg cfg;
    gpumem_cache *cache;
    unsigned char *mem;              /* memory backing */
    gpumem_swctl *ctls[4];
    gpumem_nvme_qp *pairs[64];
    uint64_t *expect;                /* the data as it must end up */
    uint64_t n_words;
    gpumem_policy seq;               /* cfg->policy a sequential kind: the cache's policy */
    void *seq_mem;
    gpumem_tier *tier;               /* cfg->tier_slots > 0: the host tier */
} cache_setup;

typedef struct cache_worker {
    cache_setup *s;
    uint32_t id;
    uint64_t ops, acquires, eagain, eio, other_status, bad_data, words_checked;
    uint64_t round;
    uint64_t rng;
} cache_worker;

/* Where word w lives in the backing of controller/memory `which`. */
static uint64_t *backing_word(cache_setup *s, uint32_t ctrl, uint64_t w) {
    const cache_cfg *c = &s->cfg;
    uint64_t words_per_line = c->line_bytes / 8, line = w / words_per_line;
    if (c->n_ctrls == 0) return (uint64_t *)s->mem + w;
    if (c->layout == GPUMEM_CACHE_STRIPE)
        return (uint64_t *)gpumem_swctl_ram(s->ctls[line % c->n_ctrls]) +
               (line / c->n_ctrls) * words_per_line + w % words_per_line;
    return (uint64_t *)gpumem_swctl_ram(s->ctls[ctrl]) + w;
}

/* Build backing, content and cache. Returns a status (the caller asserts). */
static gpumem_status cache_setup_make(cache_setup *s, const cache_cfg *cfg) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    uint64_t w, data_bytes = cfg->n_lines * cfg->line_bytes;
    uint32_t j, k;
    gpumem_status st;
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->n_words = data_bytes / 8;
    s->expect = (uint64_t *)malloc(data_bytes);
    if (!s->expect) return GPUMEM_ENOMEM;
    for (w = 0; w < s->n_words; w++) s->expect[w] = initial_word(w);
    d.n_lines = cfg->n_lines;
    d.line_bytes = cfg->line_bytes;
    d.n_slots = cfg->n_slots;
    if (cfg->policy < GPUMEM_POLICY_SLOT_KINDS) {
        d.policy = cfg->policy;
    } else { /* LRU, HPE, ...: a sequential policy the cache serialises */
        gpumem_policy_desc pd = gpumem_policy_desc_default(cfg->policy, cfg->n_slots);
        s->seq_mem = malloc(gpumem_policy_bytes(&pd));
        if (!s->seq_mem) return GPUMEM_ENOMEM;
        if ((st = gpumem_policy_init(&s->seq, &pd, s->seq_mem)) != GPUMEM_OK) return st;
        d.seq_policy = &s->seq;
    }
    d.full_sweeps = cfg->full_sweeps;
    if (cfg->n_ctrls == 0) {
        s->mem = (unsigned char *)malloc(data_bytes);
        if (!s->mem) return GPUMEM_ENOMEM;
        memcpy(s->mem, s->expect, data_bytes);
        d.backing = gpumem_cache_backing_memory(s->mem);
    } else {
        uint64_t per_ctrl = cfg->layout == GPUMEM_CACHE_STRIPE ? data_bytes / cfg->n_ctrls + cfg->line_bytes
                                                              : data_bytes;
        for (j = 0; j < cfg->n_ctrls; j++) {
            gpumem_swctl_config c = gpumem_swctl_config_default();
            c.lba_bytes = 512;
            c.n_blocks = per_ctrl / 512;
            c.latency_ns = cfg->latency_ns;
            c.reorder = 4;
            c.seed = 7 + j;
            if ((st = gpumem_swctl_create(&c, &s->ctls[j])) != GPUMEM_OK) return st;
            for (k = 0; k < cfg->pairs_per_ctrl; k++)
                if ((st = gpumem_swctl_add_qp(s->ctls[j], cfg->depth, &s->pairs[j * cfg->pairs_per_ctrl + k])) !=
                    GPUMEM_OK)
                    return st;
        }
        for (j = 0; j < cfg->n_ctrls; j++)
            for (w = 0; w < s->n_words; w++)
                if (cfg->layout == GPUMEM_CACHE_REPLICATE || (w / (cfg->line_bytes / 8)) % cfg->n_ctrls == j)
                    *backing_word(s, j, w) = s->expect[w];
        for (j = 0; j < cfg->n_ctrls; j++)
            if ((st = gpumem_swctl_start(s->ctls[j])) != GPUMEM_OK) return st;
        gpumem_nvme_ns ns = gpumem_swctl_ns(s->ctls[0]);
        d.backing = gpumem_cache_backing_nvme(s->pairs, cfg->n_ctrls, cfg->pairs_per_ctrl, &ns, 0, cfg->layout);
    }
    if ((st = gpumem_cache_create(&d, &s->cache)) != GPUMEM_OK || !cfg->tier_slots) return st;
    {
        gpumem_tier_desc td = gpumem_tier_desc_default(s->cache, cfg->tier_slots);
        td.placement = cfg->tier_placement;
        td.policy = cfg->tier_policy;
        td.train_accesses = 1u << 16;
        return gpumem_tier_create(&td, &s->tier);
    }
}

static void cache_setup_free(cache_setup *s) {
    uint32_t j;
    gpumem_tier_destroy(s->tier);
    gpumem_cache_destroy(s->cache);
    for (j = 0; j < 4; j++) gpumem_swctl_destroy(s->ctls[j]);
    free(s->mem);
    free(s->expect);
    free(s->seq_mem);
}

/* Check a whole line by content; own words must hold expect[], others either
 * the initial value or any value their owner wrote (so only own words are
 * compared when there are writers). */
static void check_line(cache_worker *wk, uint64_t line, const uint64_t *data) {
    cache_setup *s = wk->s;
    uint64_t per = s->cfg.line_bytes / 8, i;
    for (i = 0; i < per; i++) {
        uint64_t w = line * per + i;
        int own = w % s->cfg.threads == wk->id;
        if (s->cfg.write_permille && !own) continue;
        wk->words_checked++;
        if (data[i] != s->expect[w]) wk->bad_data++;
    }
}

static void count_status(cache_worker *wk, gpumem_status st) {
    if (st == GPUMEM_EAGAIN) wk->eagain++;
    else if (st == GPUMEM_EIO) wk->eio++;
    else if (st != GPUMEM_OK) wk->other_status++;
}

/* One operation through acquire/release. */
static void op_direct(cache_worker *wk, uint64_t *rng) {
    cache_setup *s = wk->s;
    uint64_t line = rng_next(rng) % s->cfg.n_lines, per = s->cfg.line_bytes / 8;
    int write = s->cfg.write_permille && rng_next(rng) % 1000 < s->cfg.write_permille;
    void *p = NULL;
    gpumem_status st;
    while ((st = gpumem_cache_acquire(s->cache, line, 1, write, &p)) == GPUMEM_EAGAIN) wk->eagain++;
    if (st != GPUMEM_OK) {
        count_status(wk, st);
        return;
    }
    wk->acquires++;
    if (write) { /* own words in this line */
        uint64_t i, *d = (uint64_t *)p;
        wk->round++;
        for (i = 0; i < per; i++) {
            uint64_t w = line * per + i;
            if (w % s->cfg.threads != wk->id) continue;
            s->expect[w] = written_word(w, wk->round);
            d[i] = s->expect[w];
        }
    }
    check_line(wk, line, (const uint64_t *)p);
    if (s->cfg.hold_check) {
        sched_yield();
        check_line(wk, line, (const uint64_t *)p);
    }
    if (gpumem_cache_release(s->cache, line, 1) != GPUMEM_OK) wk->other_status++;
}

/* A run of consecutive words through a reference. */
static void op_ref(cache_worker *wk, uint64_t *rng, const gpumem_cache_array *a) {
    cache_setup *s = wk->s;
    gpumem_cache_ref r = gpumem_cache_ref_make(a);
    uint64_t start = rng_next(rng) % s->n_words, n = 1 + rng_next(rng) % 96, w;
    int write = s->cfg.write_permille && rng_next(rng) % 1000 < s->cfg.write_permille;
    wk->round++;
    for (w = start; w < start + n && w < s->n_words; w++) {
        uint64_t v = 0;
        gpumem_status st;
        int own = w % s->cfg.threads == wk->id;
        if (s->cfg.write_permille && !own) continue;
        if (write) {
            uint64_t nv = written_word(w, wk->round);
            while ((st = gpumem_cache_ref_put(&r, w, &nv)) == GPUMEM_EAGAIN) wk->eagain++;
            if (st == GPUMEM_OK) s->expect[w] = nv;
        } else {
            while ((st = gpumem_cache_ref_get(&r, w, &v)) == GPUMEM_EAGAIN) wk->eagain++;
            if (st == GPUMEM_OK) {
                wk->words_checked++;
                if (v != s->expect[w]) wk->bad_data++;
            }
        }
        if (st != GPUMEM_OK) count_status(wk, st);
    }
    if (gpumem_cache_ref_drop(&r) != GPUMEM_OK) wk->other_status++;
}

/* The flusher: write back and invalidate every slot, over and over, while
 * the workers run (lines in use, being filled and being evicted meanwhile).
 * Or the prefetcher: a random line, needed soon, read ahead, over and
 * over, with the clock moved now and then (hints for a hinted policy; with
 * another, ESTATE is not a failure: the prefetch reads ahead all the same). */
typedef struct cache_flusher {
    gpumem_cache *cache;
    int prefetch;   /* the prefetcher, not the flusher */
    int stop;       /* set by the main thread, atomically */
    int started;    /* set by the flusher before its first round: the workers start after it */
    uint64_t rounds, errors; /* rounds: read by the main thread, atomically */
    uint64_t ok, eagain;     /* the prefetcher's calls that gave them */
} cache_flusher;

static void cache_prefetch_round(cache_flusher *f) {
    uint64_t r = 0x9E3779B97F4A7C15ull * (f->rounds + 1), epoch = f->rounds / 64;
    gpumem_status st;
    r ^= r >> 29;
    if (f->rounds % 64 == 0) {
        st = gpumem_cache_epoch(f->cache, epoch);
        if (st != GPUMEM_OK && st != GPUMEM_ESTATE) f->errors++;
    }
    st = gpumem_cache_prefetch(f->cache, r % f->cache->n_lines, epoch + (r >> 40) % 3);
    if (st == GPUMEM_OK) f->ok++;
    else if (st == GPUMEM_EAGAIN) f->eagain++;
    else f->errors++;
}

static void *cache_flusher_main(void *arg) {
    cache_flusher *f = (cache_flusher *)arg;
    __atomic_store_n(&f->started, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        if (f->prefetch) {
            cache_prefetch_round(f);
            __atomic_store_n(&f->rounds, f->rounds + 1, __ATOMIC_RELEASE);
            continue;
        }
        /* With a host tier, the flush of both tiers (and the Flush command). */
        gpumem_status st = f->cache->tier ? gpumem_cache_flush(f->cache, NULL)
                                          : gpumem_cache_writeback(f->cache, 0, f->cache->n_slots, NULL);
        if (st != GPUMEM_OK && st != GPUMEM_EAGAIN) f->errors++; /* EAGAIN: lines in use were left */
        if (gpumem_cache_invalidate(f->cache, 0, f->cache->n_slots, NULL) != GPUMEM_OK) f->errors++;
        __atomic_store_n(&f->rounds, f->rounds + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void *cache_worker_main(void *arg) {
    cache_worker *wk = (cache_worker *)arg;
    gpumem_cache_array a = gpumem_cache_array_make(wk->s->cache, 8, 0, wk->s->n_words);
    uint64_t i;
    for (i = 0; i < wk->s->cfg.ops; i++, wk->ops++) {
        if (wk->s->cfg.use_ref) op_ref(wk, &wk->rng, &a);
        else op_direct(wk, &wk->rng);
    }
    return NULL;
}

/* Between rounds (no thread in the cache): the structure checked, and
 * GMT-Reuse's model trained or set after the first. */
static uint64_t cache_between_rounds(cache_setup *s, uint32_t round) {
    uint64_t problems = s->tier ? gpumem_tier_check_quiescent(s->tier) : gpumem_cache_check_quiescent(s->cache);
    if (s->tier && s->cfg.tier_placement == GPUMEM_TIER_GMT_REUSE && round == 0) {
        gpumem_status st = s->cfg.tier_model == TIER_MODEL_TRAINED ? gpumem_tier_train(s->tier, NULL)
                           : s->cfg.tier_model == TIER_MODEL_STORAGE ? gpumem_tier_set_model(s->tier, 0, 1e12)
                                                                     : gpumem_tier_set_model(s->tier, 0, 0);
        if (st != GPUMEM_OK) problems++;
    }
    return problems;
}

/* Run the workload, flush, and compare the backing with expect. */
static gpumem_status cache_run(const cache_cfg *cfg, cache_result *res) {
    cache_setup s;
    cache_worker *wk;
    cache_flusher fl;
    pthread_t *th, flusher;
    uint32_t t, j, round, rounds = cfg->rounds ? cfg->rounds : 1;
    uint64_t w;
    gpumem_status st = cache_setup_make(&s, cfg);
    memset(res, 0, sizeof *res);
    if (st != GPUMEM_OK) {
        cache_setup_free(&s);
        return st;
    }
    wk = (cache_worker *)calloc(cfg->threads, sizeof *wk);
    th = (pthread_t *)calloc(cfg->threads, sizeof *th);
    for (t = 0; t < cfg->threads; t++) {
        wk[t].s = &s;
        wk[t].id = t;
        wk[t].rng = 0x9E3779B97F4A7C15ull * (t + 1);
    }
    for (round = 0; round < rounds; round++) {
        memset(&fl, 0, sizeof fl);
        fl.cache = s.cache;
        fl.prefetch = cfg->prefetcher;
        /* The flusher runs while the workers do: they start once it has (on a
         * loaded machine it could otherwise first run after they ended), and
         * it is stopped only after a whole round. */
        if (cfg->flusher || cfg->prefetcher) {
            pthread_create(&flusher, NULL, cache_flusher_main, &fl);
            while (!__atomic_load_n(&fl.started, __ATOMIC_ACQUIRE)) sched_yield();
        }
        for (t = 0; t < cfg->threads; t++) pthread_create(&th[t], NULL, cache_worker_main, &wk[t]);
        for (t = 0; t < cfg->threads; t++) pthread_join(th[t], NULL);
        if (cfg->flusher || cfg->prefetcher) {
            while (__atomic_load_n(&fl.rounds, __ATOMIC_ACQUIRE) == 0) sched_yield();
            __atomic_store_n(&fl.stop, 1, __ATOMIC_RELEASE);
            pthread_join(flusher, NULL);
            res->flusher_rounds += fl.rounds;
            res->flusher_errors += fl.errors;
            res->prefetch_ok += fl.ok;
            res->prefetch_eagain += fl.eagain;
        }
        res->quiescent_problems += cache_between_rounds(&s, round);
    }
    for (t = 0; t < cfg->threads; t++) {
        res->ops += wk[t].ops;
        res->acquires += wk[t].acquires;
        res->eagain += wk[t].eagain;
        res->eio += wk[t].eio;
        res->other_status += wk[t].other_status;
        res->bad_data += wk[t].bad_data;
        res->words_checked += wk[t].words_checked;
    }
    res->flush_status = gpumem_cache_flush(s.cache, &res->flushed);
    res->quiescent_problems += s.tier ? gpumem_tier_check_quiescent(s.tier) : gpumem_cache_check_quiescent(s.cache);
    gpumem_cache_get_stats(s.cache, &res->stats);
    if (s.tier) gpumem_tier_get_stats(s.tier, &res->tier);
    for (j = 0; j < cfg->n_ctrls; j++) {
        gpumem_swctl_stats cs;
        gpumem_swctl_stop(s.ctls[j]);
        gpumem_swctl_get_stats(s.ctls[j], &cs);
        res->ctl_violations += cs.violations;
        res->ctl_reads += cs.reads;
        res->ctl_writes += cs.writes;
    }
    for (j = 0; j < (cfg->n_ctrls ? cfg->n_ctrls : 1); j++) {
        if (cfg->n_ctrls && cfg->layout == GPUMEM_CACHE_STRIPE && j > 0) break; /* backing_word picks the owner */
        for (w = 0; w < s.n_words; w++)
            if (*backing_word(&s, j, w) != s.expect[w]) res->backing_mismatches++;
    }
    free(wk);
    free(th);
    cache_setup_free(&s);
    return GPUMEM_OK;
}

/* Every check a workload run must pass; NULL, or what failed (in buf). */
static const char *cache_check(const cache_cfg *cfg, const cache_result *r, char *buf, size_t n) {
#define CACHE_CHECK(cond, ...)                  \
    do {                                        \
        if (!(cond)) {                          \
            snprintf(buf, n, __VA_ARGS__);      \
            return buf;                         \
        }                                       \
    } while (0)
    const gpumem_cache_stats *st = &r->stats;
    const gpumem_tier_stats *ts = &r->tier;
    const uint64_t all_ops = (uint64_t)cfg->threads * cfg->ops * (cfg->rounds ? cfg->rounds : 1);
    /* Fills from storage; the others came up from the host tier. */
    const uint64_t storage_fills = st->fills - ts->host_hits;
    CACHE_CHECK(r->ops == all_ops, "ran %llu of %llu operations", (unsigned long long)r->ops,
                (unsigned long long)all_ops);
    CACHE_CHECK(r->words_checked > 0, "nothing was checked");
    CACHE_CHECK(r->bad_data == 0, "%llu of %llu words read wrong", (unsigned long long)r->bad_data,
                (unsigned long long)r->words_checked);
    CACHE_CHECK(r->eio + r->other_status == 0, "statuses: %llu EIO, %llu other", (unsigned long long)r->eio,
                (unsigned long long)r->other_status);
    CACHE_CHECK(st->violations == 0, "%llu invariant violations", (unsigned long long)st->violations);
    CACHE_CHECK(r->quiescent_problems == 0, "%llu structure problems after the run",
                (unsigned long long)r->quiescent_problems);
    CACHE_CHECK(r->flush_status == GPUMEM_OK, "flush: %s", gpumem_status_str(r->flush_status));
    CACHE_CHECK(r->backing_mismatches == 0, "%llu words differ in the backing after flush",
                (unsigned long long)r->backing_mismatches);
    /* Every lane of every acquire is a hit or a miss; every fill is one read. */
    CACHE_CHECK(cfg->use_ref || st->hits + st->misses == r->acquires, "hits %llu + misses %llu != acquires %llu",
                (unsigned long long)st->hits, (unsigned long long)st->misses, (unsigned long long)r->acquires);
    CACHE_CHECK(st->reads == storage_fills && st->bytes_read == storage_fills * cfg->line_bytes,
                "reads %llu, bytes %llu for %llu fills from storage", (unsigned long long)st->reads,
                (unsigned long long)st->bytes_read, (unsigned long long)storage_fills);
    CACHE_CHECK(st->fills - st->evictions - st->invalidations <= cfg->n_slots, "more lines resident than slots");
    CACHE_CHECK(st->io_errors == 0, "%llu I/O errors", (unsigned long long)st->io_errors);
    if (cfg->flusher || cfg->prefetcher)
        CACHE_CHECK(r->flusher_rounds > 0 && r->flusher_errors == 0, "flusher: %llu rounds, %llu errors",
                    (unsigned long long)r->flusher_rounds, (unsigned long long)r->flusher_errors);
    /* Every prefetch that read a line returned OK, and every one that gave
     * way EAGAIN and was counted (one prefetcher: the counts are its own). */
    CACHE_CHECK(st->prefetches <= r->prefetch_ok && st->prefetch_declined == r->prefetch_eagain,
                "prefetches %llu of %llu OK, declined %llu of %llu EAGAIN", (unsigned long long)st->prefetches,
                (unsigned long long)r->prefetch_ok, (unsigned long long)st->prefetch_declined,
                (unsigned long long)r->prefetch_eagain);
    if (cfg->prefetcher)
        CACHE_CHECK(st->prefetches + st->prefetch_declined > 0, "the prefetcher never read ahead or gave way");
    if (cfg->n_slots >= cfg->n_lines && !cfg->flusher)
        CACHE_CHECK(st->evictions == 0 && st->fills <= cfg->n_lines, "evictions %llu, fills %llu with room for all",
                    (unsigned long long)st->evictions, (unsigned long long)st->fills);
    else if (!cfg->flusher)
        CACHE_CHECK(st->evictions > 0, "the cache never had to evict");
    else
        /* The flusher invalidates every slot each round, so the fills may
         * always find a free slot and never evict (CI's TSan run, scale 0.2,
         * once did); lines must still have left, one way or the other. */
        CACHE_CHECK(st->evictions + st->invalidations > 0 && st->fills > cfg->n_slots,
                    "no line ever left the cache: %llu evictions, %llu invalidations, %llu fills",
                    (unsigned long long)st->evictions, (unsigned long long)st->invalidations,
                    (unsigned long long)st->fills);
    if (cfg->write_permille)
        CACHE_CHECK(st->writebacks + ts->writebacks > 0, "nothing written back");
    if (cfg->tier_slots) {
        /* Every fill looked in the host tier once; every eviction either
         * moved its line there or bypassed it. */
        CACHE_CHECK(ts->host_hits + ts->host_misses == st->fills, "host hits %llu + misses %llu != fills %llu",
                    (unsigned long long)ts->host_hits, (unsigned long long)ts->host_misses,
                    (unsigned long long)st->fills);
        CACHE_CHECK(ts->moves + ts->bypasses == st->evictions, "moves %llu + bypasses %llu != evictions %llu",
                    (unsigned long long)ts->moves, (unsigned long long)ts->bypasses,
                    (unsigned long long)st->evictions);
        CACHE_CHECK(ts->violations == 0 && ts->io_errors == 0, "tier: %llu violations, %llu I/O errors",
                    (unsigned long long)ts->violations, (unsigned long long)ts->io_errors);
        CACHE_CHECK(ts->host_resident <= cfg->tier_slots, "host tier holds %u of %u", ts->host_resident,
                    cfg->tier_slots);
        if (cfg->tier_placement == GPUMEM_TIER_NEVER_HOST)
            CACHE_CHECK(ts->moves == 0 && ts->host_hits == 0, "never-host moved %llu, hit %llu",
                        (unsigned long long)ts->moves, (unsigned long long)ts->host_hits);
        else if (!cfg->flusher || st->evictions >= cfg->n_slots)
            /* With a flusher, only once lines were evicted (not all left by
             * invalidation, which drops a line instead of moving it down). */
            CACHE_CHECK(ts->moves > 0 && ts->host_hits > 0, "the host tier was not used: %llu moves, %llu hits",
                        (unsigned long long)ts->moves, (unsigned long long)ts->host_hits);
        /* Not with a flusher: it invalidates GPU slots all the time, and an
         * invalidated line is dropped, not moved down, so how full the host
         * tier gets depends on how often the flusher ran (under TSan at
         * scale 0.2 it once never filled). */
        if (cfg->tier_placement == GPUMEM_TIER_ORDER && cfg->tier_slots + cfg->n_slots < cfg->n_lines &&
            !cfg->flusher) {
            CACHE_CHECK(ts->host_evictions > 0, "the host tier never filled up");
            if (cfg->write_permille) CACHE_CHECK(ts->writebacks > 0, "no dirty host line written back");
        }
    }
    if (cfg->n_ctrls) {
        uint64_t copies = cfg->layout == GPUMEM_CACHE_REPLICATE ? cfg->n_ctrls : 1;
        CACHE_CHECK(r->ctl_violations == 0, "controller saw %llu protocol violations",
                    (unsigned long long)r->ctl_violations);
        CACHE_CHECK(r->ctl_reads == st->reads, "controller reads %llu, cache issued %llu",
                    (unsigned long long)r->ctl_reads, (unsigned long long)st->reads);
        CACHE_CHECK(r->ctl_writes == st->writes && st->writes == copies * (st->writebacks + ts->writebacks),
                    "controller writes %llu, cache writes %llu, write-backs %llu", (unsigned long long)r->ctl_writes,
                    (unsigned long long)st->writes, (unsigned long long)st->writebacks);
    }
    return NULL;
#undef CACHE_CHECK
}

/* The workloads, shared by the suite and the sanitizer driver. */
/* The name is kept in the struct, not pointed to: Criterion hands each
 * parameter to a test process of its own, where a pointer into the parent's
 * strings (under ASLR) points nowhere, and a failing assertion's message
 * would crash instead of saying which workload failed. */
typedef struct cache_workload {
    char name[96];
    cache_cfg cfg;
} cache_workload;

/* For Criterion tests: the parameters of ParameterizedTest(cache_workload *w,
 * suite, workload), the workloads that fill(w) writes (at most max). */
#define CACHE_WORKLOAD_PARAMETERS(suite, max, fill)                     \
    ParameterizedTestParameters(suite, workload) {                      \
        static cache_workload w_[max];                                  \
        int n_ = fill(w_);                                              \
        return cr_make_param_array(cache_workload, w_, (size_t)n_);     \
    }

/* For Criterion tests (the only users; a macro so this header needs no
 * Criterion): run workload *w into *r (a cache_result) and fail the test,
 * named after the workload, if setup fails or any check of cache_check does. */
#define CACHE_WORKLOAD_EXPECT_PASSES(w, r)                                              \
    do {                                                                                \
        char why_[256];                                                                 \
        const char *problem_;                                                           \
        cr_assert_eq(cache_run(&(w)->cfg, (r)), GPUMEM_OK, "%s: setup failed", (w)->name); \
        problem_ = cache_check(&(w)->cfg, (r), why_, sizeof why_);                      \
        cr_assert_null(problem_, "%s: %s", (w)->name, problem_);                        \
    } while (0)

static cache_cfg cache_cfg_base(uint32_t line_bytes, uint64_t n_lines, uint32_t n_slots, uint32_t threads,
                                uint32_t ops) {
    cache_cfg c;
    memset(&c, 0, sizeof c);
    c.line_bytes = line_bytes;
    c.n_lines = n_lines;
    c.n_slots = n_slots;
    c.threads = threads;
    c.ops = (uint32_t)(ops * cache_test_scale());
    c.depth = 64;
    c.pairs_per_ctrl = 4;
    c.layout = GPUMEM_CACHE_STRIPE;
    return c;
}

/* Fills w[] (room for 24); returns the count. */
static inline int cache_workloads(cache_workload *w) {
    int n = 0;
#define WL(nm) (snprintf(w[n].name, sizeof w[n].name, "%s", (nm)), &w[n++].cfg)
    cache_cfg *c;
    c = WL("reads, memory, 512 B lines, hold check");
    *c = cache_cfg_base(512, 4096, 64, 32, 300), c->hold_check = 1;
    c = WL("reads, memory, 4 KiB lines, round robin, hold check");
    *c = cache_cfg_base(4096, 512, 32, 32, 300), c->policy = GPUMEM_CACHE_ROUND_ROBIN, c->hold_check = 1;
    c = WL("reads, memory, 64 KiB lines");
    *c = cache_cfg_base(65536, 64, 8, 16, 100);
    c = WL("reads, NVMe, 4 KiB lines, hold check");
    *c = cache_cfg_base(4096, 1024, 32, 32, 300), c->n_ctrls = 1, c->hold_check = 1;
    c = WL("reads, NVMe, 512 B lines, array reference");
    *c = cache_cfg_base(512, 2048, 32, 32, 300), c->n_ctrls = 1, c->use_ref = 1;
    c = WL("reads, NVMe, 64 KiB lines (PRP lists)");
    *c = cache_cfg_base(65536, 48, 6, 16, 60), c->n_ctrls = 1;
    c = WL("writes, memory, 4 KiB lines, hold check");
    *c = cache_cfg_base(4096, 256, 16, 32, 300), c->write_permille = 400, c->hold_check = 1;
    c = WL("writes, NVMe, 512 B lines");
    *c = cache_cfg_base(512, 2048, 48, 32, 300), c->n_ctrls = 1, c->write_permille = 300;
    c = WL("writes, NVMe, 4 KiB lines, array reference");
    *c = cache_cfg_base(4096, 512, 24, 32, 300), c->n_ctrls = 1, c->use_ref = 1, c->write_permille = 500;
    c = WL("writes, NVMe, 64 KiB lines, round robin");
    *c = cache_cfg_base(65536, 32, 5, 16, 60), c->n_ctrls = 1, c->write_permille = 500,
    c->policy = GPUMEM_CACHE_ROUND_ROBIN;
    c = WL("writes, two controllers striped");
    *c = cache_cfg_base(4096, 512, 24, 32, 300), c->n_ctrls = 2, c->pairs_per_ctrl = 2, c->write_permille = 300;
    c = WL("writes, two controllers replicated");
    *c = cache_cfg_base(4096, 256, 24, 32, 300), c->n_ctrls = 2, c->pairs_per_ctrl = 2, c->write_permille = 300,
    c->layout = GPUMEM_CACHE_REPLICATE;
    /* Write-back and invalidation racing the writers: a held line must stay
     * dirty after it is written back, and no write may be skipped. */
    c = WL("writes, memory, 4 KiB lines, concurrent flusher");
    *c = cache_cfg_base(4096, 128, 32, 32, 300), c->write_permille = 500, c->flusher = 1;
    c = WL("writes, NVMe, 512 B lines, array reference, concurrent flusher");
    *c = cache_cfg_base(512, 1024, 48, 32, 200), c->n_ctrls = 1, c->use_ref = 1, c->write_permille = 500,
    c->flusher = 1;
    /* Read-ahead racing the writers and the evictions: a prefetch fills a
     * line that nobody holds, and no write may be lost to it. */
    c = WL("writes, memory, 4 KiB lines, hinted-rrip, concurrent prefetcher");
    *c = cache_cfg_base(4096, 256, 32, 32, 300), c->write_permille = 400, c->policy = GPUMEM_POLICY_HINTED_RRIP,
    c->prefetcher = 1;
    c = WL("writes, NVMe, 512 B lines, hinted (sequential), concurrent prefetcher");
    *c = cache_cfg_base(512, 1024, 32, 16, 200), c->n_ctrls = 1, c->write_permille = 300,
    c->policy = GPUMEM_POLICY_HINTED, c->prefetcher = 1;
    c = WL("reads, cache larger than the data");
    *c = cache_cfg_base(4096, 100, 256, 32, 400), c->n_ctrls = 1;
    c = WL("writes, 2 slots, 64 threads, array reference (full cache retried)");
    *c = cache_cfg_base(512, 512, 2, 64, 100), c->full_sweeps = 2, c->use_ref = 1, c->write_permille = 200;
    /* Hot lines in a tiny cache: evictors race acquirers for the same lines
     * all the time, so evicting a line a thread has just acquired (a missing
     * re-check of the count in the claim) shows up in the hold check. */
    c = WL("reads, 3 hot lines, 2 slots, hold check");
    *c = cache_cfg_base(512, 3, 2, 32, 8000), c->hold_check = 1;
#undef WL
    return n;
}

/* The same workload through three tiers (test_tier.c; fills w[], room for
 * 16; returns the count). */
static inline int tier_workloads(cache_workload *w) {
    int n = 0;
#define WL(nm) (snprintf(w[n].name, sizeof w[n].name, "%s", (nm)), &w[n++].cfg)
#define TIER(c, slots, placement, policy, model) \
    ((c)->tier_slots = (slots), (c)->tier_placement = (placement), (c)->tier_policy = (policy), \
     (c)->tier_model = (model), (c)->rounds = 3)
    cache_cfg *c;
    /* 2048 lines, 32 in GPU memory, 256 in host memory: both tiers full, the
     * host tier displacing dirty lines to storage. */
    c = WL("tier-order, FIFO, NVMe, 512 B lines, writes, hold check");
    *c = cache_cfg_base(512, 2048, 32, 32, 150), c->n_ctrls = 1, c->write_permille = 300, c->hold_check = 1;
    TIER(c, 256, GPUMEM_TIER_ORDER, GPUMEM_POLICY_FIFO, 0);
    c = WL("tier-order, CLOCK, NVMe, 4 KiB lines, writes, array reference");
    *c = cache_cfg_base(4096, 512, 24, 32, 150), c->n_ctrls = 1, c->write_permille = 400, c->use_ref = 1;
    TIER(c, 96, GPUMEM_TIER_ORDER, GPUMEM_POLICY_CLOCK, 0);
    c = WL("gmt-reuse trained, FIFO, NVMe, 512 B lines, writes");
    *c = cache_cfg_base(512, 2048, 32, 32, 150), c->n_ctrls = 1, c->write_permille = 300;
    TIER(c, 256, GPUMEM_TIER_GMT_REUSE, GPUMEM_POLICY_FIFO, TIER_MODEL_TRAINED);
    /* Every line predicted for storage: dirty lines bypass the host tier
     * (written by the cache), the 80% override fills free host slots only. */
    c = WL("gmt-reuse predicting storage (bypass), CLOCK, NVMe, writes");
    *c = cache_cfg_base(512, 2048, 32, 32, 150), c->n_ctrls = 1, c->write_permille = 300;
    TIER(c, 64, GPUMEM_TIER_GMT_REUSE, GPUMEM_POLICY_CLOCK, TIER_MODEL_STORAGE);
    /* Every line predicted for the GPU: candidates are kept up to the skip
     * bound, then placed anyway. */
    c = WL("gmt-reuse predicting GPU (keep), FIFO, NVMe, writes, hold check");
    *c = cache_cfg_base(512, 1024, 16, 32, 150), c->n_ctrls = 1, c->write_permille = 300, c->hold_check = 1;
    TIER(c, 128, GPUMEM_TIER_GMT_REUSE, GPUMEM_POLICY_FIFO, TIER_MODEL_KEEP);
    c = WL("never-host (two tiers), NVMe, writes");
    *c = cache_cfg_base(512, 1024, 32, 32, 150), c->n_ctrls = 1, c->write_permille = 300;
    TIER(c, 128, GPUMEM_TIER_NEVER_HOST, GPUMEM_POLICY_FIFO, 0);
    /* Lines past two pages: the host slots' own PRP lists. */
    c = WL("tier-order, NVMe, 64 KiB lines (PRP lists), writes");
    *c = cache_cfg_base(65536, 48, 4, 16, 40), c->n_ctrls = 1, c->write_permille = 500;
    TIER(c, 12, GPUMEM_TIER_ORDER, GPUMEM_POLICY_FIFO, 0);
    c = WL("tier-order, two controllers replicated, writes");
    *c = cache_cfg_base(4096, 256, 16, 32, 150), c->n_ctrls = 2, c->pairs_per_ctrl = 2, c->write_permille = 300,
    c->layout = GPUMEM_CACHE_REPLICATE;
    TIER(c, 64, GPUMEM_TIER_ORDER, GPUMEM_POLICY_CLOCK, 0);
    c = WL("tier-order, memory, 4 KiB lines, writes, flush of both tiers running");
    *c = cache_cfg_base(4096, 256, 16, 32, 150), c->write_permille = 500, c->flusher = 1;
    TIER(c, 64, GPUMEM_TIER_ORDER, GPUMEM_POLICY_FIFO, 0);
    c = WL("gmt-reuse trained, NVMe, 512 B lines, array reference, flusher");
    *c = cache_cfg_base(512, 1024, 24, 32, 120), c->n_ctrls = 1, c->write_permille = 400, c->use_ref = 1,
    c->flusher = 1;
    TIER(c, 96, GPUMEM_TIER_GMT_REUSE, GPUMEM_POLICY_FIFO, TIER_MODEL_TRAINED);
    /* Host tier larger than the rest of the data: nothing ever displaced. */
    c = WL("tier-order, host tier holds everything, NVMe, reads");
    *c = cache_cfg_base(512, 256, 16, 32, 200), c->n_ctrls = 1, c->hold_check = 1;
    TIER(c, 512, GPUMEM_TIER_ORDER, GPUMEM_POLICY_CLOCK, 0);
#undef TIER
#undef WL
    return n;
}

#endif
