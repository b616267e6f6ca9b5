/* The QEMU conformance test, guest side: gpumem's queue pairs drive QEMU's
 * NVMe controller through the real-controller shim (gpumem_nvmectl_*). Runs
 * as root inside the guest that tests/qemu/run.sh boots; statically linked.
 *
 *   guest_test unbound ADDR       before the device is bound: open must fail
 *   guest_test negative ADDR      controller refusals and a vanishing controller
 *   guest_test run ADDR THREADS COMMANDS
 *                                 the workload: several pairs of small and large
 *                                 depth, THREADS threads, at least COMMANDS
 *                                 commands, every read checked by content
 *   guest_test iommu-uio ADDR     bound to uio_pci_generic under a translating
 *                                 IOMMU: open must refuse, naming vfio-pci
 *   guest_test iommu-run ADDR THREADS COMMANDS UID
 *                                 bound to vfio-pci with the IOMMU on: sets
 *                                 RLIMIT_MEMLOCK, drops to uid/gid UID with no
 *                                 capabilities, runs the workload (odd threads
 *                                 on registered malloc buffers), then the IOMMU
 *                                 negative cases (memlock too small, PRPs at
 *                                 unmapped IOVAs, unregistered buffers)
 *
 *   guest_test uring DEV THREADS COMMANDS
 *                                 the kernel's nvme driver owns the disk: the
 *                                 io_uring passthrough forwarder (gpumem_uring.h)
 *                                 serves pairs over DEV (/dev/ngXnY, local or
 *                                 NVMe-oF); every read checked by content
 *   guest_test uring-fault DEV THREADS COMMANDS PORT_LINK SUBSYSTEM
 *   guest_test uring-multipath DEV THREADS COMMANDS PORT_LINK SUBSYSTEM CTRL_STATE
 *                                 a port's link removed mid-run and restored:
 *                                 one path (uring-fault) or one of two
 *                                 (multipath; comments at the functions)
 *   guest_test bench-uring DEV DEPTH SECONDS [LABEL [VARIANTS]]
 *   guest_test bench-vfio ADDR DEPTH SECONDS
 *                                 make qemu-bench: 4 KiB random reads, DEPTH
 *                                 out at once, through the forwarder (one
 *                                 forwarder thread) or the shim; prints "BENCH"
 *                                 lines (IOPS; latency percentiles)
 *
 * The disk holds block content (lba, generation 0) everywhere when the guest
 * starts (tests/qemu/image.c wrote it). The last WRITE_BLOCKS blocks are
 * split among the threads, each writes only its own part, and the generation
 * table of that area is printed at the end ("GENS" lines) so that the host
 * can check the image file after the guest has powered off.
 *
 * Prints "GPUMEM_QEMU_RESULT PASS ..." or "... FAIL ..."; the harness looks
 * for the line. Counts and rates are figures, never pass conditions. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpumem_nvmectl.h" /* includes gpumem_nvme.h */
#include "gpumem_uring.h"   /* guest_test uring: the io_uring passthrough forwarder */
#include "../block_content.h"

#define MAX_BATCH 32u       /* asynchronous commands a thread has out at once */
#define MAX_NLB 64u         /* blocks per command: up to 32 KiB, 9 pages with an offset */
#define SLOT_BYTES (36u * 1024u) /* data buffer per outstanding command */
#define WRITE_BLOCKS 16384u /* the written area at the end of the disk */
#define IO_TIMEOUT_MS 60000u

static const uint32_t pair_depths[] = {2, 16, 256, 1024};
#define N_PAIRS (sizeof pair_depths / sizeof pair_depths[0])

static int failures;
#define CHECK(cond, ...)                                                                \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            printf("CHECK FAILED line %d: %s: ", __LINE__, #cond);                      \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                         \
        }                                                                               \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* ---- the workload ------------------------------------------------------------ */

typedef struct shared_state {
    gpumem_nvmectl *ctl;
    gpumem_nvme_qp *pairs[N_PAIRS];
    gpumem_nvme_ns ns;
    uint64_t write_base;   /* first block of the written area */
    uint32_t region;       /* written blocks per thread */
    uint64_t per_thread;   /* commands per thread */
    uint32_t *gen;         /* generation of each block of the written area */
    uint64_t done_total;   /* commands completed, all threads (progress) */
    uint32_t registered;   /* threads whose data buffer is registered caller memory */
} shared_state;

typedef struct worker {
    shared_state *sh;
    uint32_t id;
    pthread_t thread;
    uint64_t reads, writes, flushes, blocks, bad_blocks, errors, full_waits;
    uint64_t built; /* commands whose PRPs the pair built (gpumem_nvme_qp_submit_map) */
} worker;

typedef struct pending {
    gpumem_nvme_req req;
    uint64_t lba;
    uint32_t nlb;
    uint32_t gen_or_write; /* reads: unused; writes: the generation written */
    uint32_t is_write;
    size_t off;            /* data offset in the thread's buffer */
} pending;

/* Generation a block should have now (only the owner writes its blocks). */
static uint32_t block_gen(shared_state *sh, uint64_t lba) {
    return lba >= sh->write_base ? sh->gen[lba - sh->write_base] : 0;
}

/* Wait for one pending command and check it. */
static void finish(worker *w, gpumem_nvme_qp *qp, pending *p, gpumem_nvmectl_dma *buf) {
    shared_state *sh = w->sh;
    gpumem_status st = gpumem_nvmectl_wait(sh->ctl, qp, &p->req, IO_TIMEOUT_MS);
    uint32_t k;
    if (st != GPUMEM_OK) {
        w->errors++;
        CHECK(0, "thread %u: %s of %u blocks at %llu on queue %u: %s (%s)", w->id, p->is_write ? "write" : "read",
              p->nlb, (unsigned long long)p->lba, qp->qid, gpumem_status_str(st),
              st == GPUMEM_EIO ? gpumem_nvme_status_str(gpumem_nvme_cpl_status(&p->req.cpl))
                               : gpumem_nvmectl_error(sh->ctl));
        return;
    }
    if (p->is_write) {
        for (k = 0; k < p->nlb; k++) sh->gen[p->lba + k - sh->write_base] = p->gen_or_write;
        w->writes++;
    } else {
        for (k = 0; k < p->nlb; k++) {
            const unsigned char *b = (const unsigned char *)buf->va + p->off + (size_t)k * LBA;
            if (!block_ok(b, p->lba + k, block_gen(sh, p->lba + k))) {
                if (w->bad_blocks++ < 5) {
                    uint64_t found_lba;
                    uint32_t found_gen;
                    memcpy(&found_lba, b, 8);
                    memcpy(&found_gen, b + 8, 4);
                    CHECK(0, "thread %u: block %llu (block %u of %u read on queue %u, command ID %u, buffer offset "
                          "%zu) read back wrong: want generation %u, found block %llu generation %u", w->id,
                          (unsigned long long)(p->lba + k), k, p->nlb, qp->qid, p->req.cid, p->off,
                          block_gen(sh, p->lba + k), (unsigned long long)found_lba, found_gen);
                }
            }
        }
        w->reads++;
    }
    w->blocks += p->nlb;
    __atomic_fetch_add(&sh->done_total, 1, __ATOMIC_RELAXED);
}

/* Submit one read or write through `qp`; if the pair has no free command ID,
 * finish the oldest outstanding command of this batch first. Every other
 * command has its PRPs built by the pair, into the command ID's own PRP-list
 * page (gpumem_nvme_qp_submit_map); the rest by the caller, into this
 * thread's list pages (gpumem_nvmectl_prp). Buffers start at any 512-byte
 * offset, so most transfers span one page more than their length. */
static void submit(worker *w, gpumem_nvme_qp *qp, pending *batch, uint32_t *oldest, uint32_t n,
                   gpumem_nvmectl_dma *buf, gpumem_nvmectl_dma *lists) {
    pending *p = &batch[n];
    gpumem_nvme_cmd cmd;
    uint64_t prp1, prp2;
    gpumem_status st;
    uint32_t k;
    if (p->is_write)
        for (k = 0; k < p->nlb; k++)
            fill_block((unsigned char *)buf->va + p->off + (size_t)k * LBA, p->lba + k, p->gen_or_write);
    else
        memset((char *)buf->va + p->off, 0xEE, (size_t)p->nlb * LBA);
    if ((w->reads + w->writes + n) % 2 == 0) {
        gpumem_nvme_iomap at = gpumem_nvme_iomap_sub(&buf->map, p->off);
        uint8_t op = p->is_write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ;
        while ((st = gpumem_nvme_qp_submit_map(qp, op, p->lba, p->nlb, &at, &p->req)) == GPUMEM_EAGAIN) {
            w->full_waits++;
            if (*oldest < n) finish(w, qp, &batch[(*oldest)++], buf);
            else nanosleep(&(struct timespec){0, 20000L}, NULL);
        }
        CHECK(st == GPUMEM_OK, "submit (PRPs built by the pair): %s", gpumem_status_str(st));
        w->built++;
        return;
    }
    st = gpumem_nvmectl_prp(buf, p->off, (uint64_t)p->nlb * LBA, lists, (size_t)n * GPUMEM_NVME_PAGE_BYTES, &prp1,
                            &prp2);
    CHECK(st == GPUMEM_OK, "PRP setup: %s", gpumem_status_str(st));
    st = gpumem_nvme_cmd_rw(&cmd, p->is_write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ, &w->sh->ns, p->lba,
                            p->nlb, prp1, prp2);
    CHECK(st == GPUMEM_OK, "command build: %s", gpumem_status_str(st));
    if ((st = gpumem_nvme_qp_submit(qp, &cmd, &p->req)) == GPUMEM_EAGAIN) {
        w->full_waits++;
        do { /* other threads hold the pair's IDs: free ours, or give them time */
            if (*oldest < n) finish(w, qp, &batch[(*oldest)++], buf);
            else nanosleep(&(struct timespec){0, 20000L}, NULL);
        } while ((st = gpumem_nvme_qp_submit(qp, &cmd, &p->req)) == GPUMEM_EAGAIN);
    }
    CHECK(st == GPUMEM_OK, "submit: %s", gpumem_status_str(st));
}

static void *worker_main(void *arg) {
    worker *w = (worker *)arg;
    shared_state *sh = w->sh;
    gpumem_nvmectl_dma buf, lists;
    pending batch[MAX_BATCH];
    uint64_t rng = 0x9E3779B97F4A7C15ull * (w->id + 1), issued = 0, round = 0;
    uint64_t own = sh->write_base + (uint64_t)w->id * sh->region;
    gpumem_status st;
    /* Ordinary 4 KiB pages, scattered in physical memory: every transfer
     * over two pages goes through a PRP list of page-by-page addresses. */
    void *own_mem = NULL;
    if (gpumem_nvmectl_uses_vfio(sh->ctl) && w->id % 2 == 1) {
        /* The caller's own memory, registered (mapped once for the device). */
        own_mem = aligned_alloc(GPUMEM_NVME_PAGE_BYTES, MAX_BATCH * SLOT_BYTES);
        CHECK(own_mem != NULL, "malloc");
        if (!own_mem) return NULL;
        st = gpumem_nvmectl_dma_register(sh->ctl, own_mem, MAX_BATCH * SLOT_BYTES, &buf);
        CHECK(st == GPUMEM_OK, "register data buffer: %s: %s", gpumem_status_str(st), gpumem_nvmectl_error(sh->ctl));
        __atomic_fetch_add(&sh->registered, 1, __ATOMIC_RELAXED);
    } else {
        st = gpumem_nvmectl_dma_alloc(sh->ctl, MAX_BATCH * SLOT_BYTES, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &buf);
        CHECK(st == GPUMEM_OK, "data buffer: %s: %s", gpumem_status_str(st), gpumem_nvmectl_error(sh->ctl));
    }
    st = gpumem_nvmectl_dma_alloc(sh->ctl, MAX_BATCH * GPUMEM_NVME_PAGE_BYTES, GPUMEM_NVMECTL_DMA_SMALL_PAGES,
                                  &lists);
    CHECK(st == GPUMEM_OK, "PRP lists: %s", gpumem_status_str(st));
    if (failures) return NULL;
    while (issued < sh->per_thread && !__atomic_load_n(&failures, __ATOMIC_RELAXED)) {
        /* Every batch on the next pair, so all threads share all pairs. */
        gpumem_nvme_qp *qp = sh->pairs[(w->id + round) % N_PAIRS];
        uint32_t n, oldest = 0, kind = (uint32_t)(rng_next(&rng) % 8);
        uint32_t batch_n = 1 + (uint32_t)(rng_next(&rng) % MAX_BATCH);
        round++;
        if (kind == 0 && round % 4 == 0) { /* flush */
            gpumem_nvme_cmd cmd;
            gpumem_nvme_req req;
            gpumem_nvme_cmd_flush(&cmd, &sh->ns);
            while (gpumem_nvme_qp_submit(qp, &cmd, &req) == GPUMEM_EAGAIN)
                nanosleep(&(struct timespec){0, 20000L}, NULL);
            st = gpumem_nvmectl_wait(sh->ctl, qp, &req, IO_TIMEOUT_MS);
            CHECK(st == GPUMEM_OK, "flush: %s", gpumem_status_str(st));
            w->flushes++;
            issued++;
            __atomic_fetch_add(&sh->done_total, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (kind <= 2) { /* writes to own blocks, disjoint ranges, then read them all back */
            uint64_t at = rng_next(&rng) % sh->region, left = sh->region;
            for (n = 0; n < batch_n && left > 0; n++) {
                pending *p = &batch[n];
                uint32_t nlb = 1 + (uint32_t)(rng_next(&rng) % MAX_NLB);
                if (nlb > left) nlb = (uint32_t)left;
                if (at + nlb > sh->region) at = 0; /* keep each range inside the region */
                p->lba = own + at;
                p->nlb = nlb;
                p->is_write = 1;
                p->gen_or_write = block_gen(sh, p->lba) + 1; /* blocks of one range share a generation */
                p->off = (size_t)n * SLOT_BYTES + (rng_next(&rng) % 8) * LBA;
                submit(w, qp, batch, &oldest, n, &buf, &lists);
                at += nlb;
                left -= nlb;
            }
            while (oldest < n) finish(w, qp, &batch[oldest++], &buf);
            issued += n;
            oldest = 0;
            for (uint32_t k = 0; k < n; k++) batch[k].is_write = 0; /* the same ranges, read back */
            for (uint32_t k = 0; k < n; k++) submit(w, qp, batch, &oldest, k, &buf, &lists);
            while (oldest < n) finish(w, qp, &batch[oldest++], &buf);
            issued += n;
            continue;
        }
        /* random reads anywhere: known content or this thread's own blocks */
        for (n = 0; n < batch_n; n++) {
            pending *p = &batch[n];
            uint32_t nlb = 1 + (uint32_t)(rng_next(&rng) % MAX_NLB);
            uint64_t lba;
            if (rng_next(&rng) % 4 == 0) lba = own + rng_next(&rng) % (sh->region - nlb + 1);
            else lba = rng_next(&rng) % (sh->write_base - nlb + 1);
            p->lba = lba;
            p->nlb = nlb;
            p->is_write = 0;
            p->off = (size_t)n * SLOT_BYTES + (rng_next(&rng) % 8) * LBA;
            submit(w, qp, batch, &oldest, n, &buf, &lists);
        }
        while (oldest < n) finish(w, qp, &batch[oldest++], &buf);
        issued += n;
    }
    if (own_mem) gpumem_nvmectl_dma_unregister(&buf);
    else gpumem_nvmectl_dma_free(&buf);
    gpumem_nvmectl_dma_free(&lists);
    free(own_mem);
    return NULL;
}

/* ---- a queue reset under load ------------------------------------------------- */

#define RESET_THREADS 4u
#define RESET_ROUNDS 3u
#define RESET_OPS 600u /* writes per thread (each read back when it completes) */

typedef struct reset_shared {
    shared_state *sh;
    gpumem_nvme_qp *qp;
    uint32_t pause;     /* the main thread asks the workers to leave the pair */
    uint32_t out;       /* workers out of the pair: parked, or through */
    uint32_t *landed;   /* per written-area block: generation of an aborted write, 0 if none */
} reset_shared;

typedef struct reset_worker {
    reset_shared *rs;
    uint32_t id;
    pthread_t thread;
    uint64_t ok, aborted, other;
} reset_worker;

/* A request ended aborted: the pair is being reset. Leave it until the
 * reset is over (the main thread raises `pause` once reset_begin has
 * returned, and lowers it after reset_end). */
static void reset_park(reset_shared *rs) {
    while (!__atomic_load_n(&rs->pause, __ATOMIC_ACQUIRE)) nanosleep(&(struct timespec){0, 1000000L}, NULL);
    __atomic_fetch_add(&rs->out, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&rs->pause, __ATOMIC_ACQUIRE)) nanosleep(&(struct timespec){0, 1000000L}, NULL);
    __atomic_fetch_sub(&rs->out, 1, __ATOMIC_ACQ_REL);
}

/* One command on the reset pair, waited for: OK, EABORTED (the reset met
 * it), or a failure. */
static gpumem_status reset_io(reset_worker *w, uint8_t op, uint64_t lba, gpumem_nvmectl_dma *buf) {
    reset_shared *rs = w->rs;
    gpumem_nvme_req req;
    gpumem_status st;
    while ((st = gpumem_nvme_qp_submit_map(rs->qp, op, lba, 1, &buf->map, &req)) == GPUMEM_EAGAIN)
        nanosleep(&(struct timespec){0, 20000L}, NULL);
    if (st == GPUMEM_OK) st = gpumem_nvmectl_wait(rs->sh->ctl, rs->qp, &req, IO_TIMEOUT_MS);
    if (st == GPUMEM_OK) w->ok++;
    else if (st == GPUMEM_EABORTED) w->aborted++;
    else {
        w->other++;
        CHECK(0, "reset worker %u: %s at %llu: %s", w->id, op == GPUMEM_NVME_OP_WRITE ? "write" : "read",
              (unsigned long long)lba, gpumem_status_str(st));
    }
    return st;
}

static void *reset_worker_main(void *arg) {
    reset_worker *w = (reset_worker *)arg;
    reset_shared *rs = w->rs;
    shared_state *sh = rs->sh;
    const uint64_t own = sh->write_base + (uint64_t)w->id * (WRITE_BLOCKS / RESET_THREADS);
    gpumem_nvmectl_dma buf;
    uint32_t i;
    gpumem_status st = gpumem_nvmectl_dma_alloc(sh->ctl, 4096, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &buf);
    CHECK(st == GPUMEM_OK, "reset worker buffer: %s", gpumem_status_str(st));
    for (i = 0; st == GPUMEM_OK && i < RESET_OPS && !__atomic_load_n(&failures, __ATOMIC_RELAXED); i++) {
        const uint64_t lba = own + i % 64;
        const uint32_t gen = block_gen(sh, lba) + 1;
        gpumem_status got;
        fill_block((unsigned char *)buf.va, lba, gen);
        got = reset_io(w, GPUMEM_NVME_OP_WRITE, lba, &buf);
        if (got == GPUMEM_EABORTED) rs->landed[lba - sh->write_base] = gen; /* on the disk or not */
        if (got == GPUMEM_EABORTED) reset_park(rs);
        if (got != GPUMEM_OK) continue;
        sh->gen[lba - sh->write_base] = gen; /* reported done: must be on the disk */
        rs->landed[lba - sh->write_base] = 0;
        memset(buf.va, 0xEE, LBA);
        got = reset_io(w, GPUMEM_NVME_OP_READ, lba, &buf);
        if (got == GPUMEM_OK)
            CHECK(block_ok((unsigned char *)buf.va, lba, gen), "reset worker %u: block %llu read back wrong", w->id,
                  (unsigned long long)lba);
        if (got == GPUMEM_EABORTED) reset_park(rs);
    }
    gpumem_nvmectl_dma_free(&buf);
    __atomic_fetch_add(&rs->out, 1, __ATOMIC_ACQ_REL); /* out for good */
    return NULL;
}

/* Threads write (and read back) their own blocks through pair 3 while it is
 * reset RESET_ROUNDS times (Delete I/O SQ, Delete I/O CQ, recreate): every
 * request ends with a status, done or aborted, and every write reported
 * done is on the disk, unless a later write of the same block, reported
 * aborted, landed (a write the controller carried out before the SQ went):
 * the guest reads such blocks after the resets and records what is there;
 * the host then checks the whole image against the generation table. */
static void reset_under_load(shared_state *sh) {
    reset_shared rs;
    reset_worker ws[RESET_THREADS];
    uint64_t ok = 0, aborted = 0, other = 0, landed = 0;
    uint32_t i, r;
    gpumem_nvme_qp_stats qs;
    gpumem_nvmectl_dma buf;
    gpumem_status st;
    memset(&rs, 0, sizeof rs);
    memset(ws, 0, sizeof ws);
    rs.sh = sh;
    rs.qp = sh->pairs[2];
    rs.landed = (uint32_t *)calloc(WRITE_BLOCKS, sizeof(uint32_t));
    for (i = 0; i < RESET_THREADS; i++) {
        ws[i].rs = &rs;
        ws[i].id = i;
        pthread_create(&ws[i].thread, NULL, reset_worker_main, &ws[i]);
    }
    for (r = 0; r < RESET_ROUNDS && !failures; r++) {
        double t0;
        nanosleep(&(struct timespec){0, 300000000L}, NULL);
        /* Under load: the workers' requests in flight end aborted, and so
         * does every new call, which sends each worker to park. */
        t0 = now_s();
        st = gpumem_nvmectl_reset_begin(sh->ctl, rs.qp);
        CHECK(st == GPUMEM_OK, "reset_begin: %s: %s", gpumem_status_str(st), gpumem_nvmectl_error(sh->ctl));
        __atomic_store_n(&rs.pause, 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(&rs.out, __ATOMIC_ACQUIRE) < RESET_THREADS)
            nanosleep(&(struct timespec){0, 1000000L}, NULL);
        st = gpumem_nvmectl_reset_end(sh->ctl, rs.qp);
        CHECK(st == GPUMEM_OK, "reset_end: %s: %s", gpumem_status_str(st), gpumem_nvmectl_error(sh->ctl));
        printf("reset %u of queue pair %u under load: %.1f ms\n", r + 1, rs.qp->qid, (now_s() - t0) * 1e3);
        __atomic_store_n(&rs.pause, 0, __ATOMIC_RELEASE);
    }
    for (i = 0; i < RESET_THREADS; i++) pthread_join(ws[i].thread, NULL);
    for (i = 0; i < RESET_THREADS; i++) ok += ws[i].ok, aborted += ws[i].aborted, other += ws[i].other;
    /* Blocks whose last write was aborted: what the disk holds now is the
     * aborted generation or the last one reported done, nothing else. */
    st = gpumem_nvmectl_dma_alloc(sh->ctl, 4096, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &buf);
    CHECK(st == GPUMEM_OK, "buffer: %s", gpumem_status_str(st));
    for (i = 0; st == GPUMEM_OK && i < WRITE_BLOCKS; i++) {
        const uint64_t lba = sh->write_base + i;
        if (!rs.landed[i]) continue;
        st = gpumem_nvme_qp_rw_map(sh->pairs[0], GPUMEM_NVME_OP_READ, lba, 1, &buf.map, NULL);
        CHECK(st == GPUMEM_OK, "read of block %llu after the resets: %s", (unsigned long long)lba,
              gpumem_status_str(st));
        if (st != GPUMEM_OK) break;
        if (block_ok((unsigned char *)buf.va, lba, rs.landed[i])) {
            sh->gen[i] = rs.landed[i];
            landed++;
        } else {
            CHECK(block_ok((unsigned char *)buf.va, lba, sh->gen[i]),
                  "block %llu holds neither the write reported done (generation %u) nor the aborted one (%u)",
                  (unsigned long long)lba, sh->gen[i], rs.landed[i]);
        }
    }
    gpumem_nvmectl_dma_free(&buf);
    memset(&qs, 0, sizeof qs);
    gpumem_nvme_qp_get_stats(rs.qp, &qs);
    printf("reset under load: %u resets, %llu requests done, %llu aborted (%llu aborted writes landed), %llu "
           "failed; the pair counted %u aborted, %u completions dropped\n",
           RESET_ROUNDS, (unsigned long long)ok, (unsigned long long)aborted, (unsigned long long)landed,
           (unsigned long long)other, qs.aborted, qs.dropped);
    CHECK(other == 0, "%llu requests ended with neither a result nor aborted", (unsigned long long)other);
    CHECK(ok > 0, "no request completed around the resets");
    CHECK(qs.dropped == 0, "QEMU's controller sent %u completions the pair dropped", qs.dropped);
    free(rs.landed);
}

static char open_error[320]; /* the reason of the last failed open */

static gpumem_nvmectl *open_ctl(const char *addr, uint32_t nsid, uint32_t max_pairs, gpumem_status *st) {
    gpumem_nvmectl_config cfg = gpumem_nvmectl_config_default();
    gpumem_nvmectl *ctl = NULL;
    cfg.pci_addr = addr;
    cfg.error = open_error;
    cfg.error_bytes = sizeof open_error;
    cfg.nsid = nsid;
    cfg.max_pairs = max_pairs;
    *st = gpumem_nvmectl_open(&cfg, &ctl);
    return ctl;
}

static int run(const char *addr, uint32_t n_threads, uint64_t n_commands) {
    shared_state sh;
    worker *ws = (worker *)calloc(n_threads, sizeof *ws);
    const gpumem_nvmectl_info *in;
    gpumem_status st;
    uint64_t last = 0, reads = 0, writes = 0, flushes = 0, blocks = 0, bad = 0, errors = 0, full = 0, built = 0;
    double t0, t1, tlast;
    uint32_t i;
    memset(&sh, 0, sizeof sh);
    sh.ctl = open_ctl(addr, 1, N_PAIRS, &st);
    if (st != GPUMEM_OK) {
        printf("GPUMEM_QEMU_RESULT FAIL open: %s\n", gpumem_status_str(st));
        return 1;
    }
    printf("opened through %s\n", gpumem_nvmectl_uses_vfio(sh.ctl) ? "VFIO (IOVA-mapped DMA)" :
           "sysfs (physical addresses)");
    in = gpumem_nvmectl_get_info(sh.ctl);
    printf("controller %04x \"%s\" serial \"%s\" firmware \"%s\" version %u.%u: MQES+1 %u, doorbell stride %u, "
           "ready timeout %u ms, MDTS %llu bytes, %u namespace IDs, %u pairs granted\n",
           in->vid, in->model, in->serial, in->firmware, in->version >> 16, (in->version >> 8) & 0xFF,
           in->max_queue_entries, in->doorbell_stride, in->ready_timeout_ms,
           (unsigned long long)in->max_transfer_bytes, in->n_namespaces, in->pairs_granted);
    printf("namespace %u: %llu blocks of %u bytes, at most %u blocks per command\n", in->ns.nsid,
           (unsigned long long)in->ns.n_blocks, 1u << in->ns.lba_shift, in->ns.max_blocks);
    sh.ns = in->ns;
    CHECK(in->ns.lba_shift == 9, "the test image uses 512-byte blocks");
    CHECK(in->ns.n_blocks > 2 * WRITE_BLOCKS, "the disk is too small");
    CHECK(in->ns.max_blocks >= MAX_NLB, "MDTS below %u blocks", MAX_NLB);
    for (i = 0; i < N_PAIRS && !failures; i++) {
        st = gpumem_nvmectl_add_qp(sh.ctl, pair_depths[i], &sh.pairs[i]);
        CHECK(st == GPUMEM_OK, "queue pair %u of depth %u: %s: %s", i + 1, pair_depths[i], gpumem_status_str(st),
              gpumem_nvmectl_error(sh.ctl));
    }
    if (failures) {
        gpumem_nvmectl_close(sh.ctl);
        printf("GPUMEM_QEMU_RESULT FAIL setup\n");
        return 1;
    }
    sh.write_base = in->ns.n_blocks - WRITE_BLOCKS;
    sh.region = WRITE_BLOCKS / n_threads;
    sh.per_thread = (n_commands + n_threads - 1) / n_threads;
    sh.gen = (uint32_t *)calloc(WRITE_BLOCKS, sizeof(uint32_t));
    printf("%u threads, %zu pairs of depth 2, 16, 256, 1024, %llu commands each\n", n_threads, (size_t)N_PAIRS,
           (unsigned long long)sh.per_thread);
    fflush(stdout);
    t0 = tlast = now_s();
    for (i = 0; i < n_threads; i++) {
        ws[i].sh = &sh;
        ws[i].id = i;
        pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
    }
    /* Progress every few seconds while the workers run. */
    for (;;) {
        uint64_t done = __atomic_load_n(&sh.done_total, __ATOMIC_RELAXED);
        double t = now_s();
        if (done >= sh.per_thread * n_threads || failures) break;
        if (t - tlast >= 5.0) {
            printf("progress: %llu commands, %.0f/s\n", (unsigned long long)done, (double)(done - last) / (t - tlast));
            fflush(stdout);
            last = done, tlast = t;
        }
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    for (i = 0; i < n_threads; i++) pthread_join(ws[i].thread, NULL);
    t1 = now_s();
    for (i = 0; i < n_threads; i++) {
        reads += ws[i].reads, writes += ws[i].writes, flushes += ws[i].flushes, blocks += ws[i].blocks;
        bad += ws[i].bad_blocks, errors += ws[i].errors, full += ws[i].full_waits, built += ws[i].built;
    }
    for (i = 0; i < N_PAIRS; i++)
        printf("pair %u (depth %u): %u SQ doorbell writes, %u CQ doorbell writes\n", sh.pairs[i]->qid,
               sh.pairs[i]->depth, sh.pairs[i]->sq_doorbell_writes.v, sh.pairs[i]->cq_doorbell_writes.v);
    printf("commands: %llu (reads %llu, writes %llu, flushes %llu), %llu blocks, %.1f s, %.0f commands/s; "
           "%llu submits found no free command ID at first\n",
           (unsigned long long)(reads + writes + flushes), (unsigned long long)reads, (unsigned long long)writes,
           (unsigned long long)flushes, (unsigned long long)blocks, t1 - t0, (reads + writes + flushes) / (t1 - t0),
           (unsigned long long)full);
    printf("buffers at 512-byte page offsets; %llu commands with PRPs (and PRP lists) built by the pair from the "
           "buffer's I/O map; %u threads on registered caller memory\n", (unsigned long long)built, sh.registered);
    CHECK(built > 0, "no command used the pair's PRP builder");
    CHECK(bad == 0, "%llu blocks read back wrong", (unsigned long long)bad);
    CHECK(errors == 0, "%llu commands failed", (unsigned long long)errors);
    CHECK(reads + writes + flushes >= n_commands, "ran %llu of %llu commands",
          (unsigned long long)(reads + writes + flushes), (unsigned long long)n_commands);
    if (!failures) reset_under_load(&sh);
    st = gpumem_nvmectl_close(sh.ctl);
    CHECK(st == GPUMEM_OK, "close (delete queues, shutdown): %s", gpumem_status_str(st));
    /* The generation of every written block, for the host's check of the image. */
    for (i = 0; i < WRITE_BLOCKS; i += 64) {
        uint32_t k;
        printf("GENS %llu", (unsigned long long)(sh.write_base + i));
        for (k = 0; k < 64 && i + k < WRITE_BLOCKS; k++) printf(" %x", sh.gen[i + k]);
        printf("\n");
    }
    printf("GPUMEM_QEMU_RESULT %s commands=%llu reads=%llu writes=%llu flushes=%llu rate=%.0f/s failures=%d\n",
           failures ? "FAIL" : "PASS", (unsigned long long)(reads + writes + flushes), (unsigned long long)reads,
           (unsigned long long)writes, (unsigned long long)flushes, (reads + writes + flushes) / (t1 - t0), failures);
    return failures ? 1 : 0;
}

/* ---- negative tests ------------------------------------------------------------ */

#define EXPECT_STATUS(got, want, what)                                                                     \
    do {                                                                                                   \
        gpumem_status got_ = (got);                                                                        \
        printf("negative: %-58s -> %s%s\n", what, gpumem_status_str(got_), got_ == (want) ? "" : "  (WRONG)"); \
        CHECK(got_ == (want), "%s: want %s", what, gpumem_status_str(want));                              \
    } while (0)

static int unbound(const char *addr) {
    gpumem_status st;
    gpumem_nvmectl *ctl = open_ctl("0000:00:1f.7", 1, 1, &st);
    EXPECT_STATUS(st, GPUMEM_ENODEV, "open a PCI address with no device");
    CHECK(ctl == NULL, "no handle on failure");
    ctl = open_ctl(addr, 1, 1, &st);
    EXPECT_STATUS(st, GPUMEM_ENODEV, "open the controller before it is bound");
    CHECK(ctl == NULL, "no handle on failure");
    printf("GPUMEM_QEMU_RESULT %s unbound failures=%d\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

/* The harness boots this with max_ioqpairs=2. */
static int negative(const char *addr) {
    gpumem_status st;
    gpumem_nvmectl *ctl;
    gpumem_nvme_qp *qp[3];
    gpumem_nvme_cmd cmd;
    gpumem_nvme_cpl cpl;
    gpumem_nvme_req req;
    gpumem_nvmectl_dma buf;
    uint64_t prp1, prp2;

    ctl = open_ctl(addr, 2, 2, &st);
    EXPECT_STATUS(st, GPUMEM_ENODEV, "namespace 2 (a valid ID, not active)");
    ctl = open_ctl(addr, 4096, 2, &st);
    EXPECT_STATUS(st, GPUMEM_EIO, "namespace 4096 (controller refuses Identify)");

    ctl = open_ctl(addr, 1, 4, &st);
    EXPECT_STATUS(st, GPUMEM_OK, "open namespace 1 asking for 4 pairs");
    if (!ctl) goto out;
    printf("negative: pairs granted: %u\n", gpumem_nvmectl_get_info(ctl)->pairs_granted);
    CHECK(gpumem_nvmectl_get_info(ctl)->pairs_granted == 2, "QEMU runs with max_ioqpairs=2");
    EXPECT_STATUS(gpumem_nvmectl_add_qp(ctl, 3, &qp[0]), GPUMEM_EINVAL, "pair of depth 3");
    EXPECT_STATUS(gpumem_nvmectl_add_qp(ctl, 1u << 16, &qp[0]), GPUMEM_EINVAL, "pair deeper than CAP.MQES");
    EXPECT_STATUS(gpumem_nvmectl_add_qp(ctl, 16, &qp[0]), GPUMEM_OK, "pair 1");
    EXPECT_STATUS(gpumem_nvmectl_add_qp(ctl, 16, &qp[1]), GPUMEM_OK, "pair 2");
    EXPECT_STATUS(gpumem_nvmectl_add_qp(ctl, 16, &qp[2]), GPUMEM_ERANGE, "pair 3 (two granted)");

    /* Queue creation the controller refuses (the shim's add_qp does not send these). */
    {
        gpumem_nvmectl_dma ring;
        st = gpumem_nvmectl_dma_alloc(ctl, 4096, GPUMEM_NVMECTL_DMA_CONTIGUOUS, &ring);
        CHECK(st == GPUMEM_OK, "ring: %s", gpumem_status_str(st));
        gpumem__cmd_clear(&cmd);
        cmd.cdw0 = 0x05; /* Create I/O CQ 3: past the controller's queues */
        cmd.prp1 = gpumem_nvme_iomap_at(&ring.map, 0);
        cmd.cdw10 = (15u << 16) | 3u;
        cmd.cdw11 = 1;
        EXPECT_STATUS(gpumem_nvmectl_admin(ctl, &cmd, &cpl), GPUMEM_EIO, "Create I/O CQ 3 (controller refuses)");
        printf("negative:   status: %s\n", gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)));
        CHECK(GPUMEM_NVME_SCT(gpumem_nvme_cpl_status(&cpl)) == 1 && GPUMEM_NVME_SC(gpumem_nvme_cpl_status(&cpl)) == 1,
              "invalid queue identifier");
        gpumem__cmd_clear(&cmd);
        cmd.cdw0 = 0x01; /* Create I/O SQ 2 on CQ 9, which does not exist */
        cmd.prp1 = gpumem_nvme_iomap_at(&ring.map, 0);
        cmd.cdw10 = (15u << 16) | 2u;
        cmd.cdw11 = (9u << 16) | 1u;
        EXPECT_STATUS(gpumem_nvmectl_admin(ctl, &cmd, &cpl), GPUMEM_EIO, "Create I/O SQ on CQ 9 (refused)");
        printf("negative:   status: %s\n", gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)));
        CHECK(GPUMEM_NVME_SCT(gpumem_nvme_cpl_status(&cpl)) == 1 && GPUMEM_NVME_SC(gpumem_nvme_cpl_status(&cpl)) == 0,
              "completion queue invalid");
        gpumem_nvmectl_dma_free(&ring);
    }

    /* An I/O command the controller completes with an error: a read past the
     * namespace's end (the command builder would refuse it, so widen its view). */
    st = gpumem_nvmectl_dma_alloc(ctl, 4096, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &buf);
    CHECK(st == GPUMEM_OK, "buffer: %s", gpumem_status_str(st));
    {
        gpumem_nvme_ns wide = qp[0]->ns;
        wide.n_blocks += 100;
        gpumem_nvmectl_prp(&buf, 0, LBA, NULL, 0, &prp1, &prp2);
        gpumem_nvme_cmd_read(&cmd, &wide, qp[0]->ns.n_blocks + 10, 1, prp1, prp2);
        CHECK(gpumem_nvme_qp_submit(qp[0], &cmd, &req) == GPUMEM_OK, "submit");
        EXPECT_STATUS(gpumem_nvmectl_wait(ctl, qp[0], &req, 10000), GPUMEM_EIO, "read past the namespace's end");
        printf("negative:   status: %s\n", gpumem_nvme_status_str(gpumem_nvme_cpl_status(&req.cpl)));
        CHECK(GPUMEM_NVME_SCT(gpumem_nvme_cpl_status(&req.cpl)) == 0 && GPUMEM_NVME_SC(gpumem_nvme_cpl_status(&req.cpl)) == 0x80,
              "LBA out of range");
        /* and the pair still works */
        gpumem_nvme_cmd_read(&cmd, &qp[0]->ns, 0, 1, prp1, prp2);
        CHECK(gpumem_nvme_qp_submit(qp[0], &cmd, &req) == GPUMEM_OK, "submit");
        EXPECT_STATUS(gpumem_nvmectl_wait(ctl, qp[0], &req, 10000), GPUMEM_OK, "read block 0 after the error");
        CHECK(block_ok((unsigned char *)buf.va, 0, 0), "block 0 content");
    }

    /* The controller vanishes from the bus's point of view: bus mastering off,
     * so it cannot fetch the next command. QEMU's controller then reports
     * fatal status; the wait must end with a status, not hang. */
    {
        char path[128];
        unsigned char c2[2];
        int fd;
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/config", addr);
        fd = open(path, O_RDWR);
        CHECK(fd >= 0 && pread(fd, c2, 2, 4) == 2, "read PCI command register");
        c2[0] &= (unsigned char)~0x4;
        CHECK(pwrite(fd, c2, 2, 4) == 2, "clear bus master");
        close(fd);
        gpumem_nvme_cmd_read(&cmd, &qp[1]->ns, 0, 1, prp1, prp2);
        CHECK(gpumem_nvme_qp_submit(qp[1], &cmd, &req) == GPUMEM_OK, "submit");
        st = gpumem_nvmectl_wait(ctl, qp[1], &req, 5000);
        printf("negative: %-58s -> %s (%s)\n", "read after bus mastering was turned off", gpumem_status_str(st),
               gpumem_nvmectl_error(ctl));
        CHECK(st == GPUMEM_EIO || st == GPUMEM_ETIMEDOUT || st == GPUMEM_ENODEV, "a failure status");
        EXPECT_STATUS(gpumem_nvmectl_check(ctl), st == GPUMEM_ETIMEDOUT ? GPUMEM_OK : st, "controller check");
    }
    gpumem_nvmectl_dma_free(&buf);
    st = gpumem_nvmectl_close(ctl);
    printf("negative: %-58s -> %s\n", "close the failed controller (returns, no hang)", gpumem_status_str(st));
out:
    printf("GPUMEM_QEMU_RESULT %s negative failures=%d\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

/* ---- the IOMMU boot ------------------------------------------------------------ */

/* Bound to uio_pci_generic while the IOMMU translates: refused at open, at
 * once, and the caller can read why. */
static int iommu_uio(const char *addr) {
    gpumem_status st;
    double t0 = now_s();
    gpumem_nvmectl *ctl = open_ctl(addr, 1, 1, &st);
    printf("iommu-uio: open under uio_pci_generic -> %s after %.3f s: \"%s\"\n", gpumem_status_str(st),
           now_s() - t0, open_error);
    CHECK(st == GPUMEM_ENODEV && ctl == NULL, "refused with ENODEV");
    /* refused before the controller was touched (not after a DMA fault,
     * which also ends in ENODEV and names vfio-pci) */
    CHECK(strstr(open_error, "translates DMA") && strstr(open_error, "bind the device to vfio-pci"),
          "the message names the translating IOMMU and the fix");
    if (ctl) gpumem_nvmectl_close(ctl);
    printf("GPUMEM_QEMU_RESULT %s iommu-uio failures=%d\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

int setgroups(size_t n, const gid_t *groups); /* <grp.h> hides it from strict POSIX */

/* Root sets the memlock limit, then the program becomes an ordinary user:
 * uid and gid `uid`, no supplementary groups, no capabilities. */
static int drop_root(uint32_t uid, rlim_t memlock) {
    struct rlimit rl = {memlock, memlock};
    char line[256];
    FILE *f;
    int caps_zero = 0;
    CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit(RLIMIT_MEMLOCK)");
    CHECK(setgroups(0, NULL) == 0 && setgid((gid_t)uid) == 0 && setuid((uid_t)uid) == 0, "drop to uid %u", uid);
    CHECK(getuid() == uid && geteuid() == uid && getgid() == uid && getegid() == uid, "uid/gid %u", uid);
    f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "CapEff:", 7) == 0 || strncmp(line, "CapPrm:", 7) == 0) {
            printf("iommu-run: %s", line);
            caps_zero += strtoull(line + 7, NULL, 16) == 0;
        }
    if (f) fclose(f);
    CHECK(caps_zero == 2, "no capabilities left");
    printf("iommu-run: running as uid %u gid %u, RLIMIT_MEMLOCK %llu KiB\n", (unsigned)getuid(), (unsigned)getgid(),
           (unsigned long long)memlock >> 10);
    return failures ? 1 : 0;
}

static int all_bytes(const void *p, size_t n, unsigned char v);

/* Device memory standing in for a GPU's BAR1: QEMU's ivshmem-plain (1af4:1110)
 * BAR2, mapped by root through its sysfs resource file (a VM_PFNMAP mapping,
 * as GDRCopy's mapping of GPU memory is), and kept after dropping root. */
static unsigned char *p2p_mem;
static size_t p2p_bytes;

static void p2p_map_as_root(void) {
    char path[160];
    unsigned char cmd[2];
    struct stat sb;
    int fd, found = 0;
    for (int slot = 0; slot < 32 && !found; slot++) {
        char id[16] = "";
        FILE *f;
        snprintf(path, sizeof path, "/sys/bus/pci/devices/0000:00:%02x.0/vendor", slot);
        if (!(f = fopen(path, "r"))) continue;
        found = fgets(id, sizeof id, f) && strncmp(id, "0x1af4", 6) == 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/bus/pci/devices/0000:00:%02x.0/device", slot);
        if (found && (f = fopen(path, "r"))) {
            found = fgets(id, sizeof id, f) && strncmp(id, "0x1110", 6) == 0;
            fclose(f);
        }
        if (found) snprintf(path, sizeof path, "/sys/bus/pci/devices/0000:00:%02x.0/", slot);
    }
    if (!found) {
        printf("iommu-p2p: no ivshmem device, skipped\n");
        return;
    }
    /* memory decoding on, or the BAR is not in the address space */
    strcat(path, "config");
    fd = open(path, O_RDWR);
    CHECK(fd >= 0 && pread(fd, cmd, 2, 4) == 2, "read the command register");
    cmd[0] |= 2;
    CHECK(fd >= 0 && pwrite(fd, cmd, 2, 4) == 2, "memory decoding on");
    if (fd >= 0) close(fd);
    strcpy(strrchr(path, '/') + 1, "resource2");
    fd = open(path, O_RDWR);
    CHECK(fd >= 0 && fstat(fd, &sb) == 0, "open %s", path);
    if (fd < 0) return;
    p2p_bytes = (size_t)sb.st_size;
    p2p_mem = (unsigned char *)mmap(NULL, p2p_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(p2p_mem != MAP_FAILED, "mmap %s", path);
    if (p2p_mem == MAP_FAILED) p2p_mem = NULL;
    else printf("iommu-p2p: device memory (ivshmem BAR2, %zu KiB) mapped from %s\n", p2p_bytes >> 10, path);
}

/* The SSD reads straight into device memory: the PFNMAP mapping registered
 * with the container (VFIO type1 follows its page frames; nothing is pinned
 * or counted against RLIMIT_MEMLOCK), PRPs built by the pair. */
static void p2p_read(gpumem_nvmectl *ctl, gpumem_nvme_qp *qp) {
    gpumem_nvmectl_dma dev;
    gpumem_nvme_req req;
    gpumem_status st;
    uint32_t k, nlb = 64, bad = 0;
    if (!p2p_mem) return;
    memset(p2p_mem, 0x5A, p2p_bytes);
    st = gpumem_nvmectl_dma_register(ctl, p2p_mem, p2p_bytes, &dev);
    printf("iommu-p2p: %-58s -> %s%s%s\n", "register the device-memory mapping", gpumem_status_str(st),
           st ? ": " : "", st ? gpumem_nvmectl_error(ctl) : "");
    CHECK(st == GPUMEM_OK, "register device memory");
    if (st != GPUMEM_OK) return;
    {
        gpumem_nvme_iomap at = gpumem_nvme_iomap_sub(&dev.map, 4096 + 512);
        CHECK(gpumem_nvme_qp_submit_map(qp, GPUMEM_NVME_OP_READ, 1000, nlb, &at, &req) == GPUMEM_OK, "submit");
    }
    st = gpumem_nvmectl_wait(ctl, qp, &req, 10000);
    printf("iommu-p2p: %-58s -> %s\n", "read 32 KiB from the SSD into device memory", gpumem_status_str(st));
    CHECK(st == GPUMEM_OK, "p2p read");
    for (k = 0; k < nlb; k++) bad += !block_ok(p2p_mem + 4096 + 512 + (size_t)k * LBA, 1000 + k, 0);
    CHECK(bad == 0, "%u blocks wrong in device memory", bad);
    CHECK(all_bytes(p2p_mem, 4096 + 512, 0x5A) && all_bytes(p2p_mem + 4096 + 512 + nlb * LBA,
          p2p_bytes - 4096 - 512 - nlb * LBA, 0x5A), "nothing around it changed");
    printf("iommu-p2p: %u of %u blocks right in device memory\n", nlb - bad, nlb);
    gpumem_nvmectl_dma_unregister(&dev);
}

static int all_bytes(const void *p, size_t n, unsigned char v) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

/* After the workload, still as the ordinary user. */
static int iommu_negative(const char *addr) {
    struct rlimit rl, small;
    gpumem_status st;
    gpumem_nvmectl *ctl;
    gpumem_nvme_qp *qp = NULL;
    gpumem_nvmectl_dma a, b;
    gpumem_nvme_cmd cmd;
    gpumem_nvme_req req;
    unsigned char *own, *stray;
    uint64_t iova, far_iova = 0x7e00000000ull;

    /* 1. RLIMIT_MEMLOCK too small for the admin rings and the Identify page. */
    getrlimit(RLIMIT_MEMLOCK, &rl);
    small = rl;
    small.rlim_cur = 8 << 10;
    CHECK(setrlimit(RLIMIT_MEMLOCK, &small) == 0, "lower the soft limit");
    ctl = open_ctl(addr, 1, 1, &st);
    printf("iommu-negative: open with RLIMIT_MEMLOCK 8 KiB -> %s: \"%s\"\n", gpumem_status_str(st), open_error);
    CHECK(st == GPUMEM_ENOMEM && ctl == NULL, "refused with ENOMEM");
    CHECK(strstr(open_error, "RLIMIT_MEMLOCK") && strstr(open_error, "needs at least"), "message names the limit");
    CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "restore the soft limit");
    if (ctl) gpumem_nvmectl_close(ctl);

    ctl = open_ctl(addr, 1, 1, &st);
    CHECK(st == GPUMEM_OK, "open: %s: %s", gpumem_status_str(st), open_error);
    if (!ctl) goto out;
    CHECK(gpumem_nvmectl_uses_vfio(ctl), "opened through VFIO");
    st = gpumem_nvmectl_add_qp(ctl, 16, &qp);
    CHECK(st == GPUMEM_OK, "pair: %s", gpumem_status_str(st));
    /* a: dma_alloc memory; b: the caller's memory, registered. Both get a
     * pattern that no command below may change. */
    st = gpumem_nvmectl_dma_alloc(ctl, 16384, 0, &a);
    CHECK(st == GPUMEM_OK, "dma_alloc: %s", gpumem_status_str(st));
    own = (unsigned char *)aligned_alloc(4096, 16384);
    stray = (unsigned char *)malloc(4096);
    st = gpumem_nvmectl_dma_register(ctl, own + 512, 8192, &b); /* any offset: its pages are mapped */
    CHECK(st == GPUMEM_OK, "register: %s", gpumem_status_str(st));
    if (failures || !qp) goto close;
    memset(a.va, 0x5A, 16384);
    memset(own, 0x5A, 16384);

    /* 2. Only registered memory has an I/O address. */
    EXPECT_STATUS(gpumem_nvmectl_iova(ctl, stray, 4096, &iova), GPUMEM_ERANGE, "I/O address of an unregistered buffer");
    EXPECT_STATUS(gpumem_nvmectl_iova(ctl, own + 600, 1024, &iova), GPUMEM_OK, "I/O address inside a registered one");
    CHECK(iova == gpumem_nvme_iomap_at(&b.map, 88), "the registered map's address");
    EXPECT_STATUS(gpumem_nvmectl_iova(ctl, (char *)a.va + 16000, 1000, &iova), GPUMEM_ERANGE,
                  "I/O address running past a mapping");

    /* 3. A read whose PRP list lies at an unmapped IOVA: the controller
     * cannot fetch the list, the command ends with an error status, and no
     * byte of any mapped buffer changes. */
    gpumem_nvme_cmd_read(&cmd, &qp->ns, 0, 32, gpumem_nvme_iomap_at(&a.map, 0), far_iova);
    printf("NEGATIVE_IOVA 0x%llx\n", (unsigned long long)far_iova);
    CHECK(gpumem_nvme_qp_submit(qp, &cmd, &req) == GPUMEM_OK, "submit");
    st = gpumem_nvmectl_wait(ctl, qp, &req, 10000);
    printf("iommu-negative: %-58s -> %s (%s)\n", "read of 16 KiB, its PRP list at an unmapped IOVA",
           gpumem_status_str(st), st == GPUMEM_EIO ? gpumem_nvme_status_str(gpumem_nvme_cpl_status(&req.cpl))
                                                   : gpumem_nvmectl_error(ctl));
    CHECK(st == GPUMEM_EIO, "an error status");
    printf("NEGATIVE_CID %u\n", req.cid); /* QEMU traces the error status by command ID */
    CHECK(all_bytes(a.va, 16384, 0x5A) && all_bytes(own, 16384, 0x5A), "no byte of the mapped buffers changed");

    /* 4. A read whose data page is the unmapped guard page right after a
     * mapping: the IOMMU drops the write; whatever status the controller
     * gives, nothing mapped may change. */
    iova = a.map_iova_ + a.mapped_bytes_;
    printf("NEGATIVE_IOVA 0x%llx\n", (unsigned long long)iova);
    gpumem_nvme_cmd_read(&cmd, &qp->ns, 0, 8, iova, 0);
    CHECK(gpumem_nvme_qp_submit(qp, &cmd, &req) == GPUMEM_OK, "submit");
    st = gpumem_nvmectl_wait(ctl, qp, &req, 10000);
    printf("iommu-negative: %-58s -> %s (%s)\n", "read of 4 KiB into the guard page after a buffer",
           gpumem_status_str(st), st == GPUMEM_EIO ? gpumem_nvme_status_str(gpumem_nvme_cpl_status(&req.cpl))
                                                   : st == GPUMEM_OK ? "completed; the IOMMU dropped the data"
                                                                     : gpumem_nvmectl_error(ctl));
    CHECK(st == GPUMEM_OK || st == GPUMEM_EIO, "the command ends with a status");
    if (st == GPUMEM_EIO) printf("NEGATIVE_CID %u\n", req.cid);
    CHECK(all_bytes(a.va, 16384, 0x5A) && all_bytes(own, 16384, 0x5A), "no byte of the mapped buffers changed");

    /* The pair and the mappings still work: block 0 into the registered buffer. */
    CHECK(gpumem_nvme_qp_submit_map(qp, GPUMEM_NVME_OP_READ, 0, 1, &b.map, &req) == GPUMEM_OK, "submit");
    EXPECT_STATUS(gpumem_nvmectl_wait(ctl, qp, &req, 10000), GPUMEM_OK, "read block 0 into the registered buffer");
    CHECK(block_ok(own + 512, 0, 0), "block 0 content");
    CHECK(all_bytes(own, 512, 0x5A) && all_bytes(own + 1024, 16384 - 1024, 0x5A), "nothing around it changed");
    p2p_read(ctl, qp);
close:
    gpumem_nvmectl_dma_unregister(&b);
    EXPECT_STATUS(gpumem_nvmectl_iova(ctl, own + 600, 16, &iova), GPUMEM_ERANGE, "I/O address after unregister");
    gpumem_nvmectl_dma_free(&a);
    st = gpumem_nvmectl_close(ctl);
    EXPECT_STATUS(st, GPUMEM_OK, "close");
    free(own);
    free(stray);
out:
    printf("GPUMEM_QEMU_RESULT %s iommu-negative failures=%d\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

/* ---- the io_uring passthrough forwarder (gpumem_uring.h) ----------------------- */

static const uint32_t uring_depths[] = {2, 16, 256};
#define URING_PAIRS 3u

typedef struct uring_worker {
    gpumem_nvme_qp **pairs;
    gpumem_nvme_ns ns;
    uint64_t write_base, per_thread;
    uint32_t region, id, *gen;
    uint64_t reads, writes, flushes, blocks, bad, errors, issued;
    pthread_t thread;
} uring_worker;

/* Wait for one command of the batch and check it by content. */
static void uring_finish(uring_worker *w, gpumem_nvme_qp *qp, pending *p, const unsigned char *buf) {
    gpumem_status st = gpumem_nvme_qp_wait_timed(qp, &p->req, (uint64_t)IO_TIMEOUT_MS * 1000000ull);
    uint32_t k;
    w->issued++;
    if (st != GPUMEM_OK) {
        w->errors++;
        CHECK(0, "thread %u: %s of %u blocks at %llu on pair %u: %s (%s)", w->id, p->is_write ? "write" : "read",
              p->nlb, (unsigned long long)p->lba, qp->qid, gpumem_status_str(st),
              gpumem_nvme_status_str(gpumem_nvme_cpl_status(&p->req.cpl)));
        return;
    }
    w->blocks += p->nlb;
    if (p->is_write) {
        for (k = 0; k < p->nlb; k++) w->gen[p->lba + k - w->write_base] = p->gen_or_write;
        w->writes++;
        return;
    }
    w->reads++;
    for (k = 0; k < p->nlb; k++) {
        uint64_t lba = p->lba + k;
        uint32_t want = lba >= w->write_base ? w->gen[lba - w->write_base] : 0;
        if (!block_ok(buf + p->off + (size_t)k * LBA, lba, want) && w->bad++ < 5)
            CHECK(0, "thread %u: block %llu read back wrong (want generation %u)", w->id, (unsigned long long)lba,
                  want);
    }
}

/* Batches of up to MAX_BATCH asynchronous commands on one pair, from
 * buffers at 512-byte offsets in ordinary pages (PRP lists); writes to the
 * thread's own blocks are read back after they complete. */
static void *uring_worker_main(void *arg) {
    uring_worker *w = (uring_worker *)arg;
    unsigned char *buf = (unsigned char *)aligned_alloc(4096, MAX_BATCH * SLOT_BYTES);
    pending batch[MAX_BATCH];
    uint64_t rng = 0x9E3779B97F4A7C15ull * (w->id + 7), round = 0;
    uint64_t own = w->write_base + (uint64_t)w->id * w->region;
    CHECK(buf != NULL, "malloc");
    while (buf && w->issued < w->per_thread && !__atomic_load_n(&failures, __ATOMIC_RELAXED)) {
        gpumem_nvme_qp *qp = w->pairs[(w->id + round++) % URING_PAIRS];
        uint32_t n, k, j, kind = (uint32_t)(rng_next(&rng) % 8), batch_n = 1 + (uint32_t)(rng_next(&rng) % MAX_BATCH);
        int writing = kind <= 2;
        gpumem_status st;
        if (kind == 7) {
            gpumem_nvme_cpl cpl;
            st = gpumem_nvme_qp_flush(qp, &cpl);
            CHECK(st == GPUMEM_OK, "thread %u: flush: %s", w->id, gpumem_status_str(st));
            w->flushes++, w->issued++;
            continue;
        }
        for (j = 0; j < (writing ? 2u : 1u); j++) { /* writes, then the same ranges read back */
            uint64_t at = rng_next(&rng) % w->region;
            uint32_t oldest = 0;
            for (n = 0; n < batch_n; n++) {
                pending *p = &batch[n];
                if (j == 0) {
                    p->nlb = 1 + (uint32_t)(rng_next(&rng) % MAX_NLB);
                    p->off = (size_t)n * SLOT_BYTES + (rng_next(&rng) % 8) * LBA;
                    if (writing) {
                        if (at + p->nlb > w->region) at = 0;
                        p->lba = own + at;
                        at += p->nlb;
                        p->gen_or_write = w->gen[p->lba - w->write_base] + 1;
                        for (k = 0; k < p->nlb; k++)
                            fill_block(buf + p->off + (size_t)k * LBA, p->lba + k, p->gen_or_write);
                    } else {
                        p->lba = rng_next(&rng) % 4 == 0 ? own + rng_next(&rng) % (w->region - p->nlb + 1)
                                                          : rng_next(&rng) % (w->write_base - p->nlb + 1);
                    }
                }
                p->is_write = writing && j == 0;
                if (!p->is_write) memset(buf + p->off, 0xEE, (size_t)p->nlb * LBA);
                /* no ID free: finish this thread's oldest command first (it may hold them all) */
                while ((st = gpumem_nvme_qp_submit_buf(qp, p->is_write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ,
                                                       p->lba, p->nlb, buf + p->off, &p->req)) == GPUMEM_EAGAIN) {
                    if (oldest < n) uring_finish(w, qp, &batch[oldest++], buf);
                    else nanosleep(&(struct timespec){0, 20000L}, NULL);
                }
                CHECK(st == GPUMEM_OK, "thread %u: submit: %s", w->id, gpumem_status_str(st));
                if (st != GPUMEM_OK) batch_n = n;
                /* a writing batch's ranges must not overlap: stop before the region wraps onto itself */
                if (writing && j == 0 && at + MAX_NLB > w->region && n + 1 < batch_n) batch_n = n + 1;
            }
            while (oldest < batch_n) uring_finish(w, qp, &batch[oldest++], buf);
        }
    }
    free(buf);
    return NULL;
}

static int uring_run(const char *dev, uint32_t n_threads, uint64_t n_commands) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl *ctl = NULL;
    gpumem_nvme_qp *pairs[URING_PAIRS];
    gpumem_uringctl_stats s;
    uring_worker *ws = (uring_worker *)calloc(n_threads, sizeof *ws);
    uint32_t *gen = (uint32_t *)calloc(WRITE_BLOCKS, sizeof *gen);
    uint64_t reads = 0, writes = 0, flushes = 0, blocks = 0, bad = 0, errors = 0;
    gpumem_nvme_ns ns;
    gpumem_status st;
    double t0, t1;
    uint32_t i;
    char why[320] = "";
    cfg.path = dev;
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    st = gpumem_uringctl_open(&cfg, &ctl);
    if (st != GPUMEM_OK) {
        printf("GPUMEM_QEMU_RESULT FAIL uring open %s: %s: %s\n", dev, gpumem_status_str(st), why);
        return 1;
    }
    ns = gpumem_uringctl_ns(ctl);
    printf("uring: %s: kernel namespace %u, %llu blocks of %u bytes, at most %u blocks per command\n", dev,
           gpumem_uringctl_kernel_nsid(ctl), (unsigned long long)ns.n_blocks, 1u << ns.lba_shift, ns.max_blocks);
    CHECK(ns.lba_shift == 9 && ns.n_blocks > 2 * WRITE_BLOCKS && ns.max_blocks >= MAX_NLB,
          "namespace: 512-byte blocks, more than %u blocks, MDTS of %u blocks expected", 2 * WRITE_BLOCKS, MAX_NLB);
    for (i = 0; i < URING_PAIRS && !failures; i++) {
        st = gpumem_uringctl_add_qp(ctl, uring_depths[i], &pairs[i]);
        CHECK(st == GPUMEM_OK, "pair of depth %u: %s", uring_depths[i], gpumem_status_str(st));
    }
    if (!failures) CHECK((st = gpumem_uringctl_start(ctl)) == GPUMEM_OK, "start: %s", gpumem_status_str(st));
    t0 = now_s();
    for (i = 0; i < n_threads && !failures; i++) {
        ws[i].pairs = pairs;
        ws[i].ns = ns;
        ws[i].write_base = ns.n_blocks - WRITE_BLOCKS;
        ws[i].region = WRITE_BLOCKS / n_threads;
        ws[i].per_thread = (n_commands + n_threads - 1) / n_threads;
        ws[i].id = i;
        ws[i].gen = gen;
        pthread_create(&ws[i].thread, NULL, uring_worker_main, &ws[i]);
    }
    for (i = 0; i < n_threads && ws[i].pairs; i++) {
        pthread_join(ws[i].thread, NULL);
        reads += ws[i].reads, writes += ws[i].writes, flushes += ws[i].flushes, blocks += ws[i].blocks;
        bad += ws[i].bad, errors += ws[i].errors;
    }
    t1 = now_s();
    /* The cost of one command: one thread, one 512-byte read at a time. */
    if (!failures) {
        enum { N_QD1 = 200 };
        uint64_t ns_each[N_QD1], t;
        unsigned char *one = (unsigned char *)aligned_alloc(4096, 4096);
        gpumem_nvme_cpl cpl;
        uint32_t a, c;
        for (a = 0; a < N_QD1; a++) {
            t = gpumem_clock_ns();
            st = gpumem_nvme_qp_read_buf(pairs[1], a * 7u, 1, one, &cpl);
            ns_each[a] = gpumem_clock_ns() - t;
            CHECK(st == GPUMEM_OK, "QD1 read: %s", gpumem_status_str(st));
            reads += st == GPUMEM_OK;
        }
        for (a = 1; a < N_QD1; a++) /* insertion sort: 200 values */
            for (c = a; c > 0 && ns_each[c - 1] > ns_each[c]; c--) t = ns_each[c], ns_each[c] = ns_each[c - 1], ns_each[c - 1] = t;
        printf("uring: one 512-byte read at a time, %d reads: median %.0f us, p90 %.0f us, p99 %.0f us\n", N_QD1,
               ns_each[N_QD1 / 2] / 1e3, ns_each[N_QD1 * 9 / 10] / 1e3, ns_each[N_QD1 * 99 / 100] / 1e3);
        free(one);
    }
    if (gpumem_uringctl_stop(ctl) == GPUMEM_OK && gpumem_uringctl_get_stats(ctl, &s) == GPUMEM_OK) {
        printf("uring: forwarded %llu commands in %llu io_uring_enter calls; %llu kernel errors, %llu bad kernel "
               "completions, %llu untranslatable, %llu protocol violations\n", (unsigned long long)s.submitted,
               (unsigned long long)s.enter_calls, (unsigned long long)s.kernel_errors,
               (unsigned long long)s.bad_kernel_cqes, (unsigned long long)s.untranslatable,
               (unsigned long long)s.sw.violations);
        CHECK(s.sw.commands == reads + writes + flushes, "posted %llu completions for %llu commands",
              (unsigned long long)s.sw.commands, (unsigned long long)(reads + writes + flushes));
        CHECK(s.kernel_errors + s.bad_kernel_cqes + s.untranslatable + s.sw.violations == 0, "forwarder counts");
    }
    for (i = 0; i < URING_PAIRS; i++) CHECK(gpumem_nvme_qp_faults(pairs[i]) == 0, "pair %u saw bad completions", i);
    CHECK(bad == 0 && errors == 0, "%llu blocks read back wrong, %llu commands failed", (unsigned long long)bad,
          (unsigned long long)errors);
    CHECK(reads + writes + flushes >= n_commands, "ran %llu of %llu commands",
          (unsigned long long)(reads + writes + flushes), (unsigned long long)n_commands);
    st = gpumem_uringctl_destroy(ctl);
    CHECK(st == GPUMEM_OK, "destroy: %s", gpumem_status_str(st));
    for (i = 0; i < WRITE_BLOCKS; i += 64) {
        uint32_t k;
        printf("GENS %llu", (unsigned long long)(ns.n_blocks - WRITE_BLOCKS + i));
        for (k = 0; k < 64 && i + k < WRITE_BLOCKS; k++) printf(" %x", gen[i + k]);
        printf("\n");
    }
    printf("GPUMEM_QEMU_RESULT %s uring %s commands=%llu reads=%llu writes=%llu flushes=%llu blocks=%llu "
           "rate=%.0f/s failures=%d\n", failures ? "FAIL" : "PASS", dev, (unsigned long long)(reads + writes + flushes),
           (unsigned long long)reads, (unsigned long long)writes, (unsigned long long)flushes,
           (unsigned long long)blocks, (reads + writes + flushes) / (t1 - t0), failures);
    fflush(stdout);
    free(ws);
    free(gen);
    return failures ? 1 : 0;
}

/* ---- the mid-run fault: the target's port removed under the forwarder ------------ */

#define FAULT_BLOCKS 2048u   /* written area at the start of the namespace */
#define FAULT_BATCH 16u      /* asynchronous writes a thread has out at once */
#define FAULT_NLB 8u
#define FAULT_TIMEOUT_MS 3000u /* the pairs' cmd_timeout_ms */
#define FAULT_CHUNK MAX_NLB    /* blocks per command of the first fill and the final read-back */

enum { FAULT_RUN, FAULT_PAUSE, FAULT_END };

typedef struct fault_state {
    gpumem_nvme_qp *pairs[URING_PAIRS];
    uint32_t *done;   /* per block: generation of the last write reported done */
    uint32_t *issued; /* per block: highest generation written (done or failed) */
    uint32_t *lost;   /* per block: lowest failed generation above done (0: none) */
    int phase;        /* atomic */
    uint64_t ok, failed; /* atomic: all threads */
    uint64_t loss_ns;     /* atomic: when the path went (multipath), 0 before */
    uint64_t first_ok_ns; /* atomic: the first write submitted after loss_ns that succeeded */
} fault_state;

typedef struct fault_worker {
    fault_state *fs;
    uint32_t id, region, idle; /* idle: atomic, set while paused with nothing out */
    uint64_t ok, aborted, path, target, timed_out, other, ok_after; /* by how each command ended */
    uint64_t max_wait_ns; /* longest submit-to-end of a command that did not succeed */
    uint64_t leaked;      /* buffers given up with a timed-out write (the kernel may still read them) */
    pthread_t thread;
} fault_worker;

typedef struct fault_cmd {
    gpumem_nvme_req req;
    uint64_t lba, t0;
    uint32_t nlb, gen;
    unsigned char *buf;
} fault_cmd;

static void fault_end(fault_worker *w, gpumem_nvme_qp *qp, fault_cmd *c, int after) {
    fault_state *fs = w->fs;
    gpumem_status st = gpumem_nvme_qp_wait_timed(qp, &c->req, (uint64_t)IO_TIMEOUT_MS * 1000000ull);
    uint64_t waited = gpumem_clock_ns() - c->t0;
    uint16_t sf = gpumem_nvme_cpl_status(&c->req.cpl);
    uint32_t k;
    if (st == GPUMEM_OK) {
        for (k = 0; k < c->nlb; k++) {
            fs->done[c->lba + k] = c->gen;
            fs->lost[c->lba + k] = 0;
        }
        uint64_t loss = __atomic_load_n(&fs->loss_ns, __ATOMIC_ACQUIRE), none = 0;
        w->ok++;
        w->ok_after += after;
        __atomic_fetch_add(&fs->ok, 1, __ATOMIC_RELAXED);
        if (loss && c->t0 > loss)
            __atomic_compare_exchange_n(&fs->first_ok_ns, &none, gpumem_clock_ns(), 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
        return;
    }
    /* Failed: it may still have landed. */
    for (k = 0; k < c->nlb; k++)
        if (!fs->lost[c->lba + k]) fs->lost[c->lba + k] = c->gen;
    if (waited > w->max_wait_ns) w->max_wait_ns = waited;
    if (st == GPUMEM_ETIMEDOUT) {
        /* the kernel may still read this buffer: never reuse it */
        w->timed_out++;
        w->leaked++;
        c->buf = (unsigned char *)aligned_alloc(4096, FAULT_NLB * LBA + 4096);
    } else if (st == GPUMEM_EIO && sf == GPUMEM_NVME_STATUS(3, 0x71)) {
        w->aborted++;
    } else if (st == GPUMEM_EIO && sf == GPUMEM_NVME_STATUS(3, 0x70)) {
        w->path++;
    } else if (st == GPUMEM_EIO) {
        /* the target's own status: nvmet fails a write whose data the
         * torn-down connection cut short (data transfer error) */
        w->target++;
        printf("uring-fault: thread %u: write at %llu ended by the target: %s\n", w->id, (unsigned long long)c->lba,
               gpumem_nvme_status_str(sf));
    } else {
        w->other++;
        printf("uring-fault: thread %u: write at %llu ended %s (%s)\n", w->id, (unsigned long long)c->lba,
               gpumem_status_str(st), gpumem_nvme_status_str(sf));
    }
    __atomic_fetch_add(&fs->failed, 1, __ATOMIC_RELAXED);
}

/* Batches of asynchronous writes to the thread's own blocks, each block
 * one generation higher, until told to pause (nothing left out) or end. */
static void *fault_worker_main(void *arg) {
    fault_worker *w = (fault_worker *)arg;
    fault_state *fs = w->fs;
    fault_cmd cmds[FAULT_BATCH];
    uint64_t rng = 0x51ED2701ull * (w->id + 3), round = 0, at = 0;
    uint64_t base = (uint64_t)w->id * w->region;
    uint32_t n, k;
    int after = 0;
    for (n = 0; n < FAULT_BATCH; n++) cmds[n].buf = (unsigned char *)aligned_alloc(4096, FAULT_NLB * LBA + 4096);
    for (;;) {
        int phase = __atomic_load_n(&fs->phase, __ATOMIC_ACQUIRE);
        gpumem_nvme_qp *qp = fs->pairs[1 + (w->id + round++) % (URING_PAIRS - 1)]; /* depths 16 and 256 */
        uint32_t batch = 1 + (uint32_t)(rng_next(&rng) % FAULT_BATCH), oldest = 0;
        if (phase == FAULT_END) break;
        if (phase == FAULT_PAUSE) {
            __atomic_store_n(&w->idle, 1, __ATOMIC_RELEASE);
            after = 1;
            nanosleep(&(struct timespec){0, 1000000L}, NULL);
            continue;
        }
        __atomic_store_n(&w->idle, 0, __ATOMIC_RELEASE);
        for (n = 0; n < batch; n++) {
            fault_cmd *c = &cmds[n];
            gpumem_status st;
            c->nlb = 1 + (uint32_t)(rng_next(&rng) % FAULT_NLB);
            if (at + c->nlb > w->region) at = 0;
            c->lba = base + at;
            at += c->nlb;
            /* a block's generation rises with every write to it: one above the range's highest */
            for (c->gen = 0, k = 0; k < c->nlb; k++)
                if (fs->issued[c->lba + k] > c->gen) c->gen = fs->issued[c->lba + k];
            c->gen++;
            for (k = 0; k < c->nlb; k++) {
                fs->issued[c->lba + k] = c->gen;
                fill_block(c->buf + (size_t)k * LBA, c->lba + k, c->gen);
            }
            c->t0 = gpumem_clock_ns();
            while ((st = gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_WRITE, c->lba, c->nlb, c->buf, &c->req)) ==
                   GPUMEM_EAGAIN) {
                if (oldest < n) fault_end(w, qp, &cmds[oldest++], after);
                else nanosleep(&(struct timespec){0, 20000L}, NULL);
            }
            CHECK(st == GPUMEM_OK, "thread %u: submit: %s", w->id, gpumem_status_str(st));
            if (st != GPUMEM_OK) { batch = n; break; }
            /* stop before the region wraps onto a range still out */
            if (at + FAULT_NLB > w->region && n + 1 < batch) batch = n + 1;
        }
        while (oldest < batch) fault_end(w, qp, &cmds[oldest++], after);
    }
    for (n = 0; n < FAULT_BATCH; n++) free(cmds[n].buf);
    return NULL;
}

static void fault_wait_idle(fault_worker *ws, uint32_t n_threads) {
    uint32_t i;
    for (i = 0; i < n_threads; i++)
        while (!__atomic_load_n(&ws[i].idle, __ATOMIC_ACQUIRE)) nanosleep(&(struct timespec){0, 1000000L}, NULL);
}

/* What the fault runs share: the forwarder over DEV, its pairs, the written
 * area's generations, the threads and how their writes ended. */
typedef struct fault_run {
    gpumem_uringctl *ctl;
    fault_state fs;
    fault_worker *ws;
    uint32_t n_threads;
    unsigned char *buf; /* FAULT_CHUNK blocks: the first fill and the read-back */
    uint64_t ok, aborted, path, target, timed_out, other, ok_after, max_wait, leaked, landed, wrong;
} fault_run;

/* Open the forwarder over dev (cmd_timeout_ms FAULT_TIMEOUT_MS), add the
 * pairs, write generation 0 over the area, start the threads. 0 or 1. */
static int fault_open(fault_run *r, const char *dev, uint32_t n_threads, const char *mode) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_status st;
    gpumem_nvme_cpl cpl;
    uint64_t b;
    uint32_t i, k;
    char why[320] = "";
    memset(r, 0, sizeof *r);
    r->n_threads = n_threads;
    r->ws = (fault_worker *)calloc(n_threads, sizeof *r->ws);
    r->buf = (unsigned char *)aligned_alloc(4096, FAULT_CHUNK * LBA);
    r->fs.done = (uint32_t *)calloc(FAULT_BLOCKS, sizeof(uint32_t));
    r->fs.issued = (uint32_t *)calloc(FAULT_BLOCKS, sizeof(uint32_t));
    r->fs.lost = (uint32_t *)calloc(FAULT_BLOCKS, sizeof(uint32_t));
    cfg.path = dev;
    cfg.cmd_timeout_ms = FAULT_TIMEOUT_MS;
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    if ((st = gpumem_uringctl_open(&cfg, &r->ctl)) != GPUMEM_OK) {
        printf("GPUMEM_QEMU_RESULT FAIL %s open %s: %s: %s\n", mode, dev, gpumem_status_str(st), why);
        return 1;
    }
    CHECK(gpumem_uringctl_ns(r->ctl).n_blocks >= FAULT_BLOCKS && gpumem_uringctl_ns(r->ctl).lba_shift == 9,
          "namespace of at least %u 512-byte blocks expected", FAULT_BLOCKS);
    for (i = 0; i < URING_PAIRS && !failures; i++)
        CHECK(gpumem_uringctl_add_qp(r->ctl, uring_depths[i], &r->fs.pairs[i]) == GPUMEM_OK, "pair %u", i);
    /* the blocks start at generation 0 (null_blk memory reads zeros: write them) */
    CHECK(gpumem_uringctl_start(r->ctl) == GPUMEM_OK, "start");
    for (b = 0; b < FAULT_BLOCKS && !failures; b += FAULT_CHUNK) {
        for (k = 0; k < FAULT_CHUNK; k++) fill_block(r->buf + (size_t)k * LBA, b + k, 0);
        st = gpumem_nvme_qp_write_buf(r->fs.pairs[2], b, FAULT_CHUNK, r->buf, &cpl);
        CHECK(st == GPUMEM_OK, "initial write at %llu: %s", (unsigned long long)b, gpumem_status_str(st));
    }
    if (failures) return 1;
    for (i = 0; i < n_threads; i++) {
        r->ws[i].fs = &r->fs;
        r->ws[i].id = i;
        r->ws[i].region = FAULT_BLOCKS / n_threads;
        pthread_create(&r->ws[i].thread, NULL, fault_worker_main, &r->ws[i]);
    }
    return 0;
}

/* End the threads, add up how their writes ended, then read every block
 * back: the last write reported done, or a later failed one (a failed
 * write may have landed). */
static void fault_join_and_verify(fault_run *r) {
    fault_state *fs = &r->fs;
    gpumem_nvme_cpl cpl;
    gpumem_status st;
    uint64_t b;
    uint32_t i, k;
    __atomic_store_n(&fs->phase, FAULT_END, __ATOMIC_RELEASE);
    for (i = 0; i < r->n_threads; i++) {
        fault_worker *w = &r->ws[i];
        pthread_join(w->thread, NULL);
        r->ok += w->ok, r->aborted += w->aborted, r->path += w->path, r->timed_out += w->timed_out;
        r->target += w->target, r->other += w->other, r->ok_after += w->ok_after, r->leaked += w->leaked;
        if (w->max_wait_ns > r->max_wait) r->max_wait = w->max_wait_ns;
    }
    for (b = 0; b < FAULT_BLOCKS; b += FAULT_CHUNK) {
        st = gpumem_nvme_qp_read_buf(fs->pairs[2], b, FAULT_CHUNK, r->buf, &cpl);
        CHECK(st == GPUMEM_OK, "read back at %llu: %s", (unsigned long long)b, gpumem_status_str(st));
        if (st != GPUMEM_OK) break;
        for (k = 0; k < FAULT_CHUNK; k++) {
            uint64_t lba = b + k;
            uint32_t g;
            int match = block_ok(r->buf + (size_t)k * LBA, lba, fs->done[lba]);
            for (g = fs->lost[lba]; !match && g && g <= fs->issued[lba]; g++)
                if (block_ok(r->buf + (size_t)k * LBA, lba, g)) match = 1, r->landed++;
            if (!match && r->wrong++ < 5)
                CHECK(0, "block %llu holds neither generation %u (done) nor a failed later one (%u..%u)",
                      (unsigned long long)lba, fs->done[lba], fs->lost[lba], fs->issued[lba]);
        }
    }
}

/* The counts, the forwarder stopped and destroyed, the result line. */
static int fault_close(fault_run *r, const char *mode, const char *dev) {
    gpumem_uringctl_stats s;
    gpumem_status st;
    uint32_t i;
    memset(&s, 0, sizeof s);
    printf("%s: writes ended: %llu done (%llu after the path came back), %llu aborted by host (-EINTR), "
           "%llu host pathing error (-EINVAL / 0x370), %llu failed by the target, %llu timed out, %llu other; longest "
           "wait of a failed write %.0f ms (cmd_timeout_ms %u)\n", mode, (unsigned long long)r->ok,
           (unsigned long long)r->ok_after, (unsigned long long)r->aborted, (unsigned long long)r->path,
           (unsigned long long)r->target, (unsigned long long)r->timed_out, (unsigned long long)r->other,
           r->max_wait / 1e6, FAULT_TIMEOUT_MS);
    printf("%s: %llu blocks checked, %llu hold a failed write that landed, %llu wrong\n", mode,
           (unsigned long long)FAULT_BLOCKS, (unsigned long long)r->landed, (unsigned long long)r->wrong);
    if (gpumem_uringctl_stop(r->ctl) == GPUMEM_OK && gpumem_uringctl_get_stats(r->ctl, &s) == GPUMEM_OK)
        printf("%s: forwarded %llu commands; %llu kernel errors, %llu overdue (%llu ended late, %llu still "
               "in the kernel), %llu bad kernel completions, %llu protocol violations\n", mode,
               (unsigned long long)s.submitted, (unsigned long long)s.kernel_errors, (unsigned long long)s.overdue,
               (unsigned long long)s.late, (unsigned long long)s.left_in_kernel,
               (unsigned long long)s.bad_kernel_cqes, (unsigned long long)s.sw.violations);
    for (i = 0; i < URING_PAIRS; i++)
        CHECK(!r->fs.pairs[i] || (gpumem_nvme_qp_faults(r->fs.pairs[i]) & ~GPUMEM_NVME_FAULT_TIMEOUT) == 0,
              "pair %u saw bad completions", i);
    st = gpumem_uringctl_destroy(r->ctl);
    CHECK(st == GPUMEM_OK || (st == GPUMEM_EBUSY && s.left_in_kernel), "destroy: %s", gpumem_status_str(st));
    printf("GPUMEM_QEMU_RESULT %s %s %s done=%llu failed=%llu timed_out=%llu leaked_buffers=%llu "
           "failures=%d\n", failures ? "FAIL" : "PASS", mode, dev, (unsigned long long)r->ok,
           (unsigned long long)(r->aborted + r->path + r->target + r->timed_out + r->other),
           (unsigned long long)r->timed_out, (unsigned long long)r->leaked, failures);
    fflush(stdout);
    return failures ? 1 : 0;
}

static void sleep_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

/* guest_test uring-fault DEV THREADS COMMANDS PORT_LINK SUBSYSTEM: writes
 * through the forwarder to DEV (a namespace nvmet exports through the port,
 * backed by a slow null_blk); after COMMANDS/4 writes are done the port's
 * link to the subsystem is removed with writes inside the target; once the
 * threads have ended everything they had out, the link is restored, the
 * path comes back, COMMANDS more writes must all succeed, and every block
 * must read back as the last write reported done (or a later one that
 * failed: a failed write may have landed). */
static int uring_fault(const char *dev, uint32_t n_threads, uint64_t n_commands, const char *link, const char *subsys) {
    fault_run r;
    fault_state *fs = &r.fs;
    gpumem_status st = GPUMEM_EIO;
    gpumem_nvme_cpl cpl;
    double t_unlink, t_back;
    uint64_t probes = 0;
    if (fault_open(&r, dev, n_threads, "uring-fault")) {
        if (!r.ctl) return 1;
        goto out;
    }
    /* 1. the port goes with writes inside the target */
    while (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) < n_commands / 4) sleep_ms(1);
    CHECK(unlink(link) == 0, "unlink %s: %s", link, strerror(errno));
    t_unlink = now_s();
    printf("uring-fault: port link removed after %llu writes done\n", (unsigned long long)fs->ok);
    /* 2. new writes fail while the path is gone; let some do, then pause:
     * every thread ends everything it has out (none may hang) */
    while (__atomic_load_n(&fs->failed, __ATOMIC_RELAXED) < 4u * n_threads && now_s() - t_unlink < 20) sleep_ms(1);
    __atomic_store_n(&fs->phase, FAULT_PAUSE, __ATOMIC_RELEASE);
    fault_wait_idle(r.ws, n_threads);
    printf("uring-fault: every thread ended its writes %.2f s after the unlink (%llu done, %llu failed)\n",
           now_s() - t_unlink, (unsigned long long)fs->ok, (unsigned long long)fs->failed);
    /* 3. the port back: the kernel reconnects (reconnect_delay), new commands work */
    CHECK(symlink(subsys, link) == 0, "symlink %s %s: %s", subsys, link, strerror(errno));
    t_back = now_s();
    do {
        probes++;
        st = gpumem_nvme_qp_read_buf(fs->pairs[1], 0, 1, r.buf, &cpl);
        if (st != GPUMEM_OK) sleep_ms(200);
    } while (st != GPUMEM_OK && now_s() - t_back < 60);
    CHECK(st == GPUMEM_OK, "no command succeeded within 60 s of restoring the port: %s (%s)", gpumem_status_str(st),
          gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)));
    printf("uring-fault: path back %.2f s after the port (%llu probes)\n", now_s() - t_back, (unsigned long long)probes);
    if (st == GPUMEM_OK) {
        uint64_t before = fs->ok;
        __atomic_store_n(&fs->phase, FAULT_RUN, __ATOMIC_RELEASE);
        while (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) < before + n_commands &&
               !__atomic_load_n(&failures, __ATOMIC_RELAXED))
            sleep_ms(1);
    }
    fault_join_and_verify(&r);
    CHECK(r.aborted + r.path + r.target + r.timed_out + r.other > 0, "the fault did not bite: no write failed");
    CHECK(r.other == 0, "writes ended with an unexpected status");
    CHECK(r.ok_after >= n_commands, "only %llu writes after the port came back", (unsigned long long)r.ok_after);
out:
    return fault_close(&r, "uring-fault", dev);
}

/* Whether the controller's sysfs state file reads "live". */
static int ctrl_live(const char *state_file) {
    char text[32] = "";
    FILE *f = fopen(state_file, "r");
    if (!f) return 0;
    if (!fgets(text, sizeof text, f)) text[0] = 0;
    fclose(f);
    return strncmp(text, "live", 4) == 0;
}

/* guest_test uring-multipath DEV THREADS COMMANDS PORT_LINK SUBSYSTEM CTRL_STATE:
 * DEV is the multipath head (/dev/ngXnY of the subsystem) of a namespace
 * nvmet exports through two ports, one path each; PORT_LINK is one port's
 * link to the subsystem and CTRL_STATE the sysfs state of the controller
 * that connected through it. The writes of uring-fault run throughout;
 * after COMMANDS/4 are done the link goes with writes inside the target and
 * the writes go on, never paused: those the lost path held end with a status
 * (the kernel does not requeue passthrough commands on another path), new
 * ones go to the surviving path, COMMANDS/2 of them must succeed before the
 * link is restored; once the controller is live again, COMMANDS more must
 * succeed (those in flight as it came back may end with a status, at most
 * what the threads have out at once). No write may end without a status within its command
 * timeout (none timed out), and every block must read back as uring-fault's.
 * Prints the time from the loss to the first success of a write submitted
 * after it, and the write rate before, on one path, and after the return. */
static int uring_multipath(const char *dev, uint32_t n_threads, uint64_t n_commands, const char *link,
                           const char *subsys, const char *state) {
    fault_run r;
    fault_state *fs = &r.fs;
    double t0, t_loss, t_restore, t_live, t_end;
    uint64_t ok_loss, ok_restore, ok_live, failed_restore, failed_after, loss_ns, first_ok;
    if (fault_open(&r, dev, n_threads, "uring-multipath")) {
        if (!r.ctl) return 1;
        goto out;
    }
    t0 = now_s();
    CHECK(ctrl_live(state), "%s is not live before the loss", state);
    while (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) < n_commands / 4) sleep_ms(1);
    /* 1. one path goes, writes inside the target, the others keep writing */
    loss_ns = gpumem_clock_ns();
    __atomic_store_n(&fs->loss_ns, loss_ns, __ATOMIC_RELEASE);
    CHECK(unlink(link) == 0, "unlink %s: %s", link, strerror(errno));
    t_loss = now_s();
    ok_loss = __atomic_load_n(&fs->ok, __ATOMIC_RELAXED);
    printf("uring-multipath: port link removed after %llu writes done\n", (unsigned long long)ok_loss);
    while (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) < ok_loss + n_commands / 2 && now_s() - t_loss < 60 &&
           !__atomic_load_n(&failures, __ATOMIC_RELAXED))
        sleep_ms(1);
    ok_restore = __atomic_load_n(&fs->ok, __ATOMIC_RELAXED);
    failed_restore = __atomic_load_n(&fs->failed, __ATOMIC_RELAXED);
    first_ok = __atomic_load_n(&fs->first_ok_ns, __ATOMIC_RELAXED);
    CHECK(ok_restore >= ok_loss + n_commands / 2, "only %llu writes succeeded in 60 s on the surviving path",
          (unsigned long long)(ok_restore - ok_loss));
    CHECK(first_ok != 0, "no write submitted after the loss succeeded");
    printf("uring-multipath: first write submitted after the loss done %.1f ms after the loss; %llu done and %llu "
           "failed on one path in %.2f s; lost path's controller %s\n", first_ok ? (first_ok - loss_ns) / 1e6 : -1.0,
           (unsigned long long)(ok_restore - ok_loss), (unsigned long long)failed_restore, now_s() - t_loss,
           ctrl_live(state) ? "still live" : "not live");
    /* 2. the link back: the controller reconnects, both paths carry writes */
    CHECK(symlink(subsys, link) == 0, "symlink %s %s: %s", subsys, link, strerror(errno));
    t_restore = now_s();
    while (!ctrl_live(state) && now_s() - t_restore < 60) sleep_ms(50);
    CHECK(ctrl_live(state), "%s not live within 60 s of restoring the link", state);
    t_live = now_s();
    ok_live = __atomic_load_n(&fs->ok, __ATOMIC_RELAXED);
    printf("uring-multipath: the lost path's controller live again %.2f s after the link came back\n",
           t_live - t_restore);
    while (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) < ok_live + n_commands &&
           !__atomic_load_n(&failures, __ATOMIC_RELAXED) && now_s() - t_live < 120)
        sleep_ms(1);
    t_end = now_s();
    printf("uring-multipath: writes a second: %.0f before the loss, %.0f on one path, %.0f after the return\n",
           ok_loss / (t_loss - t0), (ok_restore - ok_loss) / (t_restore - t_loss),
           (__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) - ok_live) / (t_end - t_live));
    /* Writes in flight as the path comes back may still fail with a
     * status (a CI run: one "data transfer error" from the target, as the
     * reconnect cut its data short; nothing landed wrong), never more than
     * the threads had out at once; the ones sent after it succeed, which
     * the next check's count of writes after the return covers. */
    failed_after = __atomic_load_n(&fs->failed, __ATOMIC_RELAXED) - failed_restore;
    printf("uring-multipath: %llu writes failed after the link came back (at most %u can be out at once)\n",
           (unsigned long long)failed_after, n_threads * FAULT_BATCH);
    CHECK(failed_after <= (uint64_t)n_threads * FAULT_BATCH, "%llu writes failed after the path came back",
          (unsigned long long)failed_after);
    CHECK(__atomic_load_n(&fs->ok, __ATOMIC_RELAXED) >= ok_live + n_commands, "fewer than %llu writes after the return",
          (unsigned long long)n_commands);
    fault_join_and_verify(&r);
    r.ok_after = r.ok - ok_live; /* the writes done once the lost path was live again */
    CHECK(r.timed_out == 0, "%llu writes ended without a status within cmd_timeout_ms", (unsigned long long)r.timed_out);
    CHECK(r.other == 0, "writes ended with an unexpected status");
out:
    return fault_close(&r, "uring-multipath", dev);
}

/* ---- the benchmark (make qemu-bench): 4 KiB random reads at a fixed depth ---------
 *
 * One client thread keeps DEPTH reads of 4 KiB (8 blocks, 4 KiB-aligned) at
 * random places of the namespace outstanding on one pair, for SECONDS
 * seconds: each completion found is checked, then its slot gets a new read at
 * once. The same loop drives the forwarder's pair (served by one forwarder
 * thread) and the VFIO shim's pair (the controller is QEMU's NVMe device
 * itself), so the difference is what serves the pair. Two runs each: one
 * without clock reads per command (IOPS), one that times every command from
 * its submit call to the poll that finds it done (latency percentiles), as
 * fio's --gtod_reduce=1 run and its run with latencies. Every 64th read is
 * checked by content (the disk holds generation 0 everywhere). */

#define BENCH_BLOCKS 8u          /* 4 KiB reads of 512-byte blocks */
#define BENCH_MAX_DEPTH 256u

typedef struct bench_target {
    gpumem_nvme_qp *qp;
    gpumem_nvmectl *ctl;     /* the shim's controller (its wait), NULL: the forwarder's pair */
    gpumem_nvmectl_dma *dma; /* VFIO: the slots' DMA memory; NULL: the forwarder (process addresses) */
    unsigned char *va;       /* the slots' memory, BENCH_BLOCKS * LBA bytes each */
    uint64_t n_blocks;
} bench_target;

static gpumem_status bench_submit(bench_target *t, uint32_t slot, uint64_t lba, gpumem_nvme_req *req) {
    size_t off = (size_t)slot * BENCH_BLOCKS * LBA;
    if (t->dma) {
        gpumem_nvme_iomap at = gpumem_nvme_iomap_sub(&t->dma->map, off);
        return gpumem_nvme_qp_submit_map(t->qp, GPUMEM_NVME_OP_READ, lba, BENCH_BLOCKS, &at, req);
    }
    return gpumem_nvme_qp_submit_buf(t->qp, GPUMEM_NVME_OP_READ, lba, BENCH_BLOCKS, t->va + off, req);
}

static int bench_cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of one timed run. */
typedef struct bench_state {
    bench_target *t;
    const char *what;
    uint32_t depth, n_active;
    int timed, running;
    gpumem_nvme_req req[BENCH_MAX_DEPTH];
    uint64_t lba[BENCH_MAX_DEPTH], t_sub[BENCH_MAX_DEPTH], seq[BENCH_MAX_DEPTH];
    unsigned char active[BENCH_MAX_DEPTH]; /* the slot has a read out */
    uint64_t rng, next_seq, n_slots, done, checked, bad, errors;
    uint32_t *lat;
    uint64_t n_lat, cap;
} bench_state;

/* A new read at a random 4 KiB of the namespace into slot i. */
static gpumem_status bench_issue(bench_state *b, uint32_t i) {
    gpumem_status st;
    b->lba[i] = (rng_next(&b->rng) % b->n_slots) * BENCH_BLOCKS;
    b->seq[i] = b->next_seq++;
    if (b->timed) b->t_sub[i] = gpumem_clock_ns();
    st = bench_submit(b->t, i, b->lba[i], &b->req[i]);
    CHECK(st == GPUMEM_OK, "%s: submit: %s", b->what, gpumem_status_str(st));
    b->active[i] = st == GPUMEM_OK;
    b->n_active += st == GPUMEM_OK;
    if (st != GPUMEM_OK) b->running = 0;
    return st;
}

/* Slot i's read ended with st: count it, check every 64th by content, and
 * give the slot a new read while the run goes on. */
static void bench_ended(bench_state *b, uint32_t i, gpumem_status st) {
    uint32_t k;
    if (b->timed && b->n_lat < b->cap) b->lat[b->n_lat++] = (uint32_t)((gpumem_clock_ns() - b->t_sub[i]) / 1000u);
    b->active[i] = 0, b->n_active--;
    if (st != GPUMEM_OK) {
        if (b->errors++ < 5)
            CHECK(0, "%s: read of block %llu: %s (%s)", b->what, (unsigned long long)b->lba[i], gpumem_status_str(st),
                  st == GPUMEM_EIO ? gpumem_nvme_status_str(gpumem_nvme_cpl_status(&b->req[i].cpl)) : "no status");
        b->running = 0;
        return;
    }
    if (++b->done % 64 == 0) {
        const unsigned char *p = b->t->va + (size_t)i * BENCH_BLOCKS * LBA;
        b->checked++;
        for (k = 0; k < BENCH_BLOCKS; k++)
            if (!block_ok(p + (size_t)k * LBA, b->lba[i] + k, 0) && b->bad++ < 5)
                CHECK(0, "%s: block %llu read back wrong", b->what, (unsigned long long)(b->lba[i] + k));
    }
    if (b->running) bench_issue(b, i);
}

/* One timed run; prints a "BENCH" line. `timed`: clock each command.
 * The client polls every slot round and round; a slot found done gets a new
 * read at once. A round that finds none waits for the oldest read the way
 * the path's own callers do (the pair's wait for the forwarder, which
 * spins then parks; gpumem_nvmectl_wait for the shim, which spins then
 * sleeps 20 us at a time), so that the client does not take the CPU the
 * forwarder thread needs while nothing is due. */
static void bench_run(const char *what, bench_target *t, uint32_t depth, double seconds, int timed) {
    bench_state *b = (bench_state *)calloc(1, sizeof *b);
    uint64_t next_clock = 0;
    double t0, t1;
    uint32_t i;
    CHECK(b != NULL, "malloc");
    if (!b) return;
    b->t = t, b->what = what, b->depth = depth, b->timed = timed, b->running = 1;
    b->rng = 0x2545F4914F6CDD1Dull ^ (uint64_t)timed;
    b->n_slots = t->n_blocks / BENCH_BLOCKS;
    if (timed) {
        b->cap = 4u << 20; /* 4 M commands; past that the rest go untimed */
        b->lat = (uint32_t *)malloc(b->cap * sizeof *b->lat);
        CHECK(b->lat != NULL, "malloc");
        if (!b->lat) b->cap = 0;
    }
    t0 = now_s();
    for (i = 0; i < depth && b->running; i++) bench_issue(b, i);
    while (b->n_active > 0) {
        int progress = 0;
        for (i = 0; i < depth; i++) {
            gpumem_status st;
            if (!b->active[i]) continue; /* ended (the run is draining) */
            if ((st = gpumem_nvme_qp_poll(t->qp, &b->req[i])) == GPUMEM_EAGAIN) continue;
            progress = 1;
            bench_ended(b, i, st);
        }
        if (!progress) {
            uint32_t oldest = depth;
            for (i = 0; i < depth; i++)
                if (b->active[i] && (oldest == depth || b->seq[i] < b->seq[oldest])) oldest = i;
            if (oldest < depth)
                bench_ended(b, oldest, t->ctl ? gpumem_nvmectl_wait(t->ctl, t->qp, &b->req[oldest], IO_TIMEOUT_MS)
                                              : gpumem_nvme_qp_wait_timed(t->qp, &b->req[oldest],
                                                                          (uint64_t)IO_TIMEOUT_MS * 1000000ull));
        }
        /* the clock once per 256 completions: the IOPS run reads it ~never */
        if (b->running && b->done >= next_clock) {
            next_clock = b->done + 256;
            if (now_s() - t0 >= seconds) b->running = 0;
        }
    }
    t1 = now_s();
    if (timed && b->n_lat) {
        uint32_t *lat = b->lat;
        uint64_t n = b->n_lat;
        qsort(lat, n, sizeof *lat, bench_cmp_u32);
        printf("BENCH %s depth=%u seconds=%.2f reads=%llu iops=%.0f lat_us_p50=%u p90=%u p99=%u p999=%u max=%u "
               "errors=%llu bad_blocks=%llu checked=%llu\n", what, depth, t1 - t0, (unsigned long long)b->done,
               b->done / (t1 - t0), lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100], lat[n * 999 / 1000], lat[n - 1],
               (unsigned long long)b->errors, (unsigned long long)b->bad, (unsigned long long)b->checked);
    } else {
        printf("BENCH %s depth=%u seconds=%.2f reads=%llu iops=%.0f errors=%llu bad_blocks=%llu checked=%llu\n",
               what, depth, t1 - t0, (unsigned long long)b->done, b->done / (t1 - t0), (unsigned long long)b->errors,
               (unsigned long long)b->bad, (unsigned long long)b->checked);
    }
    fflush(stdout);
    CHECK(b->errors == 0 && b->bad == 0 && b->checked > 0, "%s: %llu errors, %llu blocks read back wrong, %llu checked",
          what, (unsigned long long)b->errors, (unsigned long long)b->bad, (unsigned long long)b->checked);
    free(b->lat);
    free(b);
}

/* One forwarder set-up of the benchmark: one forwarder thread, one pair,
 * the slots' memory t->va (depth 4 KiB slots). `fixed`: t->va is the
 * registered buffer; `sqpoll`: SQPOLL on; `spin`: idle_spin_ns. Runs the
 * IOPS run as BENCH NAME and, if `lat`, the latency run as NAME-lat. */
static void bench_forwarder(const char *dev, const char *name, bench_target *t, uint32_t depth, double seconds,
                            int fixed, int sqpoll, uint64_t spin, int lat) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl *ctl = NULL;
    gpumem_uringctl_stats s;
    gpumem_status st;
    char why[320] = "", lat_name[64];
    cfg.path = dev;
    cfg.n_threads = 1;
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    cfg.idle_spin_ns = spin;
    if (fixed) cfg.fixed_base = t->va, cfg.fixed_bytes = (size_t)depth * BENCH_BLOCKS * LBA;
    if (sqpoll) cfg.sqpoll_idle_ms = 50;
    if ((st = gpumem_uringctl_open(&cfg, &ctl)) != GPUMEM_OK) {
        CHECK(0, "%s: open %s: %s: %s", name, dev, gpumem_status_str(st), why);
        return;
    }
    t->n_blocks = gpumem_uringctl_ns(ctl).n_blocks;
    st = gpumem_uringctl_add_qp(ctl, 2 * depth, &t->qp);
    CHECK(st == GPUMEM_OK, "pair of depth %u: %s: %s", 2 * depth, gpumem_status_str(st), why);
    if (!failures) CHECK((st = gpumem_uringctl_start(ctl)) == GPUMEM_OK, "start: %s", gpumem_status_str(st));
    printf("bench: %s: forwarder on %s: 1 forwarder thread (ring of %u, idle_spin_ns %llu, park_ns %llu, registered "
           "buffer %s, SQPOLL %s), 1 client thread, a pair of depth %u, %u reads of 4 KiB out at once, %.0f s a run\n",
           name, dev, cfg.ring_entries, (unsigned long long)cfg.idle_spin_ns, (unsigned long long)cfg.park_ns,
           fixed ? "on" : "off", sqpoll ? "on" : "off", 2 * depth, depth, seconds);
    if (!failures) bench_run(name, t, depth, seconds, 0);
    snprintf(lat_name, sizeof lat_name, "%s-lat", name);
    if (!failures && lat) bench_run(lat_name, t, depth, seconds, 1);
    if (gpumem_uringctl_stop(ctl) == GPUMEM_OK && gpumem_uringctl_get_stats(ctl, &s) == GPUMEM_OK) {
        printf("bench: %s: %llu commands in %llu io_uring_enter calls (%.1f a call), %llu with the registered "
               "buffer, %llu kernel errors\n", name, (unsigned long long)s.submitted,
               (unsigned long long)s.enter_calls, s.enter_calls ? (double)s.submitted / (double)s.enter_calls : 0.0,
               (unsigned long long)s.fixed, (unsigned long long)s.kernel_errors);
        CHECK(s.kernel_errors + s.bad_kernel_cqes + s.untranslatable + s.sw.violations == 0, "forwarder counts");
        CHECK(!fixed || s.fixed == s.submitted, "%s: %llu of %llu commands with the registered buffer", name,
              (unsigned long long)s.fixed, (unsigned long long)s.submitted);
    }
    CHECK((st = gpumem_uringctl_destroy(ctl)) == GPUMEM_OK, "destroy: %s", gpumem_status_str(st));
}

/* guest_test bench-uring DEV DEPTH SECONDS [LABEL [VARIANTS]]: the
 * forwarder's runs, named LABEL (default "uring"), one per variant of the
 * comma list VARIANTS (default "plain"): plain (the defaults: an IOPS and
 * a latency run), fixed (the slots' memory as the registered buffer),
 * sqpoll (registered buffer and SQPOLL), nospin (registered buffer,
 * idle_spin_ns GPUMEM_TARGET_NO_SPIN: the forwarder waits in io_uring_enter at once). */
static int bench_uring(const char *dev, uint32_t depth, double seconds, const char *label, const char *variants) {
    bench_target t;
    char name[64], list[128], *v, *save = NULL;
    memset(&t, 0, sizeof t);
    if (depth == 0 || depth > BENCH_MAX_DEPTH) depth = 32;
    t.va = (unsigned char *)aligned_alloc(4096, (size_t)depth * BENCH_BLOCKS * LBA);
    CHECK(t.va != NULL, "malloc");
    snprintf(list, sizeof list, "%s", variants);
    for (v = strtok_r(list, ",", &save); v && !failures; v = strtok_r(NULL, ",", &save)) {
        if (!strcmp(v, "plain")) {
            snprintf(name, sizeof name, "%s", label);
            bench_forwarder(dev, name, &t, depth, seconds, 0, 0, GPUMEM_TARGET_DEFAULT_SPIN_NS, 1);
            continue;
        }
        snprintf(name, sizeof name, "%s-%s", label, v);
        if (!strcmp(v, "fixed")) bench_forwarder(dev, name, &t, depth, seconds, 1, 0, GPUMEM_TARGET_DEFAULT_SPIN_NS, 0);
        else if (!strcmp(v, "sqpoll")) bench_forwarder(dev, name, &t, depth, seconds, 1, 1, GPUMEM_TARGET_DEFAULT_SPIN_NS, 0);
        else if (!strcmp(v, "nospin")) bench_forwarder(dev, name, &t, depth, seconds, 1, 0, GPUMEM_TARGET_NO_SPIN, 0);
        else CHECK(0, "bench-uring: unknown variant '%s' (plain, fixed, sqpoll, nospin)", v);
    }
    free(t.va);
    printf("GPUMEM_QEMU_RESULT %s bench-uring %s failures=%d\n", failures ? "FAIL" : "PASS", label, failures);
    return failures ? 1 : 0;
}

/* guest_test bench-vfio ADDR DEPTH SECONDS: the shim drives the controller. */
static int bench_vfio(const char *addr, uint32_t depth, double seconds) {
    gpumem_nvmectl *ctl;
    gpumem_nvmectl_dma dma;
    bench_target t;
    gpumem_status st;
    memset(&t, 0, sizeof t);
    if (depth == 0 || depth > BENCH_MAX_DEPTH) depth = 32;
    ctl = open_ctl(addr, 1, 1, &st);
    if (st != GPUMEM_OK) {
        printf("GPUMEM_QEMU_RESULT FAIL bench-vfio open %s: %s: %s\n", addr, gpumem_status_str(st), open_error);
        return 1;
    }
    printf("bench: shim on %s through %s: 1 client thread polling the pair's CQ, a pair of depth %u, %u reads of "
           "4 KiB out at once, %.0f s a run\n", addr,
           gpumem_nvmectl_uses_vfio(ctl) ? "VFIO (IOVA-mapped DMA)" : "sysfs (physical addresses)", 2 * depth, depth,
           seconds);
    t.n_blocks = gpumem_nvmectl_get_info(ctl)->ns.n_blocks;
    st = gpumem_nvmectl_dma_alloc(ctl, (size_t)depth * BENCH_BLOCKS * LBA, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &dma);
    CHECK(st == GPUMEM_OK, "DMA memory: %s: %s", gpumem_status_str(st), gpumem_nvmectl_error(ctl));
    if (st == GPUMEM_OK) {
        t.dma = &dma;
        t.ctl = ctl;
        t.va = (unsigned char *)dma.va;
        st = gpumem_nvmectl_add_qp(ctl, 2 * depth, &t.qp);
        CHECK(st == GPUMEM_OK, "pair of depth %u: %s: %s", 2 * depth, gpumem_status_str(st),
              gpumem_nvmectl_error(ctl));
        if (!failures) bench_run(gpumem_nvmectl_uses_vfio(ctl) ? "vfio" : "uio", &t, depth, seconds, 0);
        if (!failures) bench_run(gpumem_nvmectl_uses_vfio(ctl) ? "vfio-lat" : "uio-lat", &t, depth, seconds, 1);
    }
    st = gpumem_nvmectl_close(ctl);
    CHECK(st == GPUMEM_OK, "close: %s", gpumem_status_str(st));
    if (t.dma) gpumem_nvmectl_dma_free(&dma);
    printf("GPUMEM_QEMU_RESULT %s bench-vfio failures=%d\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "unbound") == 0) return unbound(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "negative") == 0) return negative(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "iommu-uio") == 0) return iommu_uio(argv[2]);
    if (argc >= 6 && strcmp(argv[1], "iommu-run") == 0) {
        p2p_map_as_root();
        if (drop_root((uint32_t)atoi(argv[5]), 256u << 20)) {
            printf("GPUMEM_QEMU_RESULT FAIL dropping root\n");
            return 1;
        }
        if (run(argv[2], (uint32_t)atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10))) return 1;
        return iommu_negative(argv[2]);
    }
    if (argc >= 7 && strcmp(argv[1], "uring-fault") == 0)
        return uring_fault(argv[2], (uint32_t)atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10), argv[5], argv[6]);
    if (argc >= 8 && strcmp(argv[1], "uring-multipath") == 0)
        return uring_multipath(argv[2], (uint32_t)atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10), argv[5],
                               argv[6], argv[7]);
    if (argc >= 5 && strcmp(argv[1], "uring") == 0)
        return uring_run(argv[2], (uint32_t)atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10));
    if (argc >= 5 && strcmp(argv[1], "bench-uring") == 0)
        return bench_uring(argv[2], (uint32_t)atoi(argv[3]), atof(argv[4]), argc >= 6 ? argv[5] : "uring",
                           argc >= 7 ? argv[6] : "plain");
    if (argc >= 5 && strcmp(argv[1], "bench-vfio") == 0)
        return bench_vfio(argv[2], (uint32_t)atoi(argv[3]), atof(argv[4]));
    if (argc >= 5 && strcmp(argv[1], "run") == 0)
        return run(argv[2], (uint32_t)atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10));
    fprintf(stderr, "usage: guest_test unbound|negative|iommu-uio ADDR | run ADDR THREADS COMMANDS | iommu-run ADDR "
                    "THREADS COMMANDS UID\n");
    return 2;
}
