/* Issue 30, finding 6: a pair reset while threads call into it. Built with
 * ThreadSanitizer and run by `make test` (a plain program, as race_stats.c).
 * Three worker threads hammer one pair of a software controller - one
 * submits batches and polls them, one submits and waits, one makes
 * blocking reads - while the main thread resets the pair again and again
 * (gpumem_swctl_reset_begin, a moment, gpumem_swctl_reset_end, which is
 * called again while it says GPUMEM_EBUSY). Every operation is counted by
 * its result: a read that succeeded must hold its block's bytes (each
 * block's words name the block and their place), one that was refused or
 * ended by the reset must say GPUMEM_EABORTED or GPUMEM_EAGAIN, anything
 * else is counted bad, and every request submitted must end. Each reset
 * begins only once a read has succeeded since the last one. Afterwards
 * the pair must serve every command ID again and be destroyed. TSan
 * (halt_on_error) fails the run on a race - the reinitialisation writing
 * the pair's words while a thread inside a call reads them; the program
 * fails it on a bad count. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_swctl.h"

#define RESETS 60
#define BLOCKS 64
#define BATCH 4

static gpumem_nvme_qp *g_qp;
static uint64_t g_ram[BLOCKS * 64]; /* 512-byte blocks of 64 words */
static int g_stop;
static uint64_t g_good; /* reads that succeeded, all users (atomic): each reset waits for one more */

/* Word i of block b. */
static uint64_t word_of(uint64_t b, uint32_t i) { return (b << 16) ^ ((uint64_t)i << 4) ^ 0x5A5A000000000000ull; }

typedef struct counts {
    uint64_t ok, aborted, again, bad; /* reads by result */
    uint64_t tries;                   /* every read tried: ok + aborted + again + bad */
} counts;

/* A finished read: its status, and for GPUMEM_OK its bytes. */
static void judge(counts *c, gpumem_status st, const uint64_t *buf, uint64_t block) {
    uint32_t i;
    if (st == GPUMEM_OK) {
        for (i = 0; i < 64; i++)
            if (buf[i] != word_of(block, i)) break;
        if (i == 64) c->ok++, __atomic_fetch_add(&g_good, 1, __ATOMIC_RELAXED);
        else c->bad++;
    } else if (st == GPUMEM_EABORTED) {
        c->aborted++;
        sched_yield(); /* a reset is under way: let it go on */
    } else {
        fprintf(stderr, "race_reset: a read ended with %s\n", gpumem_status_str(st));
        c->bad++;
    }
}

static int stopping(void) { return __atomic_load_n(&g_stop, __ATOMIC_ACQUIRE); }

/* Submit a batch, then poll each request until it ends (or wait for it). */
static void *async_user(void *p) {
    const int use_wait = p != NULL;
    static counts by_kind[2];
    counts *c = &by_kind[use_wait];
    uint64_t rng = use_wait ? 99 : 7;
    while (!stopping()) {
        static _Alignas(64) uint64_t bufs[2][BATCH][64];
        gpumem_nvme_req req[BATCH];
        uint64_t block[BATCH];
        int out[BATCH];
        uint32_t k;
        memset(req, 0, sizeof req);
        for (k = 0; k < BATCH; k++) {
            gpumem_status st;
            block[k] = (rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 58;
            memset(bufs[use_wait][k], 0, 512);
            c->tries++;
            st = gpumem_nvme_qp_submit_buf(g_qp, GPUMEM_NVME_OP_READ, block[k], 1, bufs[use_wait][k], &req[k]);
            out[k] = st == GPUMEM_OK;
            if (st == GPUMEM_EAGAIN) c->again++;
            else if (st != GPUMEM_OK) judge(c, st, NULL, 0);
        }
        for (k = 0; k < BATCH; k++) {
            gpumem_status st;
            if (!out[k]) continue;
            if (use_wait) {
                st = gpumem_nvme_qp_wait(g_qp, &req[k]);
            } else {
                while ((st = gpumem_nvme_qp_poll(g_qp, &req[k])) == GPUMEM_EAGAIN) sched_yield();
            }
            judge(c, st, bufs[use_wait][k], block[k]);
            /* Ended: its buffer is the caller's again (aborted: the queues were deleted first). */
            if (gpumem_nvme_req_busy(g_qp, &req[k]) != 0) c->bad++;
        }
    }
    return c;
}

static void *blocking_user(void *p) {
    static counts c;
    static _Alignas(64) uint64_t buf[64];
    uint64_t rng = 3;
    (void)p;
    while (!stopping()) {
        uint64_t block = (rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 58;
        memset(buf, 0, sizeof buf);
        c.tries++;
        judge(&c, gpumem_nvme_qp_read_buf(g_qp, block, 1, buf, NULL), buf, block);
    }
    return &c;
}

int main(void) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    pthread_t t[3];
    counts *c[3], all;
    uint32_t b, i, resets = 0, busy = 0;
    uint64_t buf[64];
    int fail = 0;
    for (b = 0; b < BLOCKS; b++)
        for (i = 0; i < 64; i++) g_ram[b * 64 + i] = word_of(b, i);
    cfg.n_blocks = BLOCKS;
    cfg.ram = g_ram;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, 16, &g_qp) != GPUMEM_OK ||
        gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "race_reset: setup failed\n");
        return 1;
    }
    pthread_create(&t[0], NULL, async_user, NULL);
    pthread_create(&t[1], NULL, async_user, (void *)1);
    pthread_create(&t[2], NULL, blocking_user, NULL);
    for (i = 0; i < RESETS; i++) {
        gpumem_status st;
        const uint64_t good = __atomic_load_n(&g_good, __ATOMIC_RELAXED);
        while (__atomic_load_n(&g_good, __ATOMIC_RELAXED) == good) sched_yield(); /* the users are in */
        if ((st = gpumem_swctl_reset_begin(ctl, g_qp)) != GPUMEM_OK) {
            fprintf(stderr, "race_reset: reset_begin: %s\n", gpumem_status_str(st));
            fail = 1;
            break;
        }
        sched_yield();
        while ((st = gpumem_swctl_reset_end(ctl, g_qp)) == GPUMEM_EBUSY) busy++, sched_yield();
        if (st != GPUMEM_OK) {
            fprintf(stderr, "race_reset: reset_end: %s\n", gpumem_status_str(st));
            fail = 1;
            break;
        }
        resets++;
    }
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    memset(&all, 0, sizeof all);
    for (i = 0; i < 3; i++) {
        pthread_join(t[i], (void **)&c[i]);
        all.ok += c[i]->ok, all.aborted += c[i]->aborted, all.again += c[i]->again, all.bad += c[i]->bad;
        all.tries += c[i]->tries;
        printf("race_reset: user %u: %lu reads tried: %lu ok, %lu aborted, %lu refused for now, %lu bad\n", i,
               (unsigned long)c[i]->tries, (unsigned long)c[i]->ok, (unsigned long)c[i]->aborted,
               (unsigned long)c[i]->again, (unsigned long)c[i]->bad);
    }
    /* Afterwards: every command ID serves a read again (twice the IDs in a
     * row), nothing is held, and the controller goes away. */
    for (i = 0; i < 2 * g_qp->n_cids; i++) {
        memset(buf, 0, sizeof buf);
        if (gpumem_nvme_qp_read_buf(g_qp, i % BLOCKS, 1, buf, NULL) != GPUMEM_OK || buf[5] != word_of(i % BLOCKS, 5))
            all.bad++;
    }
    if (gpumem_nvme_qp_check_idle(g_qp) != GPUMEM_OK) fprintf(stderr, "race_reset: the pair is not idle\n"), fail = 1;
    if (gpumem_swctl_destroy(ctl) != GPUMEM_OK) fprintf(stderr, "race_reset: destroy refused\n"), fail = 1;
    printf("race_reset: %u resets (reset_end said busy %u times); %lu reads tried: %lu ok, %lu aborted, %lu "
           "refused for now, %lu bad\n",
           resets, busy, (unsigned long)all.tries, (unsigned long)all.ok, (unsigned long)all.aborted,
           (unsigned long)all.again, (unsigned long)all.bad);
    if (all.ok + all.aborted + all.again + all.bad != all.tries) fprintf(stderr, "race_reset: reads lost count\n"), fail = 1;
    if (resets != RESETS || all.bad != 0 || all.ok < RESETS) fail = 1;
    return fail;
}
