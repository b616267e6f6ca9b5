/* A mix that used to deadlock (issue 13): every thread keeps one asynchronous
 * read outstanding while it issues blocking writes and reads, on a pair with
 * few command IDs and a shallow queue. Shared by the Criterion suite
 * (test_robust.c, the configuration and a sweep around it) and the
 * soak (stress.c, random mixes for a set time under the sanitizers).
 *
 * Every command is counted and every read checked by content (block_content.h);
 * a reader thread reads the controller's statistics the whole time and checks
 * that each count only grows. The run waits for its threads at most
 * `watchdog_s` seconds: a hang is reported (hung = 1), never waited out.
 * No assertions here: the callers check the result. */
#ifndef GPUMEM_TEST_MIX_WORKLOAD_H
#define GPUMEM_TEST_MIX_WORKLOAD_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpumem_swctl.h"
#include "block_content.h"
#include "io_problem.h"

typedef struct mix_cfg {
    uint32_t threads, depth, n_cids, ios;
    uint32_t region;     /* blocks per thread, >= 2 */
    uint32_t reorder;    /* controller: 0 or > 1 */
    uint32_t error_ppm;  /* controller: injected errors (status left at 0: the default) */
    uint64_t latency_ns; /* controller */
    double watchdog_s;
} mix_cfg;

typedef struct mix_result {
    gpumem_status setup;
    int hung;                 /* the threads did not finish within watchdog_s */
    uint64_t issued;          /* commands handed to the controller (every OK or EIO) */
    uint64_t async_ok, async_eagain, eio, bad_data, bad_status, store_mismatches;
    uint64_t stats_reads, stats_went_back; /* the concurrent statistics reader */
    gpumem_swctl_stats stats;
} mix_result;

typedef struct mix_thread {
    const mix_cfg *cfg;
    gpumem_nvme_qp *qp;
    uint32_t id;
    uint32_t *gen; /* per block of the region: generation last written */
    uint64_t issued, async_ok, async_eagain, eio, bad_data, bad_status;
} mix_thread;

static uint64_t mix_rng(uint64_t *s) { return gpumem__rng_next(s); }

/* A completed command's status: OK, or EIO (injected errors only). */
static void mix_count(mix_thread *t, gpumem_status st) {
    t->issued++;
    if (st == GPUMEM_EIO) t->eio++;
    else if (st != GPUMEM_OK) t->bad_status++;
}

static void *mix_worker(void *p) {
    mix_thread *t = (mix_thread *)p;
    const mix_cfg *c = t->cfg;
    unsigned char *buf = (unsigned char *)aligned_alloc(4096, 2 * 4096);
    unsigned char *abuf = buf + 4096; /* the outstanding asynchronous read's buffer */
    uint64_t rng = 0x9E3779B97F4A7C15ull * (t->id + 1), base = (uint64_t)t->id * c->region;
    gpumem_nvme_req req;
    uint32_t done, a_off = 0, a_gen = 0;
    int outstanding = 0;
    memset(&req, 0, sizeof req);
    for (done = 0; done < c->ios; done++) {
        uint32_t off = (uint32_t)(mix_rng(&rng) % c->region);
        gpumem_nvme_cpl cpl;
        gpumem_status st;
        if (!outstanding) { /* keep one asynchronous read outstanding */
            gpumem_nvme_cmd cmd;
            a_off = (uint32_t)(mix_rng(&rng) % c->region);
            a_gen = t->gen[a_off];
            memset(abuf, 0xEE, LBA);
            gpumem_nvme_cmd_read(&cmd, &t->qp->ns, base + a_off, 1, (uintptr_t)abuf, 0);
            st = gpumem_nvme_qp_submit(t->qp, &cmd, &req);
            if (st == GPUMEM_OK) outstanding = 1, t->async_ok++;
            else if (st == GPUMEM_EAGAIN) t->async_eagain++;
            else t->bad_status++;
        }
        if (outstanding && off == a_off) off = (off + 1) % c->region; /* never write under the read */
        if (mix_rng(&rng) & 1) { /* blocking write of the next generation */
            uint32_t g = t->gen[off] + 1;
            fill_block(buf, base + off, g);
            st = gpumem_nvme_qp_write(t->qp, base + off, 1, (uintptr_t)buf, 0, &cpl);
            if (st == GPUMEM_OK) t->gen[off] = g;
        } else { /* blocking read, checked */
            memset(buf, 0xEE, LBA);
            st = gpumem_nvme_qp_read(t->qp, base + off, 1, (uintptr_t)buf, 0, &cpl);
            if (st == GPUMEM_OK && !block_ok(buf, base + off, t->gen[off])) t->bad_data++;
        }
        mix_count(t, st);
        if (outstanding && (st = gpumem_nvme_qp_poll(t->qp, &req)) != GPUMEM_EAGAIN) {
            mix_count(t, st);
            if (st == GPUMEM_OK && !block_ok(abuf, base + a_off, a_gen)) t->bad_data++;
            outstanding = 0;
        }
    }
    if (outstanding) {
        gpumem_status st = gpumem_nvme_qp_wait(t->qp, &req);
        mix_count(t, st);
        if (st == GPUMEM_OK && !block_ok(abuf, base + a_off, a_gen)) t->bad_data++;
    }
    free(buf);
    return NULL;
}

typedef struct mix_reader {
    gpumem_swctl *ctl;
    int stop; /* atomic */
    uint64_t reads, went_back;
} mix_reader;

/* Reads the statistics while the controller runs: each count must only grow. */
static void *mix_stats_reader(void *p) {
    mix_reader *r = (mix_reader *)p;
    gpumem_swctl_stats last, now;
    memset(&last, 0, sizeof last);
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        const uint64_t *a = (const uint64_t *)&last, *b = (const uint64_t *)&now;
        size_t k;
        gpumem_swctl_get_stats(r->ctl, &now);
        for (k = 0; k < sizeof now / sizeof(uint64_t); k++)
            if (b[k] < a[k]) r->went_back++;
        last = now;
        r->reads++;
        sched_yield();
    }
    return NULL;
}

typedef struct mix_join {
    pthread_t *threads;
    uint32_t n;
    int done; /* atomic */
} mix_join;

static void *mix_joiner(void *p) {
    mix_join *j = (mix_join *)p;
    uint32_t i;
    for (i = 0; i < j->n; i++) pthread_join(j->threads[i], NULL);
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static double mix_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Run one mix. On a hang everything is left as it is (the threads cannot be
 * stopped) and the caller fails. */
static void mix_run(const mix_cfg *c, mix_result *r) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    gpumem_nvme_qp *qp = NULL;
    mix_thread *t;
    mix_join *j;
    mix_reader rd;
    pthread_t joiner, reader;
    unsigned char *ram;
    uint32_t i, b;
    double until;
    memset(r, 0, sizeof *r);
    cfg.lba_bytes = LBA;
    cfg.n_blocks = (uint64_t)c->threads * c->region;
    cfg.reorder = c->reorder;
    cfg.error_ppm = c->error_ppm;
    cfg.latency_ns = c->latency_ns;
    if ((r->setup = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK) return;
    if ((r->setup = gpumem_swctl_add_qp_ex(ctl, c->depth, c->n_cids, 0, &qp)) != GPUMEM_OK) {
        gpumem_swctl_destroy(ctl);
        return;
    }
    ram = (unsigned char *)gpumem_swctl_ram(ctl);
    for (b = 0; b < cfg.n_blocks; b++) fill_block(ram + (size_t)b * LBA, b, 0);
    gpumem_swctl_start(ctl);
    t = (mix_thread *)calloc(c->threads, sizeof *t);
    j = (mix_join *)calloc(1, sizeof *j);
    j->threads = (pthread_t *)calloc(c->threads, sizeof(pthread_t));
    j->n = c->threads;
    memset(&rd, 0, sizeof rd);
    rd.ctl = ctl;
    pthread_create(&reader, NULL, mix_stats_reader, &rd);
    for (i = 0; i < c->threads; i++) {
        t[i].cfg = c;
        t[i].qp = qp;
        t[i].id = i;
        t[i].gen = (uint32_t *)calloc(c->region, sizeof(uint32_t));
        pthread_create(&j->threads[i], NULL, mix_worker, &t[i]);
    }
    pthread_create(&joiner, NULL, mix_joiner, j);
    until = mix_now_s() + c->watchdog_s;
    while (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE) && mix_now_s() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE)) {
        r->hung = 1; /* leave the threads, the controller and their memory alone */
        return;
    }
    pthread_join(joiner, NULL);
    __atomic_store_n(&rd.stop, 1, __ATOMIC_RELEASE);
    pthread_join(reader, NULL);
    r->stats_reads = rd.reads;
    r->stats_went_back = rd.went_back;
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &r->stats);
    for (i = 0; i < c->threads; i++) {
        r->issued += t[i].issued;
        r->async_ok += t[i].async_ok;
        r->async_eagain += t[i].async_eagain;
        r->eio += t[i].eio;
        r->bad_data += t[i].bad_data;
        r->bad_status += t[i].bad_status;
        for (b = 0; b < c->region; b++) {
            uint64_t lba = (uint64_t)i * c->region + b;
            if (!block_ok(ram + lba * LBA, lba, t[i].gen[b])) r->store_mismatches++;
        }
        free(t[i].gen);
    }
    if (gpumem_swctl_destroy(ctl) != GPUMEM_OK) r->bad_status++; /* nothing may be left busy */
    free(j->threads);
    free(j);
    free(t);
}

/* NULL if the run was clean, else what was wrong. */
static const char *mix_problem(const mix_result *r) {
    static char msg[256];
    if (r->setup) return gpumem_status_str(r->setup);
    if (r->hung) return "hung: the threads did not finish (deadlock)";
    if (r->bad_status)
        snprintf(msg, sizeof msg, "%lu unexpected statuses", (unsigned long)r->bad_status);
    else if (io_problem(msg, sizeof msg, &r->stats, r->issued, r->bad_data, r->eio, 0, r->store_mismatches))
        return msg;
    else if (r->stats_went_back)
        snprintf(msg, sizeof msg, "statistics went backwards %lu times", (unsigned long)r->stats_went_back);
    else
        return NULL;
    return msg;
}

#endif
