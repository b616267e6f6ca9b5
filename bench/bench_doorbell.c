/* bench_doorbell: how the host-thread controller hears doorbells, and what
 * each idle setting costs (issue 12, item 2). A benchmark, not a test:
 * nothing here asserts on time.
 *
 * Two kinds of clients on one pair:
 *   wake    host threads as usual: each doorbell write also notifies the
 *           controller's doorbell event (a futex wake when it is parked);
 *   silent  clients that ring the doorbell and wake nobody, as GPU threads
 *           must (a device thread's notify is a no-op): here host threads
 *           whose pair has no doorbell event.
 * For each idle setting of the controller (idle_spin_ns: park at once, spin
 * 10 us, 50 us (the default), 1 ms, never park; park_ns 1 ms) and each kind:
 *   notice  one client submits one read after an idle gap and polls for its
 *           completion without parking (as a GPU thread does): the round
 *           trip, median and 99th percentile over many, after a short gap
 *           (the controller still spinning, if it spins) and after a random
 *           2-3 ms gap (past every spin but "never");
 *   load    4 client threads issue blocking reads for 0.25 s: commands/s,
 *           and the controller thread's CPU time per second of wall time;
 *   idle    no client for 0.25 s: the controller thread's CPU time per second.
 * Ratios in the same run: silent / wake, for the short-gap round trip and
 * for throughput, at each setting. Each figure is the median of 5 rounds
 * that interleave the settings.
 *
 *   make bench-doorbell      writes build/results/issue12-doorbell.{md,tsv}
 *
 * Usage: bench_doorbell [out.md] [out.tsv] (scale with GPUMEM_BENCH_SCALE). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpumem_swctl.h"

#define BD_BLOCKS 4096u
#define BD_LOAD_THREADS 4u
#define BD_ROUNDS 5u

typedef struct bd_setting {
    const char *name;
    uint64_t spin_ns;
} bd_setting;

static const bd_setting settings[] = {
    {"park at once", GPUMEM_SWCTL_NO_SPIN},
    {"spin 10 us", 10000},
    {"spin 50 us (default)", GPUMEM_SWCTL_DEFAULT_SPIN_NS},
    {"spin 1 ms", 1000000},
    {"never park", GPUMEM_SWCTL_NEVER_PARK},
};
#define BD_N_SETTINGS (sizeof settings / sizeof *settings)

typedef struct bd_result {
    double rtt_short_med_us, rtt_short_p99_us, rtt_idle_med_us, rtt_idle_p99_us;
    double gap_short_us; /* what the ~20 us sleep really took, median */
    double load_ops, load_cpu, idle_cpu; /* commands/s; controller CPU s per wall s */
} bd_result;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    nanosleep(&ts, NULL);
}

static double scale(void) {
    const char *s = getenv("GPUMEM_BENCH_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

/* One read submitted, then polled without parking, as a GPU thread waits:
 * 2,000 polls back to back, then one every ~20 us with the CPU given up in
 * between (a GPU client spins on the GPU, not on a host core: a host thread
 * that spun on would take the core the controller needs on a small machine).
 * The round trip in ns. */
static uint64_t round_trip(gpumem_nvme_qp *qp, void *buf, uint64_t lba) {
    gpumem_nvme_req req;
    uint64_t t0 = gpumem_clock_ns();
    uint32_t polls = 0;
    gpumem_status st;
    while ((st = gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, lba, 1, buf, &req)) == GPUMEM_EAGAIN)
        gpumem__cpu_relax();
    if (st != GPUMEM_OK) {
        fprintf(stderr, "bench_doorbell: submit: %s\n", gpumem_status_str(st));
        exit(1);
    }
    while ((st = gpumem_nvme_qp_poll(qp, &req)) == GPUMEM_EAGAIN)
        if (++polls < 2000) gpumem__cpu_relax();
        else gpumem__host_sleep_ns(20000L);
    if (st != GPUMEM_OK) {
        fprintf(stderr, "bench_doorbell: poll: %s\n", gpumem_status_str(st));
        exit(1);
    }
    return gpumem_clock_ns() - t0;
}

/* Median and 99th percentile (us) of n round trips, each after sleeping
 * gap_ns plus a random part of up to jitter_ns (a controller that parks
 * right after the last completion would otherwise always be met at the same
 * point of its park); *gap: the median of what the sleeps took (us). */
static void notice(gpumem_nvme_qp *qp, void *buf, uint32_t n, long gap_ns, long jitter_ns, double *med, double *p99,
                   double *gap) {
    uint64_t *t = (uint64_t *)malloc(n * sizeof *t), *g = (uint64_t *)malloc(n * sizeof *g);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    uint32_t i;
    for (i = 0; i < n; i++) {
        uint64_t t0 = gpumem_clock_ns();
        gpumem__host_sleep_ns(gap_ns + (jitter_ns ? (long)(gpumem__rng_next(&rng) % (uint64_t)jitter_ns) : 0));
        g[i] = gpumem_clock_ns() - t0;
        t[i] = round_trip(qp, buf, i % BD_BLOCKS);
    }
    qsort(t, n, sizeof *t, cmp_u64);
    qsort(g, n, sizeof *g, cmp_u64);
    *med = t[n / 2] / 1e3;
    *p99 = t[(size_t)n * 99 / 100] / 1e3;
    *gap = g[n / 2] / 1e3;
    free(t);
    free(g);
}

typedef struct bd_loader {
    gpumem_nvme_qp *qp;
    uint32_t id;
    volatile int *stop;
    uint64_t ops, failed;
} bd_loader;

static void *loader(void *p) {
    bd_loader *l = (bd_loader *)p;
    unsigned char buf[512] __attribute__((aligned(512)));
    uint64_t k = l->id;
    while (!__atomic_load_n(l->stop, __ATOMIC_ACQUIRE)) {
        if (gpumem_nvme_qp_read_buf(l->qp, k++ % BD_BLOCKS, 1, buf, NULL) == GPUMEM_OK) l->ops++;
        else l->failed++;
    }
    return NULL;
}

static void run_one(const bd_setting *s, int silent, bd_result *r) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_swctl_stats st;
    unsigned char *buf = (unsigned char *)aligned_alloc(4096, 4096);
    const uint32_t n_short = (uint32_t)(500 * scale()), n_idle = (uint32_t)(60 * scale());
    const uint64_t window_ns = (uint64_t)(250000000.0 * scale());
    uint64_t t0, c0, ops = 0, failed = 0;
    double idle_gap_us; /* not reported: 2 ms and a little more */
    volatile int stop = 0;
    pthread_t th[BD_LOAD_THREADS];
    bd_loader l[BD_LOAD_THREADS];
    uint32_t i;
    cfg.n_blocks = BD_BLOCKS;
    cfg.idle_spin_ns = s->spin_ns;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, 256, &qp) != GPUMEM_OK || !buf) {
        fprintf(stderr, "bench_doorbell: setup failed\n");
        exit(1);
    }
    if (silent) qp->doorbell_event = NULL; /* ring, wake nobody: as GPU threads */
    gpumem_swctl_start(ctl);

    notice(qp, buf, n_short, 20000, 0, &r->rtt_short_med_us, &r->rtt_short_p99_us, &r->gap_short_us);
    notice(qp, buf, n_idle, 2000000, (long)GPUMEM_SWCTL_DEFAULT_PARK_NS, &r->rtt_idle_med_us, &r->rtt_idle_p99_us,
           &idle_gap_us);

    gpumem__host_sleep_ns(5000000L); /* past every spin but "never" */
    t0 = gpumem_clock_ns();
    c0 = gpumem_swctl_cpu_ns(ctl);
    sleep_ns(window_ns);
    r->idle_cpu = (double)(gpumem_swctl_cpu_ns(ctl) - c0) / (double)(gpumem_clock_ns() - t0);

    for (i = 0; i < BD_LOAD_THREADS; i++) {
        l[i].qp = qp, l[i].id = i * 997u, l[i].stop = &stop, l[i].ops = l[i].failed = 0;
        pthread_create(&th[i], NULL, loader, &l[i]);
    }
    t0 = gpumem_clock_ns();
    c0 = gpumem_swctl_cpu_ns(ctl);
    sleep_ns(window_ns);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < BD_LOAD_THREADS; i++) {
        pthread_join(th[i], NULL);
        ops += l[i].ops;
        failed += l[i].failed;
    }
    {
        uint64_t wall = gpumem_clock_ns() - t0;
        r->load_cpu = (double)(gpumem_swctl_cpu_ns(ctl) - c0) / (double)wall;
        r->load_ops = (double)ops * 1e9 / (double)wall;
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &st);
    if (failed || st.violations) {
        fprintf(stderr, "bench_doorbell: %llu failed reads, %llu violations\n", (unsigned long long)failed,
                (unsigned long long)st.violations);
        exit(1);
    }
    gpumem_swctl_destroy(ctl);
    free(buf);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over rounds of each figure (the fields are doubles). */
static bd_result median_of(const bd_result *runs, uint32_t n) {
    bd_result m;
    double v[BD_ROUNDS];
    size_t f, fields = sizeof m / sizeof(double);
    uint32_t i;
    for (f = 0; f < fields; f++) {
        for (i = 0; i < n; i++) v[i] = ((const double *)&runs[i])[f];
        qsort(v, n, sizeof *v, cmp_double);
        ((double *)&m)[f] = v[n / 2];
    }
    return m;
}

static void loadavg(char *out, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    out[0] = 0;
    if (f) {
        if (!fgets(out, (int)n, f)) out[0] = 0;
        fclose(f);
    }
    out[strcspn(out, " ")] = 0; /* the 1-minute figure */
}

int main(int argc, char **argv) {
    const char *md_path = argc > 1 ? argv[1] : NULL, *tsv_path = argc > 2 ? argv[2] : NULL;
    static bd_result runs[BD_N_SETTINGS][2][BD_ROUNDS];
    bd_result r[BD_N_SETTINGS][2];
    FILE *md, *tsv;
    char load_before[64], load_after[64];
    size_t k;
    int kind;
    uint32_t round;
    loadavg(load_before, sizeof load_before);
    /* Rounds interleave the settings, so that a burst of load from
     * elsewhere on the machine falls on all of them alike. */
    for (round = 0; round < BD_ROUNDS; round++)
        for (k = 0; k < BD_N_SETTINGS; k++)
            for (kind = 0; kind < 2; kind++) {
                bd_result *x = &runs[k][kind][round];
                run_one(&settings[k], kind, x);
                fprintf(stderr, "round %u %-22s %-6s rtt %.1f/%.1f us, idle-gap rtt %.1f/%.1f us, %.0f cmd/s, "
                                "cpu load %.3f idle %.3f\n",
                        round, settings[k].name, kind ? "silent" : "wake", x->rtt_short_med_us, x->rtt_short_p99_us,
                        x->rtt_idle_med_us, x->rtt_idle_p99_us, x->load_ops, x->load_cpu, x->idle_cpu);
            }
    for (k = 0; k < BD_N_SETTINGS; k++)
        for (kind = 0; kind < 2; kind++) r[k][kind] = median_of(runs[k][kind], BD_ROUNDS);
    loadavg(load_after, sizeof load_after);
    md = md_path ? fopen(md_path, "w") : stdout;
    tsv = tsv_path ? fopen(tsv_path, "w") : NULL;
    if (!md || (tsv_path && !tsv)) {
        perror("bench_doorbell: output");
        return 1;
    }
    fprintf(md, "# Host-thread controller: hearing doorbells, and what each idle setting costs\n\n");
    fprintf(md, "`make bench-doorbell` (bench/bench_doorbell.c). One pair, depth 256, instant media, 512-byte "
                "reads; park_ns 1 ms. *wake*: host clients that notify the controller's doorbell event; "
                "*silent*: clients that ring and wake nobody, as GPU threads must. Round trip: one read "
                "submitted and polled without parking (as a GPU thread waits: 2,000 polls, then one every "
                "~20 us, sleeping between, so as to leave the host cores to the controller), median / 99th "
                "percentile in us, after a short gap (a 20 us sleep, which took %.0f us, median) and after a "
                "gap of 2 to 3 ms (random, so that it ends anywhere in a 1 ms park; past every spin but "
                "never-park). *silent / wake* columns: the two kinds in the same run, for that setting (round-trip medians after the short gap; throughputs). Load: %u blocking client "
                "threads for 0.25 s, commands/s. CPU: the controller thread's CPU time per second of wall time "
                "(CLOCK_THREAD_CPUTIME_ID), under that load and with no clients for 0.25 s. Each figure is the "
                "median of %u rounds that interleave the settings, a fresh controller each. Machine: `%s`, %ld "
                "CPUs online, load average %s before and %s after the run (round trips and CPU shares suffer "
                "when it is above the CPU count: a spinning controller gets only its share).\n\n",
            r[0][0].gap_short_us, BD_LOAD_THREADS, BD_ROUNDS,
            getenv("GPUMEM_MACHINE") ? getenv("GPUMEM_MACHINE") : "unnamed", sysconf(_SC_NPROCESSORS_ONLN),
            load_before, load_after);
    fprintf(md, "| idle setting | clients | round trip, short gap (us) | round trip, 2-3 ms gap (us) | silent / wake "
                "round trip | load (cmd/s) | silent / wake throughput | controller CPU, load | controller CPU, "
                "idle |\n");
    fprintf(md, "|---|---|---|---|---|---|---|---|---|\n");
    if (tsv)
        fprintf(tsv, "setting\tclients\trtt_short_med_us\trtt_short_p99_us\trtt_idle_med_us\trtt_idle_p99_us\t"
                     "short_gap_us\tsilent_over_wake_rtt\tload_ops\tsilent_over_wake_ops\tcpu_load\tcpu_idle\n");
    for (k = 0; k < BD_N_SETTINGS; k++)
        for (kind = 0; kind < 2; kind++) {
            const bd_result *x = &r[k][kind];
            double rtt = r[k][1].rtt_short_med_us / (r[k][0].rtt_short_med_us > 0 ? r[k][0].rtt_short_med_us : 1);
            double ops = r[k][1].load_ops / (r[k][0].load_ops > 0 ? r[k][0].load_ops : 1);
            char rtt_s[32] = "", ops_s[32] = "";
            if (kind) snprintf(rtt_s, sizeof rtt_s, "%.2f", rtt), snprintf(ops_s, sizeof ops_s, "%.3f", ops);
            fprintf(md, "| %s | %s | %.1f / %.1f | %.1f / %.1f | %s | %.0f | %s | %.2f | %.3f |\n", settings[k].name,
                    kind ? "silent" : "wake", x->rtt_short_med_us, x->rtt_short_p99_us, x->rtt_idle_med_us,
                    x->rtt_idle_p99_us, rtt_s, x->load_ops, ops_s, x->load_cpu, x->idle_cpu);
            if (tsv)
                fprintf(tsv, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.4f\t%.0f\t%.4f\t%.4f\t%.4f\n", settings[k].name,
                        kind ? "silent" : "wake", x->rtt_short_med_us, x->rtt_short_p99_us, x->rtt_idle_med_us,
                        x->rtt_idle_p99_us, x->gap_short_us, rtt, x->load_ops, ops, x->load_cpu, x->idle_cpu);
        }
    if (md != stdout) fclose(md);
    if (tsv) fclose(tsv);
    return 0;
}
