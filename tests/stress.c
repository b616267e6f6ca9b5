/* The multi-threaded queue-pair and cache workloads of the test suite,
 * without Criterion, for the sanitizer builds (make tsan, make asan) and for
 * the soak (make stress: both sanitizers). Prints one line per run; exits 1
 * on any problem. GPUMEM_TEST_SCALE scales the I/O counts; then, for
 * GPUMEM_SOAK_SECONDS (default 0: none), random mixes (mix_workload.h: every
 * thread keeps an asynchronous read outstanding while it issues blocking
 * ones; random threads, depth, command IDs, reordering, injected errors and
 * latency; the statistics read throughout), every command counted and every
 * read checked by content. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <time.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "nvme_workload.h"
#include "cache_workload.h"
#include "mix_workload.h"
#include "share_workload.h"

/* The runs that failed, named again after the last one: a CI log keeps
 * only its tail, and the soak's lines would push a failure out of it. */
static char failed_names[2048];

/* 1 (and the run named) when there is a problem, else 0. */
static int failure(const char *name, const char *problem) {
    size_t used = strlen(failed_names);
    if (!problem) return 0;
    snprintf(failed_names + used, sizeof failed_names - used, "  FAILED: %s: %s\n", name, problem);
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The cache workloads of test_cache.c, then the same through the host tier
 * (test_tier.c); returns the number that failed. */
static int cache_runs(void) {
    cache_workload w[40];
    int n = cache_workloads(w), i, failed = 0;
    n += tier_workloads(w + n);
    for (i = 0; i < n; i++) {
        cache_result r;
        char why[256];
        const char *problem;
        double t0 = now_s();
        gpumem_status st = cache_run(&w[i].cfg, &r);
        problem = st != GPUMEM_OK ? gpumem_status_str(st) : cache_check(&w[i].cfg, &r, why, sizeof why);
        printf("%-66s %9lu ops %6.2f s  %s\n", w[i].name, (unsigned long)r.ops, now_s() - t0,
               problem ? problem : "ok");
        fflush(stdout);
        failed += failure(w[i].name, problem);
    }
    printf("stress: %d of %d cache runs clean\n", n - failed, n);
    return failed;
}

/* The share's workloads (test_share.c): producer -> consumer, disjoint
 * writers, random mixes with eviction, with and without a host tier below
 * each cache; returns the number that failed. */
static int share_runs(void) {
    /* owners+1, ctrls, mix (0 false sharing, 1 random), flags (SHARE_WL_TIER: a
     * host tier; SHARE_WL_SERVED: GPU owners' misses through the miss queue) */
    static const uint32_t shapes[][4] = {{3, 0, 0, 0}, {9, 1, 0, 0}, {3, 2, 1, 0}, {9, 1, 1, 0},
                                         {3, 0, 1, SHARE_WL_TIER}, {9, 1, 1, SHARE_WL_TIER},
                                         {3, 0, 1, SHARE_WL_SERVED}, {4, 2, 1, SHARE_WL_SERVED},
                                         {9, 1, 0, SHARE_WL_SERVED},
                                         {4, 1, 1, SHARE_WL_SERVED | SHARE_WL_SHORT_TIMEOUT}};
    const uint32_t ops = (uint32_t)(2000 * test_scale()) + 50;
    int i, failed = 0, n = (int)(sizeof shapes / sizeof shapes[0]);
    for (i = 0; i < n; i++) {
        share_run run;
        double t0 = now_s();
        int bad = share_producer_consumer(shapes[i][0], shapes[i][1], 4, (int)shapes[i][3], &run) ||
                  share_mix(shapes[i][0], shapes[i][1], shapes[i][2], (int)shapes[i][3], 2, ops, &run);
        printf("share: %u owners, %u controllers, %-13s%-10s %6.2f s  %s\n", shapes[i][0] - 1, shapes[i][1],
               shapes[i][2] ? "random mix" : "false sharing",
               shapes[i][3] & SHARE_WL_TIER                ? " + tier"
               : shapes[i][3] & SHARE_WL_SHORT_TIMEOUT     ? " served, 20 us timeout"
               : shapes[i][3] & SHARE_WL_SERVED            ? " served"
                                                           : "",
               now_s() - t0,
               bad ? run.why : "ok");
        fflush(stdout);
        if (bad) {
            char name[64];
            snprintf(name, sizeof name, "share shape %d (%u owners, %u controllers, flags %u)", i, shapes[i][0] - 1,
                     shapes[i][1], shapes[i][3]);
            failure(name, run.why);
        }
        failed += bad;
    }
    printf("stress: %d of %d share runs clean\n", n - failed, n);
    return failed;
}

/* Random mixes until `seconds` have passed; returns the number that failed. */
static int soak(double seconds) {
    const char *seed_env = getenv("GPUMEM_SOAK_SEED");
    uint64_t rng = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
    double until = now_s() + seconds;
    int runs = 0, failed = 0;
    printf("soak: %.0f s of random mixes, seed %llu (GPUMEM_SOAK_SEED repeats it)\n", seconds,
           (unsigned long long)rng);
    rng |= 1;
    while (now_s() < until) {
        mix_cfg c;
        mix_result r;
        const char *problem;
        double t0 = now_s();
        memset(&c, 0, sizeof c);
        c.threads = 2 + (uint32_t)(mix_rng(&rng) % 47);
        c.depth = 2u << (mix_rng(&rng) % 7);  /* 2 .. 128 */
        c.n_cids = 2u << (mix_rng(&rng) % 8); /* 2 .. 256 */
        c.ios = 20 + (uint32_t)(mix_rng(&rng) % 200);
        c.region = 2 + (uint32_t)(mix_rng(&rng) % 15);
        c.reorder = mix_rng(&rng) % 2 ? 2 + (uint32_t)(mix_rng(&rng) % 15) : 0;
        c.error_ppm = mix_rng(&rng) % 3 == 0 ? (uint32_t)(mix_rng(&rng) % 50000) : 0;
        c.latency_ns = mix_rng(&rng) % 4 == 0 ? mix_rng(&rng) % 50000 : 0;
        c.watchdog_s = 300; /* sanitizers are slow; a hang is still reported, not waited out */
        mix_run(&c, &r);
        problem = mix_problem(&r);
        runs++;
        printf("mix %3d: %2u threads, depth %3u, %3u IDs, reorder %2u, %5u ppm errors, %5lu ns: %7lu commands "
               "(%lu async, %lu EAGAIN, %lu EIO), stats read %lu times, %5.2f s  %s\n",
               runs, c.threads, c.depth, c.n_cids, c.reorder, c.error_ppm, (unsigned long)c.latency_ns,
               (unsigned long)r.issued, (unsigned long)r.async_ok, (unsigned long)r.async_eagain,
               (unsigned long)r.eio, (unsigned long)r.stats_reads, now_s() - t0, problem ? problem : "ok");
        fflush(stdout);
        if (problem) {
            char name[64];
            snprintf(name, sizeof name, "soak mix %d", runs);
            failed += failure(name, problem);
        }
        if (r.hung) break; /* its threads are still blocked: nothing more can be trusted */
    }
    printf("soak: %d of %d mixes clean\n", runs - failed, runs);
    return failed;
}

int main(void) {
    const char *soak_env = getenv("GPUMEM_SOAK_SECONDS");
    struct {
        const char *name;
        run_cfg rc;
    } runs[11];
    int n = 0, i, failed = 0;
    double scale = test_scale();
    runs[n].name = "depth 2, 64 threads";
    runs[n++].rc = base_run(2);
    runs[n].name = "depth 4, 64 threads";
    runs[n++].rc = base_run(4);
    runs[n].name = "depth 64, 64 threads";
    runs[n++].rc = base_run(64);
    runs[n].name = "depth 1024, 64 threads";
    runs[n++].rc = base_run(1024);
    runs[n].name = "4 pairs, 32 command IDs";
    runs[n].rc = base_run(16);
    runs[n].rc.pairs = 4;
    runs[n++].rc.n_cids = 32;
    runs[n].name = "wrap past 2^32, depth 4";
    runs[n].rc = base_run(4);
    runs[n++].rc.virtual_start = 0u - 8u * 4u; /* 8 laps below 2^32: every scale crosses it */
    runs[n].name = "wrap past 2^32, depth 1024";
    runs[n].rc = base_run(1024);
    runs[n++].rc.virtual_start = 0u - 8u * 1024u;
    runs[n].name = "out of order, 20 us latency";
    runs[n].rc = base_run(64);
    runs[n].rc.ctl.reorder = 16;
    runs[n++].rc.ctl.latency_ns = 20000;
    runs[n].name = "5% injected errors";
    runs[n].rc = base_run(64);
    runs[n].rc.ctl.error_ppm = 50000;
    runs[n].rc.ctl.error_status = GPUMEM_NVME_STATUS(2, 0x81);
    runs[n++].rc.ctl.reorder = 8;
    runs[n].name = "GPU controller loop, 4 pairs";
    runs[n].rc = base_run(64);
    runs[n].rc.pairs = 4;
    runs[n].rc.n_cids = 64;
    runs[n++].rc.gpuctl_servers = 2;
    for (i = 0; i < n; i++) {
        run_result r;
        const char *problem;
        double t0 = now_s();
        if (runs[i].rc.depth <= 4) runs[i].rc.ios = (uint32_t)(300 * scale); /* every I/O is a handoff */
        run_workload(&runs[i].rc, &r);
        problem = run_problem(&r);
        printf("%-30s %8lu commands %6.2f s  %s\n", runs[i].name, (unsigned long)r.issued, now_s() - t0,
               problem ? problem : "ok");
        fflush(stdout);
        failed += failure(runs[i].name, problem);
    }
    printf("stress: %d of %d queue runs clean\n", n - failed, n);
    failed += cache_runs();
    failed += share_runs();
    if (soak_env && atof(soak_env) > 0) failed += soak(atof(soak_env));
    if (failed) printf("stress: %d run(s) failed:\n%s", failed, failed_names);
    return failed ? 1 : 0;
}
