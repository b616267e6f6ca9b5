/* gpumem_target.h on its own: the host pair set (what a controller may know
 * of a pair without reading its client memory: its queue, its PRP-list
 * pages, its command timeout, polled and deleted marks), and the idle step
 * (spin, then park; the doorbell scan; a stop or a notify ends a park).
 * The controller core is the code every software controller runs, and the
 * controllers' own suites (test_nvme, test_robust, test_warp, test_uring)
 * test it; here a test serves a pair by hand with gpumem_target_serve_ram,
 * as the USAGE block does. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem_target.h"

#define PG 4096u

/* 1024 blocks of 512 bytes, 64 a command. */
static gpumem_nvme_ns small_ns(void) {
    gpumem_nvme_ns ns = {.nsid = 1, .lba_shift = 9, .n_blocks = 1024, .max_blocks = 64, .reserved_ = 0};
    return ns;
}

/* Counting allocators: every byte the set takes of each kind is given back. */
typedef struct counts {
    long live, total;
} counts;
static void *count_alloc(void *ctx, size_t n) {
    ((counts *)ctx)->live++, ((counts *)ctx)->total++;
    return malloc(n);
}
static void count_free(void *ctx, void *p) {
    ((counts *)ctx)->live--;
    free(p);
}

Test(target_pairs, memory_by_who_touches_it) {
    gpumem_nvme_ns ns = small_ns();
    counts ring = {0, 0}, client = {0, 0};
    gpumem_target_mem m, half;
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp;
    memset(&m, 0, sizeof m);
    m.alloc = count_alloc, m.free = count_free, m.alloc_ctx = &ring;
    m.client_alloc = count_alloc, m.client_free = count_free, m.client_ctx = &client;
    half = m;
    half.free = NULL;
    cr_assert_eq(gpumem_target_pairs_create(&ns, &half, &ps), GPUMEM_EINVAL, "alloc without free");
    cr_assert_eq(gpumem_target_pairs_create(&ns, &m, &ps), GPUMEM_OK);
    cr_assert_eq(ring.live, 1, "the doorbell event is ring memory");
    cr_assert_eq(gpumem_target_pairs_add(ps, 64, 128, 0, 0, &qp), GPUMEM_OK);
    cr_assert_eq(ring.live, 3, "rings and PRP-list pages: %ld", ring.live);
    cr_assert_eq(client.live, 1, "the pair's struct and state");
    cr_assert_eq(gpumem_target_pairs_count(ps), 1);
    cr_assert_eq(gpumem_target_pairs_qp(ps, 0), qp);
    cr_assert_eq(gpumem_target_pairs_find(ps, qp), 0);
    cr_assert_eq(gpumem_target_pairs_find(ps, (gpumem_nvme_qp *)&ring), GPUMEM_TARGET_NO_PAIR);
    cr_assert_eq(gpumem_target_pairs_queue(ps, 1), NULL);
    cr_assert_eq(gpumem_target_pairs_qp(ps, 1), NULL);
    cr_assert_eq(gpumem_target_pairs_queue(ps, 0)->qid, 1);
    cr_assert_eq(gpumem_target_pairs_add(ps, 63, 128, 0, 0, &qp), GPUMEM_EINVAL, "depth not a power of two");
    cr_assert_eq(gpumem_target_pairs_count(ps), 1);
    gpumem_target_pairs_destroy(ps);
    cr_assert_eq(ring.live, 0);
    cr_assert_eq(client.live, 0);
}

/* The PRP-list range the set reports is where the pair builds its lists: a
 * command of three pages carries a list there (the forwarder reads a list
 * there without a translation, and nothing outside it). */
Test(target_pairs, prp_range_is_where_the_pair_builds_lists) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp;
    gpumem_nvme_req req;
    gpumem_target_queue *q;
    uint64_t lo = 1, hi = 1;
    unsigned char *buf = aligned_alloc(PG, 3 * PG);
    memset(&req, 0, sizeof req);
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 16, 32, 0, 0, &qp), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_prp_range(ps, 0, &lo, &hi), GPUMEM_OK);
    cr_assert_eq(lo, (uint64_t)(uintptr_t)qp->prp_lists);
    cr_assert_eq(hi - lo, gpumem_nvme_qp_prp_bytes(32, &ns), "%llu bytes", (unsigned long long)(hi - lo));
    cr_assert_eq(lo % PG, 0);
    cr_assert_eq(gpumem_target_pairs_prp_range(ps, 1, &lo, &hi), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 0, 24, buf, &req), GPUMEM_OK);
    q = gpumem_target_pairs_queue(ps, 0);
    cr_assert_eq(gpumem_target_pairs_prp_range(ps, 0, &lo, &hi), GPUMEM_OK);
    cr_assert(q->sq[0].prp2 >= lo && q->sq[0].prp2 + 2 * 8 <= hi, "list at 0x%llx, pages [0x%llx, 0x%llx)",
              (unsigned long long)q->sq[0].prp2, (unsigned long long)lo, (unsigned long long)hi);
    /* The pair is not idle while the request holds its command ID. */
    cr_assert_eq(gpumem_target_pairs_check_idle(ps), GPUMEM_EBUSY);
    {
        gpumem_target_stats st;
        unsigned char *ram = calloc(1024, 512);
        memset(&st, 0, sizeof st);
        ram[0] = 0x5A, ram[23 * 512 + 511] = 0xA5;
        cr_assert_eq(gpumem_target_serve_ram(q, &st, &ns, ram, 0), 2, "the doorbell and the command");
        cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_OK);
        cr_assert(buf[0] == 0x5A && buf[23 * 512 + 511] == 0xA5, "the data by content");
        cr_assert_eq(st.violations + st.bad_prp, 0);
        free(ram);
    }
    cr_assert_eq(gpumem_target_pairs_check_idle(ps), GPUMEM_OK);
    gpumem_target_pairs_destroy(ps);
    free(buf);
}

/* A pair's command timeout, as the set keeps it: what its users apply. */
Test(target_pairs, timeout_as_the_pair_applies_it) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *a, *b, *c;
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 0, &a), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 250, &b), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, GPUMEM_NVME_CMD_TIMEOUT_NEVER, &c), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 0), GPUMEM_NVME_CMD_TIMEOUT_DEFAULT_MS * 1000000ull);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 1), 250000000ull);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 2), GPUMEM_NO_TIMEOUT);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 3), 0);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 0), a->cmd_timeout_ns);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 1), b->cmd_timeout_ns);
    cr_assert_eq(gpumem_target_pairs_timeout_ns(ps, 2), c->cmd_timeout_ns);
    cr_assert_eq(gpumem_target_pairs_queue(ps, 2)->qid, 3);
    gpumem_target_pairs_destroy(ps);
}

static void ring_sq(gpumem_target_pairs *ps, uint32_t i, uint32_t v) {
    gpumem_atomic_store_u32(gpumem_target_pairs_queue(ps, i)->sq_doorbell, v, GPUMEM_ORDER_RELEASE,
                            GPUMEM_SCOPE_SYSTEM);
}

/* The scan looks at the pairs first, first + stride, ... and passes
 * deleted ones by; a doorbell taken is no longer news. Stopped marks pass
 * deleted pairs by too. */
Test(target_idle, doorbell_scan_stride_and_deleted) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp[3];
    gpumem_target_stats st;
    uint32_t i;
    memset(&st, 0, sizeof st);
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    for (i = 0; i < 3; i++) cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 0, &qp[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 1), 0);
    ring_sq(ps, 1, 1);
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 1), 1);
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 0), 1, "stride 0 is 1");
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 2), 0, "pairs 0 and 2");
    cr_assert_eq(gpumem_target_pairs_rung(ps, 1, 2), 1, "pair 1");
    gpumem_target_pairs_set_deleted(ps, 1, 1);
    cr_assert(gpumem_target_pairs_deleted(ps, 1));
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 1), 0, "a deleted pair is not scanned");
    gpumem_target_pairs_set_stopped(ps, 1);
    cr_assert_eq(gpumem__qp_stopped(qp[0]), GPUMEM__QP_STOPPED);
    cr_assert_eq(gpumem__qp_stopped(qp[1]), 0, "deleted: untouched");
    cr_assert_eq(gpumem__qp_stopped(qp[2]), GPUMEM__QP_STOPPED);
    gpumem_target_pairs_set_deleted(ps, 1, 0);
    cr_assert_eq(gpumem_target_pairs_rung(ps, 1, 2), 1);
    cr_assert_eq(gpumem_target_take_sq_doorbell(gpumem_target_pairs_queue(ps, 1), &st), 1);
    cr_assert_eq(gpumem_target_pairs_rung(ps, 0, 1), 0, "taken");
    gpumem_target_pairs_destroy(ps);
}

Test(target_idle, spin_then_park_unless_polled) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp;
    gpumem_target_idle idle, never;
    uint64_t t;
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 0, &qp), GPUMEM_OK);
    idle = gpumem_target_idle_start(1000000, 5000);
    t = idle.last_work_ns;
    cr_assert(t > 0 && t <= gpumem_clock_ns());
    cr_assert_eq(gpumem_target_idle_step(&idle, ps, 3, t + 10), 0, "work: serve again");
    cr_assert_eq(idle.last_work_ns, t + 10);
    cr_assert_eq(gpumem_target_idle_step(&idle, ps, 0, t + 500000), 0, "within the spin");
    cr_assert_eq(gpumem_target_idle_step(&idle, ps, 0, t + 1000010), 5000, "past the spin: park_ns");
    cr_assert_eq(gpumem_target_pairs_set_polled(ps, qp, 1), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_set_polled(ps, qp, 7), GPUMEM_OK, "marked twice, counted once");
    cr_assert(gpumem_target_pairs_polled(ps));
    cr_assert_eq(gpumem_target_idle_step(&idle, ps, 0, t + 5000000), 0, "a polled pair: never park");
    cr_assert_eq(gpumem_target_pairs_set_polled(ps, qp, 0), GPUMEM_OK);
    cr_assert(!gpumem_target_pairs_polled(ps), "one unmark undoes the two marks");
    cr_assert_eq(gpumem_target_pairs_set_polled(ps, (gpumem_nvme_qp *)&idle, 1), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_target_idle_step(&idle, ps, 0, t + 5000000), 5000);
    never = gpumem_target_idle_start(GPUMEM_TARGET_NEVER_PARK, 0);
    cr_assert_eq(never.park_ns, GPUMEM_TARGET_DEFAULT_PARK_NS);
    cr_assert_eq(gpumem_target_idle_step(&never, ps, 0, never.last_work_ns + 3600000000000ull), 0);
    gpumem_target_pairs_destroy(ps);
}

typedef struct waker {
    gpumem_target_pairs *ps;
    uint32_t *running;
    int ring; /* 1: ring pair 0's doorbell and notify; 0: stop (running = 0) and notify */
} waker;
static void *wake_after_20ms(void *arg) {
    waker *w = (waker *)arg;
    gpumem__host_sleep_ns(20000000);
    if (w->ring) ring_sq(w->ps, 0, 2);
    else gpumem_atomic_store_u32(w->running, 0, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    gpumem_event_notify(gpumem_target_pairs_event(w->ps));
    return NULL;
}

/* A park lasts wait_ns at most, and not at all when a doorbell moved or
 * the stop came before it; a doorbell or a stop with a notify during it
 * ends it. (Times are bounds with room for a loaded machine, below the
 * park's own cap of 1 s: never a measure.) */
Test(target_idle, park_ends_on_doorbell_stop_or_time) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp;
    uint32_t running = 1;
    uint64_t t;
    int k;
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 0, &qp), GPUMEM_OK);
    t = gpumem_clock_ns();
    gpumem_target_pairs_park(ps, 0, 1, 30000000, &running);
    cr_assert(gpumem_clock_ns() - t >= 25000000, "nothing: sleeps about wait_ns");
    ring_sq(ps, 0, 1);
    t = gpumem_clock_ns();
    gpumem_target_pairs_park(ps, 0, 1, 5000000000ull, &running);
    cr_assert(gpumem_clock_ns() - t < 500000000ull, "a doorbell rung before the park: no sleep");
    gpumem_target_pairs_park(ps, 1, 1, 30000000, &running); /* no pair 1: nothing to see, sleeps */
    running = 0;
    t = gpumem_clock_ns();
    gpumem_target_pairs_park(ps, 1, 1, 5000000000ull, &running);
    cr_assert(gpumem_clock_ns() - t < 500000000ull, "a stop before the park: no sleep");
    for (k = 0; k < 2; k++) {
        pthread_t th;
        waker w;
        w.ps = ps, w.running = &running, w.ring = k == 0;
        running = 1;
        /* Pair 0's doorbell (1, then 2) is news to nobody once seen as 1. */
        gpumem_target_pairs_queue(ps, 0)->sq_db_seen = k == 0 ? 1 : 2;
        t = gpumem_clock_ns();
        cr_assert_eq(pthread_create(&th, NULL, wake_after_20ms, &w), 0);
        gpumem_target_pairs_park(ps, 0, 1, 5000000000ull, &running);
        /* (a park is 1 s at most: well under that) */
        cr_assert(gpumem_clock_ns() - t < 700000000ull, "%s during the park ends it", k == 0 ? "a doorbell" : "a stop");
        pthread_join(th, NULL);
    }
    gpumem_target_pairs_destroy(ps);
}

/* What a host pair's owner reads of the client side, in words. */
Test(target_pairs, report_of_the_client_side) {
    gpumem_nvme_ns ns = small_ns();
    gpumem_target_pairs *ps;
    gpumem_nvme_qp *qp;
    char buf[4096];
    size_t n;
    cr_assert_eq(gpumem_target_pairs_create(&ns, NULL, &ps), GPUMEM_OK);
    cr_assert_eq(gpumem_target_pairs_add(ps, 8, 8, 0, 0, &qp), GPUMEM_OK);
    buf[0] = 0;
    n = gpumem_target_pairs_report_client(ps, 0, buf, sizeof buf, 0);
    cr_assert(n > 0 && strlen(buf) == n, "%zu: %s", n, buf);
    n = gpumem_target_pairs_report_client(ps, 5, buf, sizeof buf, 0);
    cr_assert(strstr(buf, "pair 6: none"), "%s", buf);
    n = gpumem_target_queue_report(gpumem_target_pairs_queue(ps, 0), &(gpumem_target_stats){0}, buf, sizeof buf, 0);
    cr_assert(strstr(buf, "controller: SQ fetched up to 0"), "%s", buf);
    gpumem_target_pairs_destroy(ps);
}
