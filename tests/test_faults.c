/* The queue pair against a faulty controller (issue 19): a scripted
 * controller (tests/fault_ctl.h) sends strays, stale repeats, duplicates,
 * premature completions, impossible SQ heads, a wrong phase, or nothing at
 * all, one fault at a time, through the public pair API. Every test checks
 * data by content and, afterwards, that one thread can hold every command
 * ID (all but the reserved ones while timed-out commands are outstanding).
 *
 * Built twice by the Makefile, with and without NDEBUG: no check may rest
 * on GPUMEM_ASSERT. The same file builds against version 0.3.0's header
 * (FAULTS_NEW 0: no command timeout, statistics or reset there); each fault
 * test fails on 0.3.0 (wrong result, crash, or a hang ended by .timeout). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>

#include "fault_ctl.h"

#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
#define FAULTS_NEW 1
/* One thread may hold every ID: the budget's full limit (a blocking
 * caller's), not the asynchronous share. */
#define HOLD_LIMIT(qp) ((qp)->cid_limit)
#define HOLD_SUBMIT(qp, c, req) gpumem__qp_submit_within(qp, c, (const gpumem_nvme_iomap *)0, req, (qp)->cid_limit)
/* The CID of the first command under ID id: generation 1. */
#define FIRST_CID(qp, id) ((uint16_t)((id) | (1u << (qp)->cid_shift)))
#else
#define FAULTS_NEW 0
#define HOLD_LIMIT(qp) ((qp)->n_cids)
#define HOLD_SUBMIT(qp, c, req) gpumem_nvme_qp_submit(qp, c, req)
#define FIRST_CID(qp, id) ((uint16_t)(id))
#endif

#define FAST_TIMEOUT_MS 150u /* the command timeout of pairs whose tests wait it out */
#define BOUND .timeout = 30  /* a hang (0.3.0) fails the test instead of the suite */

static unsigned char bufs[48][4096] __attribute__((aligned(4096)));

static void pattern(unsigned char *b, uint64_t lba, uint32_t tag) {
    uint32_t k;
    for (k = 0; k < FCTL_LBA; k++) b[k] = (unsigned char)(lba * 31u + tag * 101u + k * 7u + 3u);
}
static int pattern_ok(const unsigned char *b, uint64_t lba, uint32_t tag) {
    unsigned char want[FCTL_LBA];
    pattern(want, lba, tag);
    return memcmp(b, want, FCTL_LBA) == 0;
}
/* The disk's first content for one block (fault_ctl.h). */
static int disk_ok(const unsigned char *b, uint64_t lba) {
    uint32_t k;
    for (k = 0; k < FCTL_LBA; k++)
        if (b[k] != fctl_disk_byte(lba, k)) return 0;
    return 1;
}

static gpumem_nvme_cmd rw_cmd(fctl *r, uint8_t op, uint64_t lba, void *buf) {
    gpumem_nvme_cmd c;
    cr_assert_eq(gpumem_nvme_cmd_rw(&c, op, &r->qp.ns, lba, 1, (uint64_t)(uintptr_t)buf, 0), GPUMEM_OK);
    return c;
}
static void submit_ok(fctl *r, uint8_t op, uint64_t lba, void *buf, gpumem_nvme_req *req) {
    gpumem_nvme_cmd c = rw_cmd(r, op, lba, buf);
    gpumem_status st = HOLD_SUBMIT(&r->qp, &c, req);
    cr_assert_eq(st, GPUMEM_OK, "submit at LBA %llu: %s", (unsigned long long)lba, gpumem_status_str(st));
}
/* Poll until the request leaves EAGAIN (the test's .timeout bounds it). */
static gpumem_status poll_end(fctl *r, gpumem_nvme_req *req) {
    gpumem_status st;
    while ((st = gpumem_nvme_qp_poll(&r->qp, req)) == GPUMEM_EAGAIN) gpumem__cq_harvest(&r->qp);
    return st;
}

/* One thread holds every ID but `reserved`: as many writes as that
 * submitted at once (one more is refused), completed, then read back and
 * checked byte by byte, at LBAs lba0.. with pattern tag. */
static void check_all_ids(fctl *r, uint32_t reserved, uint64_t lba0, uint32_t tag) {
    const uint32_t n = HOLD_LIMIT(&r->qp) - reserved;
    gpumem_nvme_req w[FCTL_CIDS], extra;
    gpumem_nvme_cmd c;
    uint32_t i;
    gpumem_status st;
    for (i = 0; i < n; i++) {
        pattern(bufs[i], lba0 + i, tag);
        c = rw_cmd(r, GPUMEM_NVME_OP_WRITE, lba0 + i, bufs[i]);
        st = HOLD_SUBMIT(&r->qp, &c, &w[i]);
        cr_assert_eq(st, GPUMEM_OK, "one thread should hold %u IDs (%u reserved), but ID %u could not be taken: %s",
                     n, reserved, i + 1, gpumem_status_str(st));
    }
    c = rw_cmd(r, GPUMEM_NVME_OP_WRITE, lba0 + n, bufs[n]);
    cr_assert_eq(HOLD_SUBMIT(&r->qp, &c, &extra), GPUMEM_EAGAIN, "an ID beyond the %u free ones was taken", n);
    fctl_fetch_n(r, n);
    for (i = 0; i < n; i++) fctl_complete(r, 0);
    for (i = 0; i < n; i++) cr_assert_eq(poll_end(r, &w[i]), GPUMEM_OK, "write %u", i);
    for (i = 0; i < n; i++) {
        memset(bufs[16 + i], 0, FCTL_LBA);
        submit_ok(r, GPUMEM_NVME_OP_READ, lba0 + i, bufs[16 + i], &w[i]);
    }
    fctl_fetch_n(r, n);
    for (i = 0; i < n; i++) fctl_complete(r, 0);
    for (i = 0; i < n; i++) {
        cr_assert_eq(poll_end(r, &w[i]), GPUMEM_OK, "read %u", i);
        cr_assert(pattern_ok(bufs[16 + i], lba0 + i, tag), "read %u returned the wrong data", i);
        cr_assert(pattern_ok(r->disk + (lba0 + i) * FCTL_LBA, lba0 + i, tag), "write %u is not on the disk", i);
    }
}

#if FAULTS_NEW
static gpumem_nvme_qp_stats stats(fctl *r) {
    gpumem_nvme_qp_stats s;
    cr_assert_eq(gpumem_nvme_qp_get_stats(&r->qp, &s), GPUMEM_OK);
    return s;
}
#endif

/* ---- strays ------------------------------------------------------------------ */

Test(faults, stray_for_free_ids, BOUND) {
    fctl *r = fctl_new(0);
    uint32_t id;
    /* Before any ID is taken: a completion for every ID as generation 0
     * (never sent), and one with the CID each ID's first command will
     * carry (0.3.0: the bare ID both times). */
    for (id = 0; id < FCTL_CIDS; id++) {
        fctl_post(r, (uint16_t)id, 0, 0);
        fctl_post(r, FIRST_CID(&r->qp, id), 0, 0);
    }
    check_all_ids(r, 0, 0, 1);
    check_all_ids(r, 0, 0, 2);
#if FAULTS_NEW
    {
        gpumem_nvme_qp_stats s = stats(r);
        cr_assert_eq(s.dropped, 2 * FCTL_CIDS, "dropped %u", s.dropped);
        cr_assert_eq(s.stray + s.early, 2 * FCTL_CIDS);
        cr_assert(gpumem_nvme_qp_faults(&r->qp) & GPUMEM_NVME_FAULT_STRAY);
    }
#endif
    free(r);
}

Test(faults, stray_after_the_id_is_taken, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req w;
    pattern(bufs[40], 7, 3);
    submit_ok(r, GPUMEM_NVME_OP_WRITE, 7, bufs[40], &w);
    /* A CID that names w's ID under another generation (0.3.0 masks it onto w's ID). */
    fctl_post(r, (uint16_t)(w.cid + 5u * FCTL_CIDS), 0, 1);
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &w), GPUMEM_EAGAIN,
                 "a stray completion was delivered before the write reached the controller");
    cr_assert(disk_ok(r->disk + 7 * FCTL_LBA, 7), "nothing was written yet");
    fctl_fetch_n(r, 1);
    fctl_complete(r, 0);
    cr_assert_eq(poll_end(r, &w), GPUMEM_OK);
    cr_assert(pattern_ok(r->disk + 7 * FCTL_LBA, 7, 3));
    check_all_ids(r, 0, 32, 4);
#if FAULTS_NEW
    cr_assert_eq(stats(r).stale, 1);
#endif
    free(r);
}

Test(faults, out_of_range_cid, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req q;
    memset(bufs[40], 0xEE, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 9, bufs[40], &q);
    fctl_fetch_n(r, 1);
    /* CIDs past n_cids - 1: one whose low bits are q's ID, one whose low
     * bits name a free ID. */
    fctl_post(r, (uint16_t)(0xFFF8u | (q.cid & (FCTL_CIDS - 1))), 0, r->sq_head);
    fctl_post(r, (uint16_t)(0xFFF8u | ((q.cid + 3) & (FCTL_CIDS - 1))), 0, r->sq_head);
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &q), GPUMEM_EAGAIN, "an out-of-range CID completed the read");
    fctl_complete(r, 0);
    cr_assert_eq(poll_end(r, &q), GPUMEM_OK);
    cr_assert(disk_ok(bufs[40], 9), "the read's data");
    check_all_ids(r, 0, 40, 5);
#if FAULTS_NEW
    cr_assert_eq(stats(r).dropped, 2);
#endif
    free(r);
}

/* ---- stale repeats and duplicates ----------------------------------------------- */

Test(faults, stale_repeat_after_reuse, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req q[FCTL_CIDS];
    uint16_t old_cid[FCTL_CIDS];
    uint32_t old_head[FCTL_CIDS], i, n = HOLD_LIMIT(&r->qp);
    /* Every ID completes once; the controller keeps what it posted. */
    for (i = 0; i < 2 * FCTL_CIDS; i++) {
        uint32_t id;
        memset(bufs[40], 0, FCTL_LBA);
        submit_ok(r, GPUMEM_NVME_OP_READ, i, bufs[40], &q[0]);
        fctl_fetch_n(r, 1);
        id = q[0].cid & (FCTL_CIDS - 1);
        old_cid[id] = fctl_complete(r, 0);
        old_head[id] = r->sq_head;
        cr_assert_eq(poll_end(r, &q[0]), GPUMEM_OK);
        cr_assert(disk_ok(bufs[40], i));
    }
    /* Every ID again; each command's old completion is repeated before it runs. */
    for (i = 0; i < n; i++) {
        memset(bufs[20 + i], 0, FCTL_LBA);
        submit_ok(r, GPUMEM_NVME_OP_READ, 100 + i, bufs[20 + i], &q[i]);
    }
    fctl_fetch_n(r, n);
    for (i = 0; i < n; i++) {
        uint32_t id = q[i].cid & (FCTL_CIDS - 1);
        fctl_post(r, old_cid[id], 0, old_head[id]);
    }
    for (i = 0; i < n; i++)
        cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &q[i]), GPUMEM_EAGAIN,
                     "read %u got its ID's old completion (its buffer is still empty)", i);
    for (i = 0; i < n; i++) fctl_complete(r, 0);
    for (i = 0; i < n; i++) {
        cr_assert_eq(poll_end(r, &q[i]), GPUMEM_OK);
        cr_assert(disk_ok(bufs[20 + i], 100 + i), "read %u", i);
    }
    check_all_ids(r, 0, 50, 6);
#if FAULTS_NEW
    cr_assert_eq(stats(r).stale, n);
#endif
    free(r);
}

Test(faults, every_completion_sent_twice, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req q;
    uint32_t i, rounds = 4 * FCTL_CIDS;
    for (i = 0; i < rounds; i++) {
        uint64_t lba = 60 + (i % 16);
        uint16_t cid;
        int write = (i / 16) % 2 == 0;
        if (write) pattern(bufs[40], lba, 7);
        else memset(bufs[40], 0, FCTL_LBA);
        submit_ok(r, write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ, lba, bufs[40], &q);
        fctl_fetch_n(r, 1);
        cid = fctl_complete(r, 0);
        cr_assert_eq(poll_end(r, &q), GPUMEM_OK, "command %u", i);
        cr_assert(pattern_ok(write ? r->disk + lba * FCTL_LBA : bufs[40], lba, 7), "command %u's data", i);
        fctl_post(r, cid, 0, r->sq_head); /* the same completion again */
    }
    check_all_ids(r, 0, 80, 8);
#if FAULTS_NEW
    cr_assert_eq(stats(r).dropped, rounds, "dropped %u of %u repeats", stats(r).dropped, rounds);
    /* The last repeat may meet its ID taken again: a stale one then. */
    cr_assert_eq(stats(r).duplicate + stats(r).stale, rounds);
#endif
    free(r);
}

/* ---- premature completions ------------------------------------------------------ */

Test(faults, completion_before_fetch, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req w, q;
    /* (a) Waiting in the CQ before the ID is taken: the CID the first
     * command will carry, with an SQ head that has consumed nothing. */
    fctl_post(r, FIRST_CID(&r->qp, 0), 0, 0);
    pattern(bufs[40], 5, 9);
    submit_ok(r, GPUMEM_NVME_OP_WRITE, 5, bufs[40], &w);
    cr_assert_eq(w.cid, FIRST_CID(&r->qp, 0));
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &w), GPUMEM_EAGAIN, "a completion posted before submission was taken");
    fctl_fetch_n(r, 1);
    fctl_complete(r, 0);
    cr_assert_eq(poll_end(r, &w), GPUMEM_OK);
    cr_assert(pattern_ok(r->disk + 5 * FCTL_LBA, 5, 9));
    /* (b) The right CID, but an SQ head that has not passed the command. */
    memset(bufs[41], 0xEE, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 6, bufs[41], &q);
    fctl_post(r, fctl_peek_cid(r, 0), 0, r->sq_head);
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &q), GPUMEM_EAGAIN,
                 "a completion whose SQ head shows the read not fetched was delivered");
    fctl_fetch_n(r, 1);
    fctl_complete(r, 0);
    cr_assert_eq(poll_end(r, &q), GPUMEM_OK);
    cr_assert(disk_ok(bufs[41], 6), "the read's data");
    check_all_ids(r, 0, 90, 10);
#if FAULTS_NEW
    cr_assert_eq(stats(r).early, 2);
#endif
    free(r);
}

/* ---- impossible SQ heads ----------------------------------------------------------- */

/* After the fault, laps of traffic: every command must run and its data be
 * there (an overwritten, unread SQ entry would lose one). */
static void laps_of_traffic(fctl *r, uint64_t lba0) {
    uint32_t k;
    for (k = 0; k < 4; k++) check_all_ids(r, 0, lba0 + 8 * k, 20 + k);
}

Test(faults, sq_head_beyond_tail, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req w;
    uint16_t cid;
    pattern(bufs[40], 3, 11);
    submit_ok(r, GPUMEM_NVME_OP_WRITE, 3, bufs[40], &w);
    fctl_fetch_n(r, 1);
    fctl_exec(r, &r->held[0]);
    cid = (uint16_t)(r->held[0].cdw0 >> 16);
    fctl_post(r, cid, 0, r->sq_head + 5); /* 5 past everything submitted */
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &w), GPUMEM_EAGAIN, "a completion with an impossible SQ head was taken");
    fctl_pop(r);
    fctl_post(r, cid, 0, r->sq_head); /* then the true one */
    cr_assert_eq(poll_end(r, &w), GPUMEM_OK);
    cr_assert(pattern_ok(r->disk + 3 * FCTL_LBA, 3, 11));
    laps_of_traffic(r, 100);
#if FAULTS_NEW
    cr_assert_eq(stats(r).bad_sq_head, 1);
    cr_assert(gpumem_nvme_qp_faults(&r->qp) & GPUMEM_NVME_FAULT_SQ_HEAD);
#endif
    free(r);
}

Test(faults, sq_head_moving_backwards, BOUND) {
    fctl *r = fctl_new(0);
    gpumem_nvme_req w[4];
    uint32_t i;
    uint16_t cid;
    for (i = 0; i < 4; i++) {
        pattern(bufs[40 + i], 140 + i, 12);
        submit_ok(r, GPUMEM_NVME_OP_WRITE, 140 + i, bufs[40 + i], &w[i]);
    }
    fctl_fetch_n(r, 4);
    cid = (uint16_t)(r->held[0].cdw0 >> 16);
    fctl_exec(r, &r->held[0]);
    fctl_pop(r);
    fctl_post(r, cid, 0, 3); /* head 3: plausible (4 fetched) */
    cr_assert_eq(poll_end(r, &w[0]), GPUMEM_OK);
    cid = (uint16_t)(r->held[0].cdw0 >> 16);
    fctl_exec(r, &r->held[0]);
    fctl_post(r, cid, 0, 0); /* then back to 0 */
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &w[1]), GPUMEM_EAGAIN, "a completion with a backward SQ head was taken");
    fctl_pop(r);
    fctl_post(r, cid, 0, r->sq_head);
    for (i = 2; i < 4; i++) fctl_complete(r, 0);
    for (i = 1; i < 4; i++) cr_assert_eq(poll_end(r, &w[i]), GPUMEM_OK);
    for (i = 0; i < 4; i++) cr_assert(pattern_ok(r->disk + (140 + i) * FCTL_LBA, 140 + i, 12), "write %u", i);
    laps_of_traffic(r, 150);
#if FAULTS_NEW
    cr_assert_eq(stats(r).bad_sq_head, 1);
#endif
    free(r);
}

/* ---- timeouts ---------------------------------------------------------------------- */

typedef struct blocking_io {
    fctl *r;
    uint8_t op;
    uint64_t lba;
    unsigned char *buf;
    gpumem_status st;
} blocking_io;

static void *blocking_main(void *arg) {
    blocking_io *b = (blocking_io *)arg;
    b->st = gpumem_nvme_qp_rw(&b->r->qp, b->op, b->lba, 1, (uint64_t)(uintptr_t)b->buf, 0, NULL);
    return NULL;
}

static void start_blocking(blocking_io *b, pthread_t *t, fctl *r, uint8_t op, uint64_t lba, unsigned char *buf) {
    b->r = r;
    b->op = op;
    b->lba = lba;
    b->buf = buf;
    b->st = GPUMEM_OK;
    cr_assert_eq(pthread_create(t, NULL, blocking_main, b), 0);
}

Test(faults, wrong_phase, BOUND) {
    fctl *r = fctl_new(FAST_TIMEOUT_MS);
    blocking_io b[3];
    pthread_t t[3];
    uint32_t i;
    for (i = 0; i < 3; i++) {
        memset(bufs[40 + i], 0, FCTL_LBA);
        start_blocking(&b[i], &t[i], r, GPUMEM_NVME_OP_READ, 10 + i, bufs[40 + i]);
    }
    fctl_fetch_n(r, 3);
    /* The first completion with the wrong phase; the two behind it right. */
    {
        gpumem_nvme_cmd c = fctl_pop(r);
        fctl_exec(r, &c);
        fctl_post_phase(r, (uint16_t)(c.cdw0 >> 16), 0, r->sq_head, 0);
    }
    fctl_complete(r, 0);
    fctl_complete(r, 0);
    for (i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
#if FAULTS_NEW
        cr_assert_eq(b[i].st, GPUMEM_ETIMEDOUT, "read %u: %s", i, gpumem_status_str(b[i].st));
#endif
    }
#if FAULTS_NEW
    {
        gpumem_nvme_qp_stats s = stats(r);
        gpumem_nvme_req held[FCTL_CIDS], extra;
        uint32_t n = HOLD_LIMIT(&r->qp) - 3;
        gpumem_nvme_cmd c;
        cr_assert_eq(s.timed_out, 3);
        cr_assert_eq(s.orphans, 3);
        /* Every ID but the three reserved ones. */
        for (i = 0; i < n; i++) submit_ok(r, GPUMEM_NVME_OP_READ, 20 + i, bufs[i], &held[i]);
        c = rw_cmd(r, GPUMEM_NVME_OP_READ, 30, bufs[n]);
        cr_assert_eq(HOLD_SUBMIT(&r->qp, &c, &extra), GPUMEM_EAGAIN, "a reserved ID was handed out");
        /* The controller rewrites the entry with the right phase: the three
         * completions arrive late, are dropped, and free their IDs. */
        fctl_fix_phase(r, 3);
        fctl_fetch_n(r, n);
        for (i = 0; i < n; i++) fctl_complete(r, 0);
        for (i = 0; i < n; i++) {
            cr_assert_eq(poll_end(r, &held[i]), GPUMEM_OK);
            cr_assert(disk_ok(bufs[i], 20 + i));
        }
        s = stats(r);
        cr_assert_eq(s.late, 3);
        cr_assert_eq(s.orphans, 0);
        check_all_ids(r, 0, 160, 13);
    }
#endif
    free(r);
}

Test(faults, silent_controller, BOUND) {
    fctl *r = fctl_new(FAST_TIMEOUT_MS);
    blocking_io b[2];
    pthread_t t[2];
    gpumem_nvme_req q;
    uint32_t i;
    for (i = 0; i < 2; i++) {
        pattern(bufs[40 + i], 170 + i, 14);
        start_blocking(&b[i], &t[i], r, GPUMEM_NVME_OP_WRITE, 170 + i, bufs[40 + i]);
    }
    memset(bufs[42], 0, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 172, bufs[42], &q);
    /* The controller does nothing at all. */
    cr_assert_eq(poll_end(r, &q), GPUMEM_ETIMEDOUT);
    for (i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(b[i].st, GPUMEM_ETIMEDOUT);
    }
#if FAULTS_NEW
    cr_assert(gpumem_nvme_req_busy(&r->qp, &q), "the device may still write the read's buffer");
    cr_assert_eq(stats(r).orphans, 3);
    cr_assert(gpumem_nvme_qp_faults(&r->qp) & GPUMEM_NVME_FAULT_TIMEOUT);
    {
        gpumem_nvme_req held[FCTL_CIDS], extra;
        const uint32_t n = HOLD_LIMIT(&r->qp) - 3;
        gpumem_nvme_cmd c;
        for (i = 0; i < n; i++) submit_ok(r, GPUMEM_NVME_OP_READ, 180 + i, bufs[i], &held[i]);
        c = rw_cmd(r, GPUMEM_NVME_OP_READ, 190, bufs[n]);
        cr_assert_eq(HOLD_SUBMIT(&r->qp, &c, &extra), GPUMEM_EAGAIN, "a reserved ID was handed out");
        /* It wakes up: everything runs, the three given up late. */
        fctl_fetch_n(r, n + 3);
        for (i = 0; i < n + 3; i++) fctl_complete(r, 0);
        for (i = 0; i < n; i++) {
            cr_assert_eq(poll_end(r, &held[i]), GPUMEM_OK);
            cr_assert(disk_ok(bufs[i], 180 + i));
        }
        cr_assert_eq(stats(r).late, 3);
        cr_assert(!gpumem_nvme_req_busy(&r->qp, &q), "the late completion came: the buffer is the caller's again");
        cr_assert(disk_ok(bufs[42], 172), "the device wrote the read's buffer after the timeout");
        cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &q), GPUMEM_ETIMEDOUT, "a timed-out request stays timed out");
        for (i = 0; i < 2; i++) cr_assert(pattern_ok(r->disk + (170 + i) * FCTL_LBA, 170 + i, 14));
    }
    check_all_ids(r, 0, 200, 15);
#endif
    free(r);
}

Test(faults, late_completion_after_timeout, BOUND) {
    fctl *r = fctl_new(FAST_TIMEOUT_MS);
    gpumem_nvme_req late, q[FCTL_CIDS];
    uint32_t i, n = HOLD_LIMIT(&r->qp) - 1;
    memset(bufs[40], 0, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 30, bufs[40], &late);
    fctl_fetch_n(r, 1);
    cr_assert_eq(poll_end(r, &late), GPUMEM_ETIMEDOUT);
    /* Every other ID in flight, fetched, not completed. */
    for (i = 0; i < n; i++) {
        memset(bufs[i], 0, FCTL_LBA);
        submit_ok(r, GPUMEM_NVME_OP_READ, 210 + i, bufs[i], &q[i]);
    }
    fctl_fetch_n(r, n);
    fctl_complete(r, 0); /* the late one */
    for (i = 0; i < n; i++)
        cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &q[i]), GPUMEM_EAGAIN, "the late completion reached read %u", i);
#if FAULTS_NEW
    cr_assert_eq(stats(r).late, 1);
    cr_assert(!gpumem_nvme_req_busy(&r->qp, &late));
#endif
    for (i = 0; i < n; i++) fctl_complete(r, 0);
    for (i = 0; i < n; i++) {
        cr_assert_eq(poll_end(r, &q[i]), GPUMEM_OK);
        cr_assert(disk_ok(bufs[i], 210 + i));
    }
    check_all_ids(r, 0, 220, 16);
    free(r);
}

/* ---- status decode -------------------------------------------------------------------- */

Test(faults, status_decode, BOUND) {
    /* SCT 0, SC 0 with More, DNR or CRD set: success. */
    static const uint16_t ok[] = {1u << 13, 1u << 14, 1u << 11, 3u << 11, (1u << 14) | (1u << 13) | (2u << 11)};
    fctl *r = fctl_new(0);
    gpumem_nvme_req q;
    uint32_t i;
    for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        memset(bufs[40], 0, FCTL_LBA);
        submit_ok(r, GPUMEM_NVME_OP_READ, 230 + i, bufs[40], &q);
        fctl_fetch_n(r, 1);
        fctl_complete(r, ok[i]);
        cr_assert_eq(poll_end(r, &q), GPUMEM_OK, "status field 0x%04x is success", ok[i]);
        cr_assert(disk_ok(bufs[40], 230 + i));
        cr_assert_eq(gpumem_nvme_cpl_status(&q.cpl), ok[i], "the whole status field reaches the caller");
        cr_assert_str_eq(gpumem_nvme_status_str(ok[i]), "successful completion");
    }
    /* An error with DNR: EIO, and DNR visible. */
    submit_ok(r, GPUMEM_NVME_OP_READ, 240, bufs[40], &q);
    fctl_fetch_n(r, 1);
    fctl_complete(r, (uint16_t)(GPUMEM_NVME_STATUS(2, 0x81) | (1u << 14)));
    cr_assert_eq(poll_end(r, &q), GPUMEM_EIO);
    cr_assert_eq(GPUMEM_NVME_DNR(gpumem_nvme_cpl_status(&q.cpl)), 1);
#if FAULTS_NEW
    cr_assert_eq(gpumem_nvme_cpl_dnr(&q.cpl), 1);
    /* An error without DNR: a retry may help. */
    submit_ok(r, GPUMEM_NVME_OP_READ, 241, bufs[40], &q);
    fctl_fetch_n(r, 1);
    fctl_complete(r, GPUMEM_NVME_STATUS(0, 0x06));
    cr_assert_eq(poll_end(r, &q), GPUMEM_EIO);
    cr_assert_eq(gpumem_nvme_cpl_dnr(&q.cpl), 0);
    /* Aborted by SQ deletion: its own status. */
    submit_ok(r, GPUMEM_NVME_OP_READ, 242, bufs[40], &q);
    fctl_fetch_n(r, 1);
    fctl_complete(r, GPUMEM_NVME_SC_ABORTED_SQ_DELETION);
    cr_assert_eq(poll_end(r, &q), GPUMEM_EABORTED);
    cr_assert_str_neq(gpumem_status_str(GPUMEM_EABORTED), gpumem_status_str(GPUMEM_EIO));
#endif
    check_all_ids(r, 0, 244, 17);
    free(r);
}

/* ---- reset (the pair's part) ------------------------------------------------------------ */

#if FAULTS_NEW
/* Reset under load: blocking calls waiting, a request with its result not
 * yet collected, one submitted and never polled, one timed out; the
 * controller "deletes" the queues (stops touching them), the pair is
 * aborted (every wait ends with GPUMEM_EABORTED), reinitialised, and the
 * controller starts afresh on the recreated queues. */
Test(faults, reset_aborts_every_request, BOUND) {
    fctl *r = fctl_new(FAST_TIMEOUT_MS);
    blocking_io b[2];
    pthread_t t[2];
    gpumem_nvme_req done, pending, timed_out;
    gpumem_nvme_qp_stats s;
    uint32_t i;
    memset(bufs[43], 0, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 250, bufs[43], &timed_out);
    cr_assert_eq(poll_end(r, &timed_out), GPUMEM_ETIMEDOUT);
    memset(bufs[44], 0, FCTL_LBA);
    submit_ok(r, GPUMEM_NVME_OP_READ, 251, bufs[44], &done);
    submit_ok(r, GPUMEM_NVME_OP_READ, 252, bufs[45], &pending);
    fctl_fetch_n(r, 3);
    fctl_pop(r);           /* the timed-out one: never completed */
    fctl_complete(r, 0);   /* `done` completes before the reset */
    gpumem__cq_harvest(&r->qp);
    for (i = 0; i < 2; i++) start_blocking(&b[i], &t[i], r, GPUMEM_NVME_OP_READ, 253 + i, bufs[46 + i]);
    fctl_fetch_n(r, 2);
    /* Delete SQ, delete CQ: the controller forgets everything. */
    fctl_restart(r);
    cr_assert_eq(gpumem_nvme_qp_abort(&r->qp), GPUMEM_OK);
    for (i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(b[i].st, GPUMEM_EABORTED, "blocking read %u: %s", i, gpumem_status_str(b[i].st));
    }
    cr_assert(!gpumem_nvme_req_busy(&r->qp, &timed_out), "after the queues' deletion no buffer is touched");
    cr_assert_eq(gpumem_nvme_qp_reinit(&r->qp), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &done), GPUMEM_OK, "a result that came before the reset is kept");
    cr_assert(disk_ok(bufs[44], 251));
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &pending), GPUMEM_EABORTED);
    cr_assert_eq(gpumem_nvme_cpl_status(&pending.cpl), GPUMEM_NVME_SC_ABORTED_SQ_DELETION);
    cr_assert_eq(gpumem_nvme_qp_poll(&r->qp, &timed_out), GPUMEM_ETIMEDOUT);
    s = stats(r);
    cr_assert_eq(s.aborted, 3, "aborted %u", s.aborted);
    cr_assert_eq(s.orphans, 0);
    check_all_ids(r, 0, 0, 18);
    check_all_ids(r, 0, 8, 19);
    free(r);
}

Test(faults, reinit_refuses_a_running_pair) {
    fctl *r = fctl_new(0);
    cr_assert_eq(gpumem_nvme_qp_reinit(&r->qp), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_nvme_qp_reinit(NULL), GPUMEM_ENULL);
    free(r);
}
#endif
