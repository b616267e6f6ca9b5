/* bench/share_bench.c - one storage shared by several caches (gpumem_share.h,
 * issue 32): GAIA's measurements, each against its baseline, in one run.
 *
 *   share_bench [--out DIR] [--machine TEXT] [--latency-us U] [--scale S] [--only SECTION]
 *   make bench-share           (writes build/results/share-bench.{md,tsv})
 *
 * Owners are host threads standing for the devices (no GPU here). Storage
 * is a software controller (gpumem_swctl.h) serving each command latency_us
 * after fetching it (default 130 us, the SSD page fetch tier_bench uses),
 * any number in flight; sections that move no data, or measure CPU work
 * (the calls, the merge), use memory storage so the controller's thread is
 * not in the way. Lines are 4 KiB. Every section checks its data and counts
 * failed calls: the run fails (exit 1) on any, never on a time.
 *
 *   false sharing  two owners (two threads) write disjoint halves of the same
 *                  lines, a release and an acquire after each round, a flush
 *                  at the end; against private buffers (each owner its own
 *                  lines, same writes) and a strict single-writer ping-pong
 *                  (each write by the other owner first takes the line over:
 *                  the holder's copy is written back, the new writer reads
 *                  it: what strict coherence does under false sharing).
 *   peer reads     GPU 0 reads lines the host holds (served from its copy)
 *                  against the same reads with no copy anywhere (storage),
 *                  random and sequential, by 8 threads.
 *   peer fetch     the host holds every other line, GPU 0 reads them all in
 *                  order: a line per miss, against gpumem_share_fetch
 *                  (source and size chosen together), against a fetch from
 *                  storage alone; transfers counted (GAIA's 10x lesson).
 *   calls          release and acquire over the whole range against lines
 *                  resident and lines written (every 4th line from 0, so
 *                  the same lines each time; release walks the written
 *                  list only: flat in resident lines).
 *   merge          two writers' halves of a 4 KiB line merged into storage:
 *                  cost per line (GAIA: 1.4 us on a CPU).
 *   readahead      a GPU-style sequential stream whose misses come in
 *                  scrambled batches of 32, served a wave at a time by 16
 *                  threads, with gpumem_policy_ra_batch's spans read in the
 *                  same wave, against the demand misses alone; and the
 *                  same with each wave fetched (gpumem_share_fetch) by one
 *                  thread, contiguous lines in one transfer.
 *
 * Times are the median of 3 runs (the machine is shared); ratios are to the
 * baseline of the same section in the same run.
 */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_share.h"
#include "gpumem_swctl.h"
#include "gpumem_policy.h"

#define LINE 4096u
#define REPS 3
#define MAX_OWNERS 3 /* storage, host, GPU 0 */

static uint64_t failures; /* failed calls and wrong data: the run fails on any */
#define MUST(call)                                                                              \
    do {                                                                                        \
        gpumem_status st_ = (call);                                                             \
        if (st_ != GPUMEM_OK) {                                                                 \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                                 \
            fprintf(stderr, "share_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
                    gpumem_status_str(st_));                                                    \
        }                                                                                       \
    } while (0)

/* Count a wrong result, saying where and what. */
#define EXPECT(cond, ...)                                                                       \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                                 \
            fprintf(stderr, "share_bench: %s:%d: ", __FILE__, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                \
        }                                                                                       \
    } while (0)

/* Count a rig that could not be made (a software controller or a cache refused). */
static void rig_failed(int line) {
    __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "share_bench: line %d: the rig could not be made\n", line);
}

static double now_us(void) { return (double)gpumem_clock_ns() * 1e-3; }

/* ---- a share over memory or one software controller ---------------------------- */

typedef struct rig {
    uint32_t n_lines;
    unsigned char *mem;
    gpumem_swctl *ctl;
    gpumem_nvme_qp *pairs[MAX_OWNERS][4];
    gpumem_cache *caches[MAX_OWNERS];
    gpumem_share *share;
} rig;

/* Owners host and GPU 0, each a cache of n_slots slots; latency_ns < 0:
 * memory storage. */
static int rig_make(rig *r, uint32_t n_lines, uint32_t n_slots, int64_t latency_ns) {
    gpumem_share_desc sd = gpumem_share_desc_default(MAX_OWNERS);
    uint32_t o, j;
    memset(r, 0, sizeof *r);
    r->n_lines = n_lines;
    sd.n_entries = 2 * n_lines;
    if (latency_ns < 0) {
        if (!(r->mem = (unsigned char *)calloc(n_lines, LINE))) return -1;
    } else {
        gpumem_swctl_config cfg = gpumem_swctl_config_default();
        cfg.lba_bytes = LINE;
        cfg.n_blocks = n_lines;
        cfg.latency_ns = (uint64_t)latency_ns;
        if (gpumem_swctl_create(&cfg, &r->ctl) != GPUMEM_OK) return -1;
        for (o = 1; o < MAX_OWNERS; o++)
            for (j = 0; j < 4; j++)
                if (gpumem_swctl_add_qp(r->ctl, 256, &r->pairs[o][j]) != GPUMEM_OK) return -1;
        if (gpumem_swctl_start(r->ctl) != GPUMEM_OK) return -1;
    }
    for (o = 1; o < MAX_OWNERS; o++) {
        gpumem_cache_desc d = gpumem_cache_desc_default();
        d.n_lines = n_lines;
        d.line_bytes = LINE;
        d.n_slots = n_slots;
        if (r->ctl) {
            gpumem_nvme_ns ns = gpumem_swctl_ns(r->ctl);
            d.backing = gpumem_cache_backing_nvme(r->pairs[o], 1, 4, &ns, 0, GPUMEM_CACHE_STRIPE);
        } else {
            d.backing = gpumem_cache_backing_memory(r->mem);
        }
        if (gpumem_cache_create(&d, &r->caches[o]) != GPUMEM_OK) return -1;
        sd.caches[o] = r->caches[o];
    }
    return gpumem_share_create(&sd, &r->share) == GPUMEM_OK ? 0 : -1;
}

static unsigned char *rig_stored(rig *r, uint32_t l) {
    return (r->ctl ? (unsigned char *)gpumem_swctl_ram(r->ctl) : r->mem) + (size_t)l * LINE;
}

static void rig_free(rig *r) {
    uint32_t o;
    if (r->share) MUST(gpumem_share_destroy(r->share));
    for (o = 1; o < MAX_OWNERS; o++)
        if (r->caches[o]) gpumem_cache_destroy(r->caches[o]);
    if (r->ctl) gpumem_swctl_destroy(r->ctl);
    free(r->mem);
}

/* Write byte value v over [from, to) of line l as owner o. */
static void write_bytes(rig *r, uint32_t o, uint32_t l, uint32_t from, uint32_t to, unsigned char v) {
    void *p;
    gpumem_status st;
    while ((st = gpumem_share_get(r->share, o, l, 1, &p)) == GPUMEM_EAGAIN) gpumem_share_flush(r->share, o);
    MUST(st);
    if (st != GPUMEM_OK) return;
    memset((unsigned char *)p + from, v, to - from);
    MUST(gpumem_share_put(r->share, o, l, 1));
}

static void read_line(gpumem_cache *c, uint32_t l) {
    void *p;
    gpumem_status st = gpumem_cache_acquire(c, l, 1, 0, &p);
    MUST(st);
    if (st != GPUMEM_OK) return;
    EXPECT(((uint32_t *)p)[0] == l, "line %u read holds line %u's tag", l, ((uint32_t *)p)[0]); /* tagged below */
    MUST(gpumem_cache_release(c, l, 1));
}

static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* ---- results --------------------------------------------------------------------- */

static FILE *md, *tsv;

static void row(const char *section, const char *what, double value, const char *unit, double ratio,
                const char *vs) {
    char r[64] = "-";
    if (ratio) snprintf(r, sizeof r, "%.2fx %s", ratio, vs);
    fprintf(md, "| %s | %s | %.3f %s | %s |\n", section, what, value, unit, r);
    fprintf(tsv, "%s\t%s\t%.6f\t%s\t%.4f\t%s\n", section, what, value, unit, ratio, vs);
    printf("%-14s %-48s %12.3f %-8s %s\n", section, what, value, unit, r);
}

/* ---- false sharing ----------------------------------------------------------------- */

typedef struct fs_ctx {
    rig *r;
    uint32_t o, lines, rounds, private_lines; /* private_lines: own lines [o-1)*lines..., whole halves */
    pthread_barrier_t *bar;
} fs_ctx;

/* Owner o writes its half of every line (or, private, the same bytes of its
 * own lines), then releases; both meet, then acquire: one round. */
static void *fs_owner(void *arg) {
    fs_ctx *x = (fs_ctx *)arg;
    const uint32_t half = LINE / 2, from = x->private_lines ? 0 : (x->o - 1) * half;
    const uint32_t first = x->private_lines ? (x->o - 1) * x->lines : 0;
    uint32_t k, l;
    for (k = 0; k < x->rounds; k++) {
        gpumem_status st;
        for (l = 0; l < x->lines; l++) write_bytes(x->r, x->o, first + l, from, from + half, (unsigned char)(k + x->o));
        /* GPU 0's release ends with the host's acquire (GAIA's piggyback),
         * which answers EAGAIN while the host's thread holds a stale copy
         * it is about to write: made again, as the caller must. */
        while ((st = gpumem_share_release(x->r->share, x->o, 0, x->r->n_lines)) == GPUMEM_EAGAIN) continue;
        MUST(st);
        pthread_barrier_wait(x->bar);
        MUST(gpumem_share_acquire(x->r->share, x->o, 0, x->r->n_lines));
        pthread_barrier_wait(x->bar);
    }
    MUST(gpumem_share_flush(x->r->share, x->o));
    return NULL;
}

static double fs_concurrent(uint32_t lines, uint32_t rounds, int private_lines, int64_t latency_ns) {
    rig r;
    pthread_t th[2];
    fs_ctx x[2];
    pthread_barrier_t bar;
    uint32_t o, l, b;
    double t0, t;
    if (rig_make(&r, 2 * lines, 2 * lines, latency_ns) != 0) return rig_failed(__LINE__), 0;
    pthread_barrier_init(&bar, NULL, 2);
    t0 = now_us();
    for (o = 1; o <= 2; o++) {
        x[o - 1] = (fs_ctx){&r, o, lines, rounds, (uint32_t)private_lines, &bar};
        pthread_create(&th[o - 1], NULL, fs_owner, &x[o - 1]);
    }
    for (o = 0; o < 2; o++) pthread_join(th[o], NULL);
    t = now_us() - t0;
    /* Storage holds both halves of the last round (shared) or each owner's lines. */
    for (l = 0; l < (private_lines ? 2 * lines : lines); l++)
        for (b = 0; b < (private_lines ? LINE / 2 : LINE); b += 512) {
            uint32_t o_ = private_lines ? 1 + l / lines : 1 + b / (LINE / 2);
            EXPECT(rig_stored(&r, l)[b] == (unsigned char)(rounds - 1 + o_), "false sharing: line %u byte %u lost", l, b);
        }
    pthread_barrier_destroy(&bar);
    rig_free(&r);
    return t / ((double)rounds * lines * 2);
}

/* Strict single writer: a line has one writable copy; the other owner's
 * write first takes it over (the holder's copy goes to storage, the taker
 * reads it back). Both owners' writes alternate, so one thread does them. */
static double fs_pingpong(uint32_t lines, uint32_t rounds, int64_t latency_ns) {
    rig r;
    uint32_t k, l, o, b;
    double t0, t;
    if (rig_make(&r, 2 * lines, 2 * lines, latency_ns) != 0) return rig_failed(__LINE__), 0;
    t0 = now_us();
    for (k = 0; k < rounds; k++)
        for (o = 1; o <= 2; o++)
            for (l = 0; l < lines; l++) {
                MUST(gpumem_share_acquire(r.share, o, l, 1)); /* drops the stale copy: a miss */
                write_bytes(&r, o, l, (o - 1) * (LINE / 2), o * (LINE / 2), (unsigned char)(k + o));
                MUST(gpumem_share_release(r.share, o, l, 1));
                MUST(gpumem_share_merge(r.share, o, l, 1)); /* the copy goes back to storage */
            }
    t = now_us() - t0;
    for (l = 0; l < lines; l++)
        for (b = 0; b < LINE; b += 512)
            EXPECT(rig_stored(&r, l)[b] == (unsigned char)(rounds - 1 + 1 + b / (LINE / 2)),
                   "ping-pong: line %u byte %u lost", l, b);
    rig_free(&r);
    return t / ((double)rounds * lines * 2);
}

static void bench_false_sharing(int64_t lat, double scale) {
    const uint32_t lines = 64, rounds = (uint32_t)(8 * scale) ? (uint32_t)(8 * scale) : 1;
    double p[REPS], s[REPS], q[REPS], pv, sv, qv;
    int i;
    for (i = 0; i < REPS; i++) {
        p[i] = fs_concurrent(lines, rounds, 1, lat);
        s[i] = fs_concurrent(lines, rounds, 0, lat);
        q[i] = fs_pingpong(lines, rounds, lat);
    }
    pv = median3(p[0], p[1], p[2]);
    sv = median3(s[0], s[1], s[2]);
    qv = median3(q[0], q[1], q[2]);
    row("false sharing", "private buffers (2 owners, own lines)", pv, "us/write", 1, "(baseline)");
    row("false sharing", "share: halves of the same lines (target <= 1.5x)", sv, "us/write", sv / pv,
        "of private");
    row("false sharing", "strict single-writer ping-pong", qv, "us/write", qv / pv, "of private");
    row("false sharing", "ping-pong against the share", qv, "us/write", qv / sv, "of share");
}

/* ---- peer reads -------------------------------------------------------------------- */

typedef struct rd_ctx {
    gpumem_cache *c;
    const uint32_t *order;
    uint32_t n, next;
    int as_gpu; /* the readers stand for GPU threads: misses go through the miss queue */
} rd_ctx;

static void *rd_worker(void *arg) {
    rd_ctx *x = (rd_ctx *)arg;
    uint32_t i;
    gpumem_share_thread_as_gpu(x->as_gpu);
    while ((i = __atomic_fetch_add(&x->next, 1, __ATOMIC_RELAXED)) < x->n) read_line(x->c, x->order[i]);
    return NULL;
}

/* 8 threads of owner `o` read lines in `order`. */
static double read_all(gpumem_cache *c, const uint32_t *order, uint32_t n, int as_gpu) {
    pthread_t th[8];
    rd_ctx x = {c, order, n, 0, as_gpu};
    double t0 = now_us();
    int j;
    for (j = 0; j < 8; j++) pthread_create(&th[j], NULL, rd_worker, &x);
    for (j = 0; j < 8; j++) pthread_join(th[j], NULL);
    return now_us() - t0;
}

static double peer_run(const uint32_t *order, uint32_t n, int host_first, int64_t lat, uint64_t *peer) {
    rig r;
    gpumem_share_stats st;
    uint32_t l;
    double t;
    if (rig_make(&r, n, n, lat) != 0) return rig_failed(__LINE__), 0;
    for (l = 0; l < n; l++) ((uint32_t *)rig_stored(&r, l))[0] = l; /* each line says which it is */
    if (host_first) read_all(r.caches[GPUMEM_SHARE_HOST], order, n, 0);
    t = read_all(r.caches[GPUMEM_SHARE_GPU0], order, n, 0);
    gpumem_share_get_stats(r.share, &st);
    *peer = st.peer_reads;
    rig_free(&r);
    return t / n;
}

static void bench_peer(int64_t lat, double scale) {
    const uint32_t n = (uint32_t)(1024 * scale) ? (uint32_t)(1024 * scale) : 64;
    uint32_t *order = (uint32_t *)malloc(n * sizeof *order), i, pass;
    uint64_t seed = 5, peers = 0, none = 0;
    for (pass = 0; pass < 2; pass++) {
        double a[REPS], b[REPS], av, bv;
        int k;
        for (i = 0; i < n; i++) order[i] = i;
        if (pass == 1)
            for (i = n; i > 1; i--) {
                uint32_t j, t;
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                j = (uint32_t)((seed >> 33) % i);
                t = order[i - 1];
                order[i - 1] = order[j];
                order[j] = t;
            }
        for (k = 0; k < REPS; k++) {
            a[k] = peer_run(order, n, 0, lat, &none);
            b[k] = peer_run(order, n, 1, lat, &peers);
            EXPECT(none == 0 && peers == n, "peer reads: %llu without copies, %llu of %u with the host's",
                   (unsigned long long)none, (unsigned long long)peers, n);
        }
        av = median3(a[0], a[1], a[2]);
        bv = median3(b[0], b[1], b[2]);
        row("peer reads", pass ? "random: from storage" : "sequential: from storage", av, "us/line", 1,
            "(baseline)");
        row("peer reads", pass ? "random: from the host's copy" : "sequential: from the host's copy", bv,
            "us/line", av / bv, "faster than storage");
    }
    free(order);
}

/* GAIA's 10x lesson: the host holds every other line; GPU 0 reads all of
 * them in order, a line per miss (8 threads; half from the host's copies),
 * or through gpumem_share_fetch (one thread; the source and size chosen
 * together), against a fetch with no copies anywhere (storage alone). */
static double peer_seq_run(uint32_t n, int mode, int64_t lat, uint64_t *transfers) {
    rig r;
    gpumem_share_stats st0, st;
    uint32_t *order = (uint32_t *)malloc(n * sizeof *order), l;
    double t0, t;
    if (rig_make(&r, n, n, lat) != 0) return rig_failed(__LINE__), 0;
    for (l = 0; l < n; l++) {
        ((uint32_t *)rig_stored(&r, l))[0] = l;
        order[l] = l;
    }
    if (mode != 2)
        for (l = 0; l < n; l += 2) read_line(r.caches[GPUMEM_SHARE_HOST], l);
    gpumem_share_get_stats(r.share, &st0);
    t0 = now_us();
    if (mode == 0) read_all(r.caches[GPUMEM_SHARE_GPU0], order, n, 0);
    else MUST(gpumem_share_fetch(r.share, GPUMEM_SHARE_GPU0, 0, n));
    t = now_us() - t0;
    gpumem_share_get_stats(r.share, &st);
    *transfers = st.storage_transfers + st.peer_transfers - st0.storage_transfers - st0.peer_transfers;
    for (l = 0; l < n; l++) read_line(r.caches[GPUMEM_SHARE_GPU0], l);
    free(order);
    rig_free(&r);
    return t / n;
}

static void bench_peer_seq(int64_t lat, double scale) {
    static const char *names[] = {"host holds every other line: a line per miss (8 threads)",
                                  "host holds every other line: gpumem_share_fetch (1 thread)",
                                  "no copies: gpumem_share_fetch from storage (1 thread)"};
    const uint32_t n = (uint32_t)(1024 * scale) ? (uint32_t)(1024 * scale) : 64;
    double t[3][REPS], v[3];
    uint64_t tr[3];
    char what[160];
    int k, mode;
    for (k = 0; k < REPS; k++)
        for (mode = 0; mode < 3; mode++) t[mode][k] = peer_seq_run(n, mode, lat, &tr[mode]);
    for (mode = 0; mode < 3; mode++) v[mode] = median3(t[mode][0], t[mode][1], t[mode][2]);
    for (mode = 2; mode >= 0; mode--) {
        snprintf(what, sizeof what, "sequential, %s: %llu transfers", names[mode], (unsigned long long)tr[mode]);
        row("peer fetch", what, v[mode], "us/line", mode == 2 ? 1 : v[mode] / v[2], mode == 2 ? "(baseline)" : "of storage alone");
    }
}

/* ---- GPU threads' misses: served by a host thread ------------------------------------ */

/* GPU 0's 8 reader threads miss on every line once, in order: filled on the
 * reading threads (the baseline: a host owner's misses), or posted to the
 * miss queue and filled by one server thread (the readers stand for GPU
 * threads, gpumem_share_thread_as_gpu). On a CPU this is the protocol's own
 * cost - a cell claimed, posted, taken and answered, and every fill made by
 * one thread - not a GPU's: there a served miss also crosses the bus twice
 * and the server's reaction time counts (a GPU run measures it). */
static double served_run(uint32_t n, int served, int64_t lat, uint64_t *count) {
    rig r;
    void *q = NULL;
    gpumem_share_server *srv = NULL;
    gpumem_share_stats st;
    uint32_t *order = (uint32_t *)malloc(n * sizeof *order), l;
    const size_t qbytes = gpumem_share_queue_bytes(64);
    double t = 0;
    if (!order || rig_make(&r, n, n, lat) != 0) return rig_failed(__LINE__), free(order), 0;
    for (l = 0; l < n; l++) ((uint32_t *)rig_stored(&r, l))[0] = l, order[l] = l;
    if (served && (!(q = aligned_alloc(64, qbytes)) || gpumem_share_queue_init(r.share, q, qbytes, 64, 0) != GPUMEM_OK ||
                   gpumem_share_server_start(r.share, 8, &srv) != GPUMEM_OK)) {
        rig_failed(__LINE__); /* the queue or its server */
    } else {
        t = read_all(r.caches[GPUMEM_SHARE_GPU0], order, n, served);
    }
    gpumem_share_get_stats(r.share, &st);
    *count = st.served;
    if (srv) MUST(gpumem_share_server_stop(srv));
    rig_free(&r);
    free(q);
    free(order);
    return t / n;
}

static void bench_served(int64_t lat, double scale) {
    const uint32_t n = (uint32_t)(1024 * scale) ? (uint32_t)(1024 * scale) : 64;
    int pass;
    for (pass = 0; pass < 2; pass++) {
        const int64_t l = pass ? lat : -1; /* memory storage: the protocol alone */
        double a[REPS], b[REPS], av, bv;
        uint64_t none = 0, served = 0;
        int k;
        for (k = 0; k < REPS; k++) {
            a[k] = served_run(n, 0, l, &none);
            b[k] = served_run(n, 1, l, &served);
            /* every miss served once, none without a queue */
            EXPECT(none == 0 && served == n, "served misses: %llu without a queue, %llu of %u with one",
                   (unsigned long long)none, (unsigned long long)served, n);
        }
        av = median3(a[0], a[1], a[2]);
        bv = median3(b[0], b[1], b[2]);
        row("served misses", pass ? "controller: filled by the missing thread" : "memory: filled by the missing thread",
            av, "us/line", 1, "(baseline)");
        row("served misses", pass ? "controller: served through the queue" : "memory: served through the queue", bv,
            "us/line", bv / av, "the time of the baseline");
    }
}

/* ---- the calls --------------------------------------------------------------------- */

static void bench_calls(void) {
    static const uint32_t resident[] = {1024, 4096, 16384}, written[] = {16, 256};
    uint32_t i, j, l, k;
    double rel_flat[2][3];
    for (i = 0; i < 3; i++)
        for (j = 0; j < 2; j++) {
            double rel[REPS], acq[REPS], rv, av;
            char what[96];
            for (k = 0; k < REPS; k++) {
                rig r;
                double t0;
                if (rig_make(&r, resident[i], resident[i], -1) != 0) {
                    rig_failed(__LINE__);
                    return;
                }
                for (l = 0; l < resident[i]; l++) { /* both owners hold every line */
                    void *p;
                    MUST(gpumem_cache_acquire(r.caches[GPUMEM_SHARE_HOST], l, 1, 0, &p));
                    MUST(gpumem_cache_release(r.caches[GPUMEM_SHARE_HOST], l, 1));
                    MUST(gpumem_cache_acquire(r.caches[GPUMEM_SHARE_GPU0], l, 1, 0, &p));
                    MUST(gpumem_cache_release(r.caches[GPUMEM_SHARE_GPU0], l, 1));
                }
                /* Every 4th line, whatever is resident: the same written lines each time. */
                for (l = 0; l < written[j]; l++) write_bytes(&r, GPUMEM_SHARE_HOST, 4 * l, 0, 8, 1);
                t0 = now_us();
                MUST(gpumem_share_release(r.share, GPUMEM_SHARE_HOST, 0, resident[i]));
                rel[k] = now_us() - t0;
                t0 = now_us();
                MUST(gpumem_share_acquire(r.share, GPUMEM_SHARE_GPU0, 0, resident[i]));
                acq[k] = now_us() - t0;
                rig_free(&r);
            }
            rv = median3(rel[0], rel[1], rel[2]);
            av = median3(acq[0], acq[1], acq[2]);
            rel_flat[j][i] = rv;
            snprintf(what, sizeof what, "release: %u resident, %u written", resident[i], written[j]);
            row("calls", what, rv, "us", i ? rv / rel_flat[j][0] : 1, i ? "of 1024 resident" : "(baseline)");
            snprintf(what, sizeof what, "acquire: %u resident, %u written (invalidated)", resident[i], written[j]);
            row("calls", what, av, "us", 0, "");
        }
}

/* ---- merge ------------------------------------------------------------------------- */

static void bench_merge(double scale) {
    const uint32_t n = (uint32_t)(2048 * scale) ? (uint32_t)(2048 * scale) : 64;
    double m[REPS], c[REPS], mv, cv;
    uint32_t l;
    int k;
    for (k = 0; k < REPS; k++) {
        rig r;
        double t0;
        unsigned char *scratch = (unsigned char *)malloc(LINE);
        if (rig_make(&r, n, n, -1) != 0) {
            rig_failed(__LINE__);
            return;
        }
        for (l = 0; l < n; l++) {
            write_bytes(&r, GPUMEM_SHARE_HOST, l, 0, LINE / 2, 1);
            write_bytes(&r, GPUMEM_SHARE_GPU0, l, LINE / 2, LINE, 2);
        }
        t0 = now_us();
        MUST(gpumem_share_merge(r.share, GPUMEM_SHARE_HOST, 0, n));
        m[k] = (now_us() - t0) / n;
        for (l = 0; l < n; l++)
            EXPECT(rig_stored(&r, l)[0] == 1 && rig_stored(&r, l)[LINE - 1] == 2, "merge: line %u lost a half", l);
        /* The floor: a line read and written back, no diff (memory storage). */
        t0 = now_us();
        for (l = 0; l < n; l++) {
            memcpy(scratch, rig_stored(&r, l), LINE);
            memcpy(rig_stored(&r, l), scratch, LINE);
        }
        c[k] = (now_us() - t0) / n;
        free(scratch);
        rig_free(&r);
    }
    mv = median3(m[0], m[1], m[2]);
    cv = median3(c[0], c[1], c[2]);
    row("merge", "storage line read + written back (memcpy x2)", cv, "us/line", 1, "(baseline)");
    row("merge", "two writers' halves merged (GAIA: 1.4 us)", mv, "us/line", mv / cv, "of the copies");
}

/* ---- readahead --------------------------------------------------------------------- */

typedef struct wave {
    gpumem_cache *c;
    uint64_t *lines;
    uint32_t n, next, stop;
    pthread_barrier_t start, done;
} wave;

static void *wave_worker(void *arg) {
    wave *w = (wave *)arg;
    for (;;) {
        uint32_t i;
        pthread_barrier_wait(&w->start);
        if (w->stop) return NULL;
        while ((i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->n) read_line(w->c, (uint32_t)w->lines[i]);
        pthread_barrier_wait(&w->done);
    }
}

/* Fetch the sorted lines list[0..m) through gpumem_share_fetch, one call
 * per contiguous run. */
static void fetch_runs(gpumem_share *sh, uint32_t o, const uint64_t *list, uint32_t m) {
    uint32_t a = 0, b;
    while (a < m) {
        for (b = a + 1; b < m && list[b] == list[b - 1] + 1; b++) continue;
        MUST(gpumem_share_fetch(sh, o, list[a], b - a));
        a = b;
    }
}

enum { RA_NONE, RA_WAVE, RA_FETCH };

/* A stream over n lines, 32 a batch, scrambled: a batch's lines that miss
 * (and, with readahead, the spans it proposes) are read in one wave: by 16
 * threads a line each (RA_NONE, RA_WAVE), or by this thread through
 * gpumem_share_fetch, contiguous lines in one transfer (RA_FETCH). */
static double ra_run(uint32_t n, int readahead, int64_t lat, uint64_t *waves, uint64_t *demand, uint64_t *transfers) {
    rig r;
    wave w;
    pthread_t th[16];
    gpumem_policy_ra_batch ra;
    gpumem_policy_ra_span sp[8];
    uint64_t seed = 9, batch[32], *list = (uint64_t *)malloc((32 + 8 * 4096) * sizeof *list);
    uint32_t b, i, j, s, l;
    double t0, t;
    if (rig_make(&r, n, n, lat) != 0) return rig_failed(__LINE__), 0;
    for (l = 0; l < n; l++) ((uint32_t *)rig_stored(&r, l))[0] = l;
    gpumem_policy_ra_batch_init(&ra, n, LINE, GPUMEM_POLICY_RA_GPU_CAP);
    memset(&w, 0, sizeof w);
    w.c = r.caches[GPUMEM_SHARE_GPU0];
    w.lines = list;
    pthread_barrier_init(&w.start, NULL, 17);
    pthread_barrier_init(&w.done, NULL, 17);
    for (j = 0; j < 16; j++) pthread_create(&th[j], NULL, wave_worker, &w);
    *waves = *demand = 0;
    t0 = now_us();
    for (b = 0; b < n / 32; b++) {
        uint32_t misses = 0, m;
        for (i = 0; i < 32; i++) batch[i] = (uint64_t)b * 32 + i;
        for (i = 32; i > 1; i--) {
            uint64_t x;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            j = (uint32_t)((seed >> 33) % i);
            x = batch[i - 1];
            batch[i - 1] = batch[j];
            batch[j] = x;
        }
        for (i = 0; i < 32; i++) /* what GPU threads would miss on */
            if (!(gpumem_atomic_load_u32(gpumem__line_state(w.c, batch[i]), GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_DEVICE) &
                  GPUMEM_CACHE_VALID))
                batch[misses++] = batch[i];
        if (!misses) continue;
        m = 0;
        if (readahead) {
            uint32_t n_sp = gpumem_policy_ra_batch_on_misses(&ra, batch, misses, sp, 8); /* sorts the batch */
            for (s = 0; s < n_sp; s++)
                for (i = 0; i < sp[s].count && m < 8 * 4096; i++) list[32 + m++] = sp[s].first + (uint64_t)i * sp[s].stride;
        }
        *demand += misses;
        (*waves)++;
        if (readahead == RA_FETCH) {
            fetch_runs(r.share, GPUMEM_SHARE_GPU0, batch, misses);
            fetch_runs(r.share, GPUMEM_SHARE_GPU0, list + 32, m);
            continue;
        }
        memcpy(list, batch, misses * sizeof *list);
        memmove(list + misses, list + 32, m * sizeof *list);
        w.n = misses + m;
        w.next = 0;
        pthread_barrier_wait(&w.start);
        pthread_barrier_wait(&w.done);
    }
    t = now_us() - t0;
    {
        gpumem_share_stats st;
        gpumem_share_get_stats(r.share, &st);
        *transfers = st.storage_transfers + st.peer_transfers;
    }
    for (l = 0; l < n; l++) read_line(w.c, l); /* every line there, and the right one */
    w.stop = 1;
    pthread_barrier_wait(&w.start);
    for (j = 0; j < 16; j++) pthread_join(th[j], NULL);
    pthread_barrier_destroy(&w.start);
    pthread_barrier_destroy(&w.done);
    free(list);
    rig_free(&r);
    return t / n;
}

static void bench_readahead(int64_t lat, double scale) {
    static const char *names[] = {"no readahead (16 threads, a line each)", "batch readahead (16 threads, a line each)",
                                  "batch readahead, gpumem_share_fetch (1 thread)"};
    const uint32_t batches = (uint32_t)(16384 * scale) / 32, n = batches ? batches * 32 : 1024;
    double t[3][REPS], v[3];
    uint64_t waves[3], demand[3], transfers[3];
    char what[160];
    int k, mode;
    for (k = 0; k < REPS; k++)
        for (mode = 0; mode < 3; mode++) t[mode][k] = ra_run(n, mode, lat, &waves[mode], &demand[mode], &transfers[mode]);
    for (mode = 0; mode < 3; mode++) {
        v[mode] = median3(t[mode][0], t[mode][1], t[mode][2]);
        snprintf(what, sizeof what, "%s: %llu waves, %llu demand misses, %llu transfers", names[mode],
                 (unsigned long long)waves[mode], (unsigned long long)demand[mode], (unsigned long long)transfers[mode]);
        row("readahead", what, v[mode], "us/line", mode ? v[0] / v[mode] : 1, mode ? "faster than none" : "(baseline)");
    }
}

int main(int argc, char **argv) {
    const char *out = "build/results", *machine = "unknown", *only = "";
    double latency_us = 130, scale = 1;
    char path[512];
    int i;
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--machine")) machine = argv[i + 1];
        else if (!strcmp(argv[i], "--latency-us")) latency_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--scale")) scale = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
        else {
            fprintf(stderr, "usage: share_bench [--out DIR] [--machine TEXT] [--latency-us U] [--scale S] [--only SECTION]\n");
            return 2;
        }
    }
    snprintf(path, sizeof path, "%s/share-bench.md", out);
    if (!(md = fopen(path, "w"))) return perror(path), 2;
    snprintf(path, sizeof path, "%s/share-bench.tsv", out);
    if (!(tsv = fopen(path, "w"))) return perror(path), 2;
    fprintf(md, "# One storage, several caches (bench/share_bench.c)\n\nMachine: %s. Storage: software controller, "
                "%.0f us per command (memory for the calls and the merge). 4 KiB lines; median of %d runs; "
                "ratios to the section's baseline in the same run.\n\n",
            machine, latency_us, REPS);
    {
        FILE *la = fopen("/proc/loadavg", "r");
        char load[64] = "?";
        if (la) {
            if (!fgets(load, sizeof load, la)) strcpy(load, "?");
            fclose(la);
            load[strcspn(load, "\n")] = 0;
        }
        fprintf(md, "Load average at the start (/proc/loadavg): %s.\n\n", load);
    }
    fprintf(md, "| section | what | value | ratio |\n|---|---|---|---|\n");
    fprintf(tsv, "section\twhat\tvalue\tunit\tratio\tvs\n");
#define SECTION(name) (!*only || !strcmp(only, name))
    if (SECTION("false-sharing")) bench_false_sharing((int64_t)(latency_us * 1000), scale);
    if (SECTION("peer")) bench_peer((int64_t)(latency_us * 1000), scale);
    if (SECTION("peer-fetch")) bench_peer_seq((int64_t)(latency_us * 1000), scale);
    if (SECTION("served")) bench_served((int64_t)(latency_us * 1000), scale);
    if (SECTION("calls")) bench_calls();
    if (SECTION("merge")) bench_merge(scale);
    if (SECTION("readahead")) bench_readahead((int64_t)(latency_us * 1000), scale);
    fprintf(md, "\nFailed calls or wrong data: %llu.\n", (unsigned long long)failures);
    fclose(md);
    fclose(tsv);
    if (failures) fprintf(stderr, "share_bench: %llu failures\n", (unsigned long long)failures);
    return failures ? 1 : 0;
}
