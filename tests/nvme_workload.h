/* The multi-threaded I/O workload shared by the Criterion suite (test_nvme.c)
 * and the sanitizer driver (stress.c; Criterion cannot run under
 * ThreadSanitizer here). No assertions: it counts, and the callers check.
 *
 * Each thread owns a region of blocks. It does blocking writes of the next
 * generation, blocking reads, and batches of asynchronous reads, and checks
 * every read by content: each block holds (lba, generation, a fill derived
 * from both), so a read of another block, a stale generation or torn data is
 * caught. Afterwards the backing store must hold each block's last
 * generation. GPUMEM_TEST_SCALE (default 1) scales the per-thread I/O count. */
#ifndef GPUMEM_TEST_NVME_WORKLOAD_H
#define GPUMEM_TEST_NVME_WORKLOAD_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_swctl.h"
#include "block_content.h"
#if defined(GPUMEM_HOST_WARP)
#include "host_warp.h" /* the GPU controller's servers play warps of several lanes */
#endif
#include "io_problem.h"

static double test_scale(void) {
    const char *s = getenv("GPUMEM_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

typedef struct worker_args {
    gpumem_nvme_qp **pairs;
    uint32_t n_pairs;
    uint32_t id;
    uint32_t ios;        /* I/Os to do */
    uint32_t region;     /* blocks owned by this thread */
    uint32_t async_depth;/* outstanding async reads per thread (0 = blocking only) */
    uint64_t issued;     /* commands this thread submitted */
    uint64_t eio;        /* completions with an error */
    uint64_t bad_data;   /* reads whose content was wrong */
    uint64_t eio_wrong_words; /* EIO whose decoded status was not the injected one */
    uint16_t expect_error;    /* injected status, 0 = none */
    uint32_t *gen;       /* per-block generation last written successfully */
    uint64_t failures;   /* checks that failed in this thread (asserting off the main thread is not safe) */
    int first_failure_line;
} worker_args;

#define WORKER_CHECK(a, cond)                                        \
    do {                                                             \
        if (!(cond)) {                                               \
            (a)->failures++;                                         \
            if (!(a)->first_failure_line) (a)->first_failure_line = __LINE__; \
        }                                                            \
    } while (0)


/* Blocking writes and reads, mixed with batches of asynchronous reads; every
 * read is checked against the generation this thread last wrote. */
static void *io_worker(void *p) {
    worker_args *a = (worker_args *)p;
    unsigned char *buf = aligned_alloc(4096, (size_t)(a->async_depth + 1) * 4096);
    gpumem_nvme_req *reqs = calloc(a->async_depth + 1, sizeof *reqs);
    uint64_t *req_lba = calloc(a->async_depth + 1, sizeof *req_lba);
    uint64_t rng = 0x9E3779B97F4A7C15ull * (a->id + 1);
    uint64_t base = (uint64_t)a->id * a->region;
    uint32_t done = 0;
    gpumem_nvme_qp *qp = a->pairs[a->id % a->n_pairs]; /* a pair per thread index */
    while (done < a->ios) {
        uint64_t off = gpumem__rng_next(&rng) % a->region, lba = base + off;
        uint32_t kind = (uint32_t)(gpumem__rng_next(&rng) % 4);
        gpumem_nvme_cpl cpl;
        gpumem_status st;
        if (kind <= 1 || a->async_depth == 0) { /* 0: write, 1: read, 2-3: async batch */
            if (kind == 0) { /* blocking write of the next generation */
                uint32_t g = a->gen[off] + 1;
                fill_block(buf, lba, g);
                st = gpumem_nvme_qp_write(qp, lba, 1, (uintptr_t)buf, 0, &cpl);
                if (st == GPUMEM_OK) a->gen[off] = g;
            } else { /* blocking read */
                memset(buf, 0xEE, LBA);
                st = gpumem_nvme_qp_read(qp, lba, 1, (uintptr_t)buf, 0, &cpl);
                if (st == GPUMEM_OK && !block_ok(buf, lba, a->gen[off])) a->bad_data++;
            }
            a->issued++;
            done++;
            if (st == GPUMEM_EIO) {
                a->eio++;
                if (gpumem_nvme_cpl_status(&cpl) != a->expect_error) a->eio_wrong_words++;
            } else {
                WORKER_CHECK(a, (st) == (GPUMEM_OK));
            }
        } else { /* a batch of asynchronous reads, reaped in reverse order */
            uint32_t n = 0, k;
            while (n < a->async_depth && done + n < a->ios) {
                gpumem_nvme_cmd cmd;
                uint64_t o = gpumem__rng_next(&rng) % a->region;
                unsigned char *b = buf + (size_t)(n + 1) * 4096;
                memset(b, 0xEE, LBA);
                WORKER_CHECK(a, (gpumem_nvme_cmd_read(&cmd, &qp->ns, base + o, 1, (uintptr_t)b, 0)) == (GPUMEM_OK));
                st = gpumem_nvme_qp_submit(qp, &cmd, &reqs[n]);
                if (st == GPUMEM_EAGAIN) break; /* queue full: reap what we have */
                WORKER_CHECK(a, (st) == (GPUMEM_OK));
                req_lba[n++] = o;
                a->issued++;
            }
            if (n == 0) {
                /* Could not submit even one: nothing of ours is outstanding,
                 * so a blocking read is safe and makes progress. */
                st = gpumem_nvme_qp_read(qp, lba, 1, (uintptr_t)buf, 0, &cpl);
                a->issued++;
                done++;
                if (st == GPUMEM_EIO) a->eio++;
                else if (!block_ok(buf, lba, a->gen[off])) a->bad_data++;
                continue;
            }
            for (k = n; k-- > 0;) {
                st = gpumem_nvme_qp_wait(qp, &reqs[k]);
                if (st == GPUMEM_EIO) {
                    a->eio++;
                    if (gpumem_nvme_cpl_status(&reqs[k].cpl) != a->expect_error) a->eio_wrong_words++;
                } else {
                    WORKER_CHECK(a, (st) == (GPUMEM_OK));
                    if (!block_ok(buf + (size_t)(k + 1) * 4096, base + req_lba[k], a->gen[req_lba[k]]))
                        a->bad_data++;
                }
                WORKER_CHECK(a, gpumem_nvme_qp_poll(qp, &reqs[k]) == st); /* a finished request keeps its result */
            }
            done += n;
        }
    }
    free(buf);
    free(reqs);
    free(req_lba);
    return NULL;
}

typedef struct run_cfg {
    uint32_t depth, threads, ios, async_depth, pairs, n_cids;
    uint32_t virtual_start;
    gpumem_swctl_config ctl;
    /* 0: the host-thread controller (ctl above). N > 0: the GPU-resident
     * controller's serving loop (gpumem_swctl_gpu_serve) run by N host
     * threads, with instant completion (ctl's latency, reordering and error
     * injection do not apply; virtual_start must be 0). */
    uint32_t gpuctl_servers;
} run_cfg;

typedef struct run_result {
    gpumem_status setup; /* GPUMEM_OK unless the controller or a pair could not be set up */
    uint64_t issued, eio, bad_data, eio_wrong_words, worker_failures, store_mismatches, unfinished_pairs;
    int first_failure_line;
    gpumem_swctl_stats stats; /* the controller's, after stop */
} run_result;

static run_cfg base_run(uint32_t depth) {
    run_cfg rc;
    memset(&rc, 0, sizeof rc);
    rc.depth = depth;
    rc.threads = 64;
    rc.ios = (uint32_t)(1000 * test_scale());
    rc.async_depth = 4;
    rc.pairs = 1;
    rc.ctl = gpumem_swctl_config_default();
    return rc;
}

/* The GPU-resident controller, served by host threads. */
typedef struct gpuctl_rig {
    gpumem_swctl_gpu_desc d;
    void *mem;
    uint32_t control[2];
    uint32_t servers;
    pthread_t thread[16];
    uint32_t index[16];
} gpuctl_rig;

static gpuctl_rig *gpuctl_rig_now; /* the rig the server threads serve */

static void *gpuctl_server(void *p) {
    uint32_t t = *(const uint32_t *)p;
#if defined(GPUMEM_HOST_WARP)
    host_warp_enter(t);
#endif
    gpumem_swctl_gpu_serve((gpumem_swctl_gpu *)gpuctl_rig_now->mem, t, gpuctl_rig_now->servers);
    return NULL;
}

/* Lay out a GPU controller in host memory and initialise it (not started). */
static gpumem_status gpuctl_rig_init(gpuctl_rig *g, const run_cfg *rc, uint64_t n_blocks) {
    size_t bytes;
    memset(g, 0, sizeof *g);
    g->d = gpumem_swctl_gpu_desc_default();
    g->d.n_pairs = rc->pairs;
    g->d.depth = rc->depth;
    g->d.n_cids = rc->n_cids ? rc->n_cids : 1024;
    g->d.lba_bytes = LBA;
    g->d.n_blocks = n_blocks;
    g->d.max_blocks = rc->ctl.max_blocks;
    g->d.ram = calloc(n_blocks, LBA);
    g->d.control = g->control;
    bytes = gpumem_swctl_gpu_bytes(&g->d);
    g->mem = aligned_alloc(4096, GPUMEM_ALIGN_UP(bytes, 4096));
    g->servers = rc->gpuctl_servers > 16 ? 16 : rc->gpuctl_servers;
    if (!g->d.ram || !g->mem) return GPUMEM_ENOMEM;
    if (rc->virtual_start) return GPUMEM_EINVAL;
    return gpumem_swctl_gpu_init(g->mem, bytes, &g->d);
}

static void gpuctl_rig_start(gpuctl_rig *g) {
    uint32_t i;
    gpuctl_rig_now = g;
#if defined(GPUMEM_HOST_WARP)
    host_warp_setup(g->servers);
#endif
    for (i = 0; i < g->servers; i++) {
        g->index[i] = i;
        pthread_create(&g->thread[i], NULL, gpuctl_server, &g->index[i]);
    }
    while (__atomic_load_n(&g->control[1], __ATOMIC_ACQUIRE) < g->servers) sched_yield();
}

static void gpuctl_rig_stop(gpuctl_rig *g, gpumem_target_stats *s) {
    uint32_t i;
    gpumem_swctl_gpu_stop(&g->d);
    for (i = 0; i < g->servers; i++) pthread_join(g->thread[i], NULL);
#if defined(GPUMEM_HOST_WARP)
    host_warp_teardown();
#endif
    gpumem_swctl_gpu_get_stats((gpumem_swctl_gpu *)g->mem, s);
}

static void gpuctl_rig_free(gpuctl_rig *g) {
    free(g->mem);
    free(g->d.ram);
}

static void run_workload(const run_cfg *rc, run_result *r) {
    const uint32_t region = 64;
    gpumem_swctl_config cfg = rc->ctl;
    gpumem_swctl *ctl = NULL;
    gpuctl_rig g;
    gpumem_nvme_qp *pairs[16];
    unsigned char *ram;
    pthread_t *t;
    worker_args *a;
    uint32_t i, j;
    memset(r, 0, sizeof *r);
    memset(&g, 0, sizeof g);
    cfg.lba_bytes = LBA;
    cfg.n_blocks = (uint64_t)rc->threads * region;
    if (rc->pairs < 1 || rc->pairs > 16) r->setup = GPUMEM_EINVAL;
    if (rc->gpuctl_servers) {
        if (!r->setup) r->setup = gpuctl_rig_init(&g, rc, cfg.n_blocks);
        for (i = 0; !r->setup && i < rc->pairs; i++) pairs[i] = gpumem_swctl_gpu_pair(g.mem, i);
    } else {
        if (!r->setup) r->setup = gpumem_swctl_create(&cfg, &ctl);
        for (i = 0; !r->setup && i < rc->pairs; i++)
            r->setup = gpumem_swctl_add_qp_ex(ctl, rc->depth, rc->n_cids ? rc->n_cids : 65536, rc->virtual_start,
                                              &pairs[i]);
    }
    if (r->setup) {
        gpumem_swctl_destroy(ctl);
        gpuctl_rig_free(&g);
        return;
    }
    ram = rc->gpuctl_servers ? (unsigned char *)g.d.ram : (unsigned char *)gpumem_swctl_ram(ctl);
    for (i = 0; i < rc->threads * region; i++) /* initial content: generation 0 */
        fill_block(ram + (size_t)i * LBA, i, 0);
    if (rc->gpuctl_servers) gpuctl_rig_start(&g);
    else gpumem_swctl_start(ctl);
    t = calloc(rc->threads, sizeof *t);
    a = calloc(rc->threads, sizeof *a);
    for (i = 0; i < rc->threads; i++) {
        a[i].pairs = pairs;
        a[i].n_pairs = rc->pairs;
        a[i].id = i;
        a[i].ios = rc->ios;
        a[i].region = region;
        a[i].async_depth = rc->async_depth;
        a[i].expect_error = rc->ctl.error_status;
        a[i].gen = calloc(region, sizeof(uint32_t));
        pthread_create(&t[i], NULL, io_worker, &a[i]);
    }
    for (i = 0; i < rc->threads; i++) {
        pthread_join(t[i], NULL);
        r->issued += a[i].issued;
        r->eio += a[i].eio;
        r->bad_data += a[i].bad_data;
        r->eio_wrong_words += a[i].eio_wrong_words;
        r->worker_failures += a[i].failures;
        if (a[i].first_failure_line && !r->first_failure_line) r->first_failure_line = a[i].first_failure_line;
    }
    if (rc->gpuctl_servers) {
        gpuctl_rig_stop(&g, &r->stats);
    } else {
        gpumem_swctl_stop(ctl);
        gpumem_swctl_get_stats(ctl, &r->stats);
    }
    for (i = 0; i < rc->threads; i++)
        for (j = 0; j < region; j++) {
            uint64_t lba = (uint64_t)i * region + j;
            if (!block_ok(ram + lba * LBA, lba, a[i].gen[j])) r->store_mismatches++;
        }
    for (i = 0; i < rc->pairs; i++) /* every ticket reached the controller and came back */
        if (pairs[i]->tail.v != pairs[i]->ticket.v || pairs[i]->sq_head.v != pairs[i]->tail.v ||
            pairs[i]->cq_head.v - rc->virtual_start != pairs[i]->ticket.v - rc->virtual_start)
            r->unfinished_pairs++;
    for (i = 0; i < rc->threads; i++) free(a[i].gen);
    free(a);
    free(t);
    gpumem_swctl_destroy(ctl);
    gpuctl_rig_free(&g);
}

/* NULL if the run was clean, else what was wrong. */
static const char *run_problem(const run_result *r) {
    static char msg[256];
    if (r->setup) return gpumem_status_str(r->setup);
    if (r->worker_failures)
        snprintf(msg, sizeof msg, "%lu failed checks in workers, first at line %d", (unsigned long)r->worker_failures,
                 r->first_failure_line);
    else if (io_problem(msg, sizeof msg, &r->stats, r->issued, r->bad_data, r->eio, r->eio_wrong_words,
                        r->store_mismatches))
        return msg;
    else if (r->unfinished_pairs)
        snprintf(msg, sizeof msg, "%lu pairs with tickets not all completed", (unsigned long)r->unfinished_pairs);
    else
        return NULL;
    return msg;
}

#endif
