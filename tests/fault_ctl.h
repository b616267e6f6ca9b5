/* A scripted, faulty NVMe controller for the queue pair's fault tests
 * (tests/test_faults.c): the test decides every step. It works on a pair's
 * rings and doorbells only (the controller-visible memory), so the same
 * script runs against any version of the pair:
 *
 *   fctl_fetch(r, n)          take the SQ doorbell, fetch up to n commands in order
 *   fctl_exec(r, cmd)         carry a fetched Read or Write out on the RAM disk (PRP1, one page)
 *   fctl_post(r, cid, sf, h)  post any completion: any CID, status field, SQ head
 *   fctl_complete(r, sf)      the oldest fetched command: execute, post its true completion
 *   fctl_peek_cid(r, k)       the CID of the k-th command not yet fetched (a premature
 *                             completion names it)
 *
 * Posting waits for CQ space (the CQ head doorbell), harvesting the pair
 * meanwhile as a polling user would (host clients; `harvest` 0 when GPU
 * threads are the clients, which harvest themselves); if the pair never
 * frees the space (a completion it did not consume) the test fails there.
 * Failures go through FCTL_ASSERT: Criterion's cr_assert unless the includer
 * defines it (the CUDA fault test does). */
#ifndef GPUMEM_TEST_FAULT_CTL_H
#define GPUMEM_TEST_FAULT_CTL_H
#ifndef FCTL_ASSERT
#include <criterion/criterion.h>
#define FCTL_ASSERT(...) cr_assert(__VA_ARGS__)
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpumem_nvme.h"

#define FCTL_DEPTH 16u
#define FCTL_CIDS 8u
#define FCTL_BLOCKS 256u
#define FCTL_LBA 512u
#define FCTL_HELD 64u /* fetched, not yet completed */

typedef struct fctl {
    uint64_t state[2048]; /* first: the pair state's 16-byte alignment comes from the allocation's */
    gpumem_nvme_qp qp;
    gpumem_nvme_cmd sq[FCTL_DEPTH];
    gpumem_nvme_cpl cq[FCTL_DEPTH];
    uint32_t doorbells[2];
#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
    gpumem_nvme_qp_signals signals;
#endif
    unsigned char disk[FCTL_BLOCKS * FCTL_LBA];
    /* the controller's side */
    uint32_t sq_head;  /* next entry to fetch */
    uint32_t cq_tail;  /* next entry to post */
    uint32_t phase;    /* phase it posts with */
    gpumem_nvme_cmd held[FCTL_HELD]; /* fetched, FIFO */
    uint32_t n_held;
    int harvest;       /* harvest the pair while waiting (the clients are host threads) */
    uint32_t posted;   /* completions posted (a watchdog's progress count) */
} fctl;

#ifdef __CUDACC__
#define FCTL_HD __host__ __device__ /* the CUDA fault test checks data on the device */
#else
#define FCTL_HD
#endif

/* The disk's initial content: every byte names its block. */
static inline FCTL_HD unsigned char fctl_disk_byte(uint64_t lba, uint32_t k) { return (unsigned char)(lba * 7u + k * 13u + 1u); }

static inline void fctl_desc(fctl *r, gpumem_nvme_qp_desc *d) {
    memset(d, 0, sizeof *d);
    d->depth = FCTL_DEPTH;
    d->n_cids = FCTL_CIDS;
    d->qid = 1;
    d->ns.nsid = 1;
    d->ns.lba_shift = 9;
    d->ns.n_blocks = FCTL_BLOCKS;
    d->ns.max_blocks = 8;
    d->sq = r->sq;
    d->cq = r->cq;
    d->sq_doorbell = &r->doorbells[0];
    d->cq_doorbell = &r->doorbells[1];
    d->state = r->state;
    d->state_bytes = sizeof r->state;
#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
    d->signals = &r->signals;
#endif
}

/* Forget everything fetched and start the rings afresh (after a reset, as a
 * recreated queue does). */
static inline void fctl_restart(fctl *r) {
    r->sq_head = r->cq_tail = 0;
    r->phase = 1;
    r->n_held = 0;
}

/* Set up r (fctl bytes, 64-byte aligned, where both the clients and this
 * controller reach it): the pair, a disk of known content, the controller. */
static inline void fctl_init(fctl *r, uint32_t cmd_timeout_ms) {
    gpumem_nvme_qp_desc d;
    uint64_t b;
    uint32_t k;
    memset(r, 0, sizeof *r);
    fctl_desc(r, &d);
#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
    d.cmd_timeout_ms = cmd_timeout_ms;
#else
    (void)cmd_timeout_ms; /* 0.3.0: no command timeout */
#endif
    FCTL_ASSERT(gpumem_nvme_qp_init(&r->qp, &d) == GPUMEM_OK, "pair init");
    for (b = 0; b < FCTL_BLOCKS; b++)
        for (k = 0; k < FCTL_LBA; k++) r->disk[b * FCTL_LBA + k] = fctl_disk_byte(b, k);
    fctl_restart(r);
    r->harvest = 1;
}

static inline fctl *fctl_new(uint32_t cmd_timeout_ms) {
    fctl *r = (fctl *)aligned_alloc(4096, GPUMEM_ALIGN_UP(sizeof(fctl), 4096)); /* a multiple, as C11 requires */
    FCTL_ASSERT(r != NULL, "allocation");
    fctl_init(r, cmd_timeout_ms);
    return r;
}

/* Fetch up to n commands the doorbell has handed over; returns how many. */
static inline uint32_t fctl_fetch(fctl *r, uint32_t n) {
    uint32_t db = __atomic_load_n(&r->doorbells[0], __ATOMIC_ACQUIRE), got = 0;
    while (got < n && r->sq_head != db) {
        FCTL_ASSERT(r->n_held < FCTL_HELD, "too many fetched commands held");
        r->held[r->n_held++] = r->sq[r->sq_head];
        r->sq_head = (r->sq_head + 1) % FCTL_DEPTH;
        got++;
    }
    return got;
}

/* Fetch exactly n, harvesting (as a user would) while they come. */
static inline void fctl_fetch_n(fctl *r, uint32_t n) {
    uint32_t got = 0, spins = 0;
    while (got < n) {
        got += fctl_fetch(r, n - got);
        if (got < n) {
            FCTL_ASSERT(++spins < 5000000u, "only %u of %u commands reached the controller", got, n);
            if (r->harvest) gpumem__cq_harvest(&r->qp);
        }
    }
}

static inline void fctl_exec(fctl *r, const gpumem_nvme_cmd *c) {
    uint64_t slba = (uint64_t)c->cdw10 | ((uint64_t)c->cdw11 << 32);
    uint64_t bytes = ((uint64_t)(c->cdw12 & 0xFFFFu) + 1) * FCTL_LBA;
    void *buf = (void *)(uintptr_t)c->prp1;
    uint32_t op = c->cdw0 & 0xFFu;
    FCTL_ASSERT(slba * FCTL_LBA + bytes <= sizeof r->disk && bytes <= 4096 - (c->prp1 & 4095), "command range");
    if (op == GPUMEM_NVME_OP_READ) memcpy(buf, r->disk + slba * FCTL_LBA, bytes);
    else if (op == GPUMEM_NVME_OP_WRITE) memcpy(r->disk + slba * FCTL_LBA, buf, bytes);
}

/* Post a completion with the given CID, status field and SQ head position,
 * with the right phase (phase_ok) or the wrong one. Data before the phase:
 * a release store of dw3, as a device's posted write would be ordered. */
static inline void fctl_post_phase(fctl *r, uint16_t cid, uint16_t sf, uint32_t sq_head, int phase_ok) {
    gpumem_nvme_cpl *e;
    uint32_t spins = 0;
    while (((r->cq_tail - __atomic_load_n(&r->doorbells[1], __ATOMIC_ACQUIRE)) & (FCTL_DEPTH - 1)) >= FCTL_DEPTH - 1) {
        FCTL_ASSERT(++spins < 5000000u, "the CQ stays full: the pair does not consume completions");
        if (r->harvest) gpumem__cq_harvest(&r->qp);
    }
    e = &r->cq[r->cq_tail];
    e->dw0 = 0;
    e->dw1 = 0;
    e->dw2 = (sq_head & 0xFFFFu) | (1u << 16);
    __atomic_store_n(&e->dw3, (uint32_t)cid | ((phase_ok ? r->phase : r->phase ^ 1u) << 16) | ((uint32_t)sf << 17),
                     __ATOMIC_RELEASE);
    r->cq_tail = (r->cq_tail + 1) % FCTL_DEPTH;
    if (r->cq_tail == 0) r->phase ^= 1u;
    __atomic_fetch_add(&r->posted, 1, __ATOMIC_RELAXED);
}

static inline void fctl_post(fctl *r, uint16_t cid, uint16_t sf, uint32_t sq_head) {
    fctl_post_phase(r, cid, sf, sq_head, 1);
}

/* Give a posted entry (counting back from the tail: 1 = the last) its
 * right phase, as a controller that rewrites a botched entry would. */
static inline void fctl_fix_phase(fctl *r, uint32_t back) {
    uint32_t at = (r->cq_tail + FCTL_DEPTH - back) % FCTL_DEPTH;
    uint32_t lap_phase = at < r->cq_tail ? r->phase : r->phase ^ 1u;
    uint32_t dw3 = r->cq[at].dw3;
    __atomic_store_n(&r->cq[at].dw3, (dw3 & ~(1u << 16)) | (lap_phase << 16), __ATOMIC_RELEASE);
}

/* Take the oldest fetched command off the held list. */
static inline gpumem_nvme_cmd fctl_pop(fctl *r) {
    gpumem_nvme_cmd c;
    FCTL_ASSERT(r->n_held > 0, "no fetched command to complete");
    c = r->held[0];
    memmove(r->held, r->held + 1, (r->n_held - 1) * sizeof r->held[0]);
    r->n_held--;
    return c;
}

/* Execute the oldest fetched command and post its true completion (status
 * sf, the SQ head as fetched so far). Returns its CID. */
static inline uint16_t fctl_complete(fctl *r, uint16_t sf) {
    gpumem_nvme_cmd c = fctl_pop(r);
    fctl_exec(r, &c);
    fctl_post(r, (uint16_t)(c.cdw0 >> 16), sf, r->sq_head);
    return (uint16_t)(c.cdw0 >> 16);
}

static inline uint16_t fctl_peek_cid(fctl *r, uint32_t k) {
    return (uint16_t)(r->sq[(r->sq_head + k) % FCTL_DEPTH].cdw0 >> 16);
}

#endif
