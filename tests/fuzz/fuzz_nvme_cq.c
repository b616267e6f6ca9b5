/* fuzz_nvme_cq: the queue pair (gpumem_nvme.h) against a controller that
 * writes whatever the input says into its completion queue.
 *
 * The harness is the controller, on one thread, and the pair's only user:
 * the input is a script of submissions, fetches, true completions, and
 * hostile ones (any CID, status, SQ head; repeats of a command's CID; an
 * entry with the wrong phase, fixed one step later), polls and harvests.
 * The controller fetches every command handed over before it posts
 * anything, so a hostile completion is a lie about a command's result,
 * never about what was fetched (which no pair can check, test_faults.c
 * covers it). Then it drains: every fetched command completed truly,
 * every request polled to its end.
 *
 * Properties, for every input:
 *   - a request's result is the content of one entry the controller posted
 *     with that request's CID (ID and generation), one the pair had not
 *     consumed before the submission, and no entry is delivered twice
 *     (every completion validated). (Not "posted after the submission": an
 *     entry left in the CQ unread, with the CID and SQ head the next
 *     command will have, is that command's completion as far as any pair
 *     can tell; fuzzing found such a forecast.)
 *   - every entry posted is consumed: delivered or counted as dropped,
 *     delivered + dropped == posted (conserved);
 *   - every request ends, exactly once, after the drain (delivered once);
 *   - afterwards the pair still works: every ID taken, written, completed.
 * Each entry's dword 0 carries its serial number, which is how a result is
 * traced back to the entry that delivered it. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include "tests/fuzz/fuzz.h"
/* Hostile entries are logged once per kind per pair: noise here, where
 * every input is hostile (the arguments are still evaluated). */
static void fuzz_quiet(const char *fmt, ...) { (void)fmt; }
#define GPUMEM_LOG(...) fuzz_quiet(__VA_ARGS__)
#include "gpumem_nvme.h"

#define MAX_DEPTH 16u
#define MAX_CIDS 8u
#define REQS 16u    /* request slots of the script */
#define HELD 256u   /* fetched, not yet truly completed */
#define POSTS 4096u /* entries the controller may post in one input */
#define DRAIN_ROUNDS 100000u

typedef struct posted {
    uint16_t cid, sf;
    int delivered;
} posted;

static struct rig {
    uint64_t state[4096];
    gpumem_nvme_qp qp;
    gpumem_nvme_cmd sq[MAX_DEPTH];
    gpumem_nvme_cpl cq[MAX_DEPTH];
    uint32_t doorbells[2];
    gpumem_nvme_qp_signals signals;
    uint32_t depth, virtual_start;
    /* the controller */
    uint32_t sq_head, cq_tail, phase, wrong_back; /* wrong_back: an entry to fix, counted back from the tail */
    gpumem_nvme_cmd held[HELD];
    uint32_t n_held;
    posted post[POSTS];
    uint32_t n_posted;
    /* the user */
    gpumem_nvme_req req[REQS];
    int out[REQS];          /* submitted, result not yet collected */
    uint32_t consumed_at[REQS]; /* entries the pair had consumed when it was submitted */
    uint32_t collected;
    unsigned char buf[REQS][512];
} r;

static void harvest(void) { gpumem__cq_harvest(&r.qp); }
static void post_raw(uint16_t cid, uint16_t sf, uint32_t sq_head, int phase_ok);

/* The oldest fetched command, off the list. */
static gpumem_nvme_cmd pop_oldest(void) {
    gpumem_nvme_cmd c = r.held[0];
    memmove(r.held, r.held + 1, (r.n_held - 1) * sizeof r.held[0]);
    r.n_held--;
    return c;
}

/* Fetch every command the doorbell has handed over (with the list full,
 * the oldest gets its true completion first: the controller keeps up). */
static void fetch_all(void) {
    uint32_t db = __atomic_load_n(&r.doorbells[0], __ATOMIC_ACQUIRE);
    FUZZ_CHECK(db < r.depth, "SQ doorbell %u past the depth %u", db, r.depth);
    while (r.sq_head != db) {
        if (r.n_held == HELD) {
            gpumem_nvme_cmd c = pop_oldest();
            post_raw((uint16_t)(c.cdw0 >> 16), 0, r.sq_head, 1);
        }
        r.held[r.n_held++] = r.sq[r.sq_head];
        r.sq_head = (r.sq_head + 1) % r.depth;
    }
}

/* The entry at `back` (1 = the last posted) gets its right phase. */
static void fix_phase(void) {
    uint32_t at, lap_phase, dw3;
    if (!r.wrong_back) return;
    at = (r.cq_tail + r.depth - r.wrong_back) % r.depth;
    lap_phase = at < r.cq_tail ? r.phase : r.phase ^ 1u;
    dw3 = r.cq[at].dw3;
    __atomic_store_n(&r.cq[at].dw3, (dw3 & ~(1u << 16)) | (lap_phase << 16), __ATOMIC_RELEASE);
    r.wrong_back = 0;
}

/* Post one entry (dword 0: its serial). Waits for CQ space as a controller
 * must (the CQ head doorbell), harvesting as the user would: a pair that
 * never frees it has left an entry unconsumed. */
static void post_raw(uint16_t cid, uint16_t sf, uint32_t sq_head, int phase_ok) {
    uint32_t spins = 0;
    gpumem_nvme_cpl *e;
    if (r.n_posted == POSTS) return;
    fix_phase();
    while (((r.cq_tail - __atomic_load_n(&r.doorbells[1], __ATOMIC_ACQUIRE)) & (r.depth - 1)) >= r.depth - 1) {
        FUZZ_CHECK(++spins < 100000u, "the CQ stays full: the pair does not consume what was posted (%u posted)",
                   r.n_posted);
        harvest();
    }
    e = &r.cq[r.cq_tail];
    e->dw0 = r.n_posted;
    e->dw1 = 0;
    e->dw2 = (sq_head & 0xFFFFu) | (1u << 16);
    __atomic_store_n(&e->dw3, (uint32_t)cid | ((phase_ok ? r.phase : r.phase ^ 1u) << 16) | ((uint32_t)sf << 17),
                     __ATOMIC_RELEASE);
    r.cq_tail = (r.cq_tail + 1) % r.depth;
    if (r.cq_tail == 0) r.phase ^= 1u;
    r.post[r.n_posted].cid = cid;
    r.post[r.n_posted].sf = sf & 0x7FFFu;
    r.post[r.n_posted].delivered = 0;
    r.n_posted++;
    if (!phase_ok) r.wrong_back = 1;
}

/* What the controller posts: after fetching what it was handed. */
static void post(uint16_t cid, uint16_t sf, uint32_t sq_head, int phase_ok) {
    fetch_all();
    post_raw(cid, sf, sq_head, phase_ok);
}

/* The true completion of the oldest fetched command. It reports the SQ
 * head as it is when posted, after the fetch that comes first: passing
 * r.sq_head before that fetch reported a head behind what was fetched (a
 * lie no controller tells), which the pair rightly drops after a forecast
 * (an earlier entry whose head the later submissions made plausible), and
 * the command never ended. */
static void complete_oldest(uint16_t sf) {
    gpumem_nvme_cmd c;
    if (r.n_held == 0) return;
    c = pop_oldest();
    fetch_all();
    post_raw((uint16_t)(c.cdw0 >> 16), sf, r.sq_head, 1);
}

/* A request's end: its result must be one entry posted for its CID that
 * the pair had not consumed before its submission, delivered to nobody else. */
static void check_result(uint32_t k, gpumem_status st) {
    const gpumem_nvme_cpl *c = &r.req[k].cpl;
    uint32_t serial = c->dw0;
    posted *p;
    gpumem_status want;
    FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EIO || st == GPUMEM_EABORTED, "request %u ended with %s", k,
               gpumem_status_str(st));
    FUZZ_CHECK(serial < r.n_posted, "request %u's result (dword 0 %u) is no entry that was posted (%u)", k, serial,
               r.n_posted);
    p = &r.post[serial];
    FUZZ_CHECK(p->cid == r.req[k].cid, "request %u (CID %#x) got entry %u, posted with CID %#x", k, r.req[k].cid,
               serial, p->cid);
    FUZZ_CHECK(serial >= r.consumed_at[k], "request %u got entry %u, consumed before its submission (%u were)", k,
               serial, r.consumed_at[k]);
    FUZZ_CHECK(!p->delivered, "entry %u delivered twice", serial);
    FUZZ_CHECK(gpumem_nvme_cpl_status(c) == p->sf, "request %u: status %#x, its entry says %#x", k,
               gpumem_nvme_cpl_status(c), p->sf);
    /* The status field's meaning, as the NVMe specification gives it: SCT 0
     * SC 0 success (CRD, More, DNR aside), SCT 0 SC 8 aborted by SQ
     * deletion, anything else an error. */
    want = (p->sf & 0x7FFu) == 0 ? GPUMEM_OK : (p->sf & 0x7FFu) == 0x008 ? GPUMEM_EABORTED : GPUMEM_EIO;
    FUZZ_CHECK(st == want, "request %u: %s for status %#x, expected %s", k, gpumem_status_str(st), p->sf,
               gpumem_status_str(want));
    p->delivered = 1;
    r.out[k] = 0;
    r.collected++;
}

static void poll(uint32_t k) {
    gpumem_status st;
    if (!r.out[k]) return;
    st = gpumem_nvme_qp_poll(&r.qp, &r.req[k]);
    if (st != GPUMEM_EAGAIN) check_result(k, st);
}

/* Entries the pair has consumed (its CQ head). */
static uint32_t consumed(void) {
    return gpumem_atomic_load_u32(&r.qp.cq_head.v, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE) - r.virtual_start;
}

static void submit(uint32_t k, unsigned lba, int write) {
    gpumem_nvme_cmd c;
    gpumem_status st;
    uint32_t before = consumed();
    if (r.out[k]) return;
    FUZZ_CHECK(gpumem_nvme_cmd_rw(&c, write ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ, &r.qp.ns, lba, 1,
                                  (uint64_t)(uintptr_t)r.buf[k], 0) == GPUMEM_OK, "command");
    st = gpumem_nvme_qp_submit(&r.qp, &c, &r.req[k]);
    FUZZ_CHECK(st == GPUMEM_OK || st == GPUMEM_EAGAIN, "submit: %s", gpumem_status_str(st));
    if (st == GPUMEM_OK) {
        r.out[k] = 1;
        r.consumed_at[k] = before;
    }
}

static void setup(unsigned shape) {
    gpumem_nvme_qp_desc d;
    static const uint32_t depths[] = {4, 8, 16, 16}, cids[] = {2, 4, 8, 8};
    memset(&r, 0, sizeof r);
    r.depth = depths[shape & 3];
    memset(&d, 0, sizeof d);
    d.depth = r.depth;
    d.n_cids = cids[(shape >> 2) & 3];
    d.qid = 1;
    /* tickets and the CQ head just below 2^32: the wrap inside the script */
    d.virtual_start = r.virtual_start = (shape & 0x10) ? 0u - 64u * r.depth : 0;
    d.ns.nsid = 1;
    d.ns.lba_shift = 9;
    d.ns.n_blocks = 256;
    d.ns.max_blocks = 8;
    d.sq = r.sq;
    d.cq = r.cq;
    d.sq_doorbell = &r.doorbells[0];
    d.cq_doorbell = &r.doorbells[1];
    d.signals = &r.signals;
    d.state = r.state;
    d.state_bytes = sizeof r.state;
    d.cmd_timeout_ms = GPUMEM_NVME_CMD_TIMEOUT_NEVER; /* no clock in the script */
    FUZZ_CHECK(gpumem_nvme_qp_init(&r.qp, &d) == GPUMEM_OK, "pair init");
    r.phase = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size, 0};
    gpumem_nvme_qp_stats s;
    uint32_t k, rounds, outstanding;
    setup(fuzz_u8(&in));
    while (fuzz_more(&in)) {
        unsigned op = fuzz_u8(&in), a = fuzz_u8(&in);
        fix_phase(); /* a wrong phase stalls the CQ until fixed: one step later */
        switch (op % 10) {
        case 0: submit(a % REQS, a, op & 0x10); break;
        case 1: fetch_all(); break;
        case 2: complete_oldest((uint16_t)(op & 0x20 ? fuzz_u16(&in) >> 1 : 0)); break;
        case 3: { /* anything at all */
            uint16_t cid = (uint16_t)fuzz_u16(&in), sf = (uint16_t)(fuzz_u16(&in) >> 1);
            post(cid, sf, a, 1);
            break;
        }
        case 4: /* the CID of a fetched command (a premature or second completion), any SQ head */
            if (r.n_held) post((uint16_t)(r.held[a % r.n_held].cdw0 >> 16), 0, op & 0x40 ? r.sq_head : fuzz_u8(&in), 1);
            break;
        case 5: /* the CID a request carries, whether or not it is still out */
            post(r.req[a % REQS].cid, (uint16_t)(op >> 4), op & 0x80 ? r.sq_head : a, 1);
            break;
        case 6: poll(a % REQS); break;
        case 7: harvest(); break;
        case 8: post((uint16_t)fuzz_u16(&in), 0, r.sq_head, 0); break; /* the wrong phase */
        default: /* the oldest fetched command's CID with an SQ head near the true one, lagging or leading.
                  * It stays held: if the pair drops this entry (as it must when the head is implausible),
                  * the command still gets its true completion, as from a controller that retries. */
            if (r.n_held)
                post((uint16_t)(r.held[0].cdw0 >> 16), 0, (r.sq_head + r.depth + (a & 3) - 2) % r.depth, 1);
            break;
        }
    }
    /* The drain: everything fetched gets its true completion, every
     * request is polled to its end. */
    fix_phase();
    for (rounds = 0;; rounds++) {
        fetch_all();
        while (r.n_held) complete_oldest(0);
        for (k = 0, outstanding = 0; k < REQS; k++) {
            poll(k);
            outstanding += (uint32_t)r.out[k];
        }
        if (!outstanding || r.n_posted == POSTS) break;
        FUZZ_CHECK(rounds < DRAIN_ROUNDS, "%u requests never end (%u posted, %u fetched commands held)", outstanding,
                   r.n_posted, r.n_held);
        harvest();
    }
    if (r.n_posted == POSTS) return 0; /* the log is full: no conservation count */
    harvest();
    FUZZ_CHECK(gpumem_nvme_qp_get_stats(&r.qp, &s) == GPUMEM_OK, "stats");
    FUZZ_CHECK(consumed() == r.n_posted, "%u entries posted, %u consumed", r.n_posted, consumed());
    FUZZ_CHECK(r.collected + s.dropped == r.n_posted, "%u posted = %u delivered + %u dropped does not hold",
               r.n_posted, r.collected, s.dropped);
    FUZZ_CHECK(s.late == 0 && s.timed_out == 0 && s.orphans == 0, "late %u timed out %u orphans %u", s.late,
               s.timed_out, s.orphans);
    /* Still a working pair: as many requests as the budget allows, each
     * completed truly and collected. */
    for (k = 0; k < r.qp.async_limit && k < REQS; k++) {
        submit(k, k, 1);
        FUZZ_CHECK(r.out[k], "after the script, request %u of %u could not be submitted", k, r.qp.async_limit);
    }
    fetch_all();
    while (r.n_held) complete_oldest(0);
    for (k = 0; k < REQS; k++) {
        for (rounds = 0; r.out[k]; rounds++) {
            FUZZ_CHECK(rounds < DRAIN_ROUNDS, "after the script, request %u never ends", k);
            poll(k);
        }
    }
    return 0;
}
