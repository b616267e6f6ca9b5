/* The split of a queue pair's memory by who touches it (issue 12, item 1),
 * proved across processes: the host-thread controller runs in a child
 * process that shares with its parent only the ring memory (rings, doorbells,
 * signals block, PRP-list pages, the controller's doorbell event, the
 * namespace and the data buffers: one MAP_SHARED anonymous mapping made
 * before fork). The clients run in the parent, with every pair's client
 * state (struct, turns, markers, command IDs) in private mappings, which the
 * child makes inaccessible (PROT_NONE) before it starts serving: a
 * controller that read or wrote one word of client state would die of
 * SIGSEGV, and a write would not reach the parent anyway.
 *
 * Many client threads, every operation counted, every read checked by
 * content, the child's statistics (published into shared memory) checked
 * against the parent's counts, zero protocol violations; and a stop in the
 * child wakes a parent thread that waits for a command the controller
 * dropped, with GPUMEM_ENODEV (issue 13, across processes). Nothing waits
 * without a bound: the parent's waits are timed, the child kills itself
 * with alarm(), and the test's fini kills the child. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpumem_swctl.h"
#include "block_content.h"

#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS 0x20 /* strict C11 hides it */
#endif

#define XP_PAIRS 2u
#define XP_DEPTH 64u
#define XP_CIDS 128u
#define XP_THREADS 16u
#define XP_IOS 300u          /* per client thread */
#define XP_REGION 16u        /* blocks each thread owns */
#define XP_ASYNC 4u          /* asynchronous reads in a batch */
#define XP_TIMEOUT_NS 10000000000ull /* one command: far beyond any run, a bound on a hang */
#define XP_SHARED_BYTES (32u << 20)

/* What parent and child share besides the bump-allocated ring memory. */
typedef struct xp_control {
    uint32_t started;  /* child: the controller runs */
    uint32_t stop;     /* parent: stop it now */
    uint32_t done;     /* child: stopped, stats published */
    uint32_t child_status; /* child: gpumem_status of start/stop/get_stats */
    gpumem_swctl_stats stats;
} xp_control;

/* Ring memory: a bump allocator over the shared mapping. */
typedef struct xp_shared {
    unsigned char *base;
    size_t used, bytes;
} xp_shared;

static void *shared_alloc(void *ctx, size_t n) {
    xp_shared *s = (xp_shared *)ctx;
    size_t at = GPUMEM_ALIGN_UP(s->used, 64);
    if (at + n > s->bytes) return NULL;
    s->used = at + n;
    return s->base + at;
}
static void shared_free(void *ctx, void *p) { (void)ctx, (void)p; } /* unmapped as a whole */

/* Client memory: one private mapping per allocation, remembered so that the
 * child can revoke every one of them. */
typedef struct xp_private {
    void *block[16];
    size_t bytes[16];
    uint32_t n;
} xp_private;

static void *private_alloc(void *ctx, size_t n) {
    xp_private *a = (xp_private *)ctx;
    void *p;
    if (a->n == 16) return NULL;
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    a->block[a->n] = p;
    a->bytes[a->n++] = n;
    return p;
}
static void private_free(void *ctx, void *p) {
    xp_private *a = (xp_private *)ctx;
    uint32_t i;
    for (i = 0; i < a->n; i++)
        if (a->block[i] == p) munmap(p, a->bytes[i]);
}

static pid_t child_pid = -1;

/* The owner's watch on the controller process: if it dies, its pairs are
 * marked stopped (what a driver does when its device is lost), so every
 * client wait ends with GPUMEM_ENODEV at once instead of at its deadline. */
typedef struct xp_monitor {
    gpumem_nvme_qp **pairs;
    uint32_t n_pairs;
    uint32_t quit;       /* parent: stop watching */
    uint32_t child_died; /* the child ended while watched */
} xp_monitor;

static void *xp_monitor_main(void *p) {
    xp_monitor *m = (xp_monitor *)p;
    while (!__atomic_load_n(&m->quit, __ATOMIC_ACQUIRE)) {
        siginfo_t si;
        uint32_t i;
        memset(&si, 0, sizeof si);
        /* WNOWAIT: look without reaping; the test reaps and reads the status */
        if (waitid(P_PID, (id_t)child_pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == child_pid) {
            __atomic_store_n(&m->child_died, 1, __ATOMIC_RELEASE);
            for (i = 0; i < m->n_pairs; i++) gpumem_nvme_qp_set_stopped(m->pairs[i], 1);
            return NULL;
        }
        gpumem__host_sleep_ns(1000000L);
    }
    return NULL;
}

static void kill_child(void) {
    if (child_pid > 0) {
        kill(child_pid, SIGKILL);
        waitpid(child_pid, NULL, 0);
        child_pid = -1;
    }
}

/* Wait (at most ms) until *word is nonzero or the child has died. */
static int wait_word(uint32_t *word, uint32_t ms) {
    uint64_t end = gpumem_clock_ns() + (uint64_t)ms * 1000000ull;
    while (!__atomic_load_n(word, __ATOMIC_ACQUIRE)) {
        if (gpumem_clock_ns() > end || waitpid(child_pid, NULL, WNOHANG) == child_pid) return 0;
        gpumem__host_sleep_ns(100000L);
    }
    return 1;
}

/* The child: revoke the client state, serve until asked to stop, publish. */
static void child_main(gpumem_swctl *ctl, xp_control *cc, const xp_private *client) {
    uint32_t i;
    gpumem_status st;
    alarm(120); /* never outlive a broken parent */
    for (i = 0; i < client->n; i++)
        if (mprotect(client->block[i], client->bytes[i], PROT_NONE) != 0) _exit(10);
    st = gpumem_swctl_start(ctl);
    __atomic_store_n(&cc->child_status, (uint32_t)st, __ATOMIC_RELAXED);
    __atomic_store_n(&cc->started, 1, __ATOMIC_RELEASE);
    if (st != GPUMEM_OK) _exit(11);
    while (!__atomic_load_n(&cc->stop, __ATOMIC_ACQUIRE)) gpumem__host_sleep_ns(1000000L);
    if ((st = gpumem_swctl_stop(ctl)) == GPUMEM_OK) st = gpumem_swctl_get_stats(ctl, &cc->stats);
    __atomic_store_n(&cc->child_status, (uint32_t)st, __ATOMIC_RELAXED);
    __atomic_store_n(&cc->done, 1, __ATOMIC_RELEASE);
    _exit(st == GPUMEM_OK ? 0 : 12);
}

typedef struct xp_worker {
    gpumem_nvme_qp *qp;
    unsigned char *buf; /* shared memory: (XP_ASYNC + 1) pages the controller copies to and from */
    uint32_t id;
    uint32_t gen[XP_REGION];
    uint64_t writes, reads, async_reads, bad_data, failures;
    gpumem_status first_bad;
} xp_worker;

static void xp_fail(xp_worker *w, gpumem_status st) {
    if (!w->failures++) w->first_bad = st;
}

/* Blocking writes and reads and batches of asynchronous reads, each bounded
 * in time; every read checked against the generation last written. */
static void *xp_client(void *p) {
    xp_worker *w = (xp_worker *)p;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (w->id + 1), base = (uint64_t)w->id * XP_REGION;
    uint32_t done = 0;
    while (done < XP_IOS && !w->failures) {
        uint32_t off = (uint32_t)(gpumem__rng_next(&rng) % XP_REGION), kind = (uint32_t)(gpumem__rng_next(&rng) % 3);
        gpumem_nvme_cmd cmd;
        gpumem_status st;
        if (kind == 0) {
            uint32_t g = w->gen[off] + 1;
            fill_block(w->buf, base + off, g);
            gpumem_nvme_cmd_write(&cmd, &w->qp->ns, base + off, 1, (uintptr_t)w->buf, 0);
            if ((st = gpumem_nvme_qp_exec_timed(w->qp, &cmd, NULL, XP_TIMEOUT_NS)) != GPUMEM_OK) xp_fail(w, st);
            else w->gen[off] = g, w->writes++;
            done++;
        } else if (kind == 1) {
            memset(w->buf, 0xEE, LBA);
            gpumem_nvme_cmd_read(&cmd, &w->qp->ns, base + off, 1, (uintptr_t)w->buf, 0);
            if ((st = gpumem_nvme_qp_exec_timed(w->qp, &cmd, NULL, XP_TIMEOUT_NS)) != GPUMEM_OK) xp_fail(w, st);
            else if (w->reads++, !block_ok(w->buf, base + off, w->gen[off])) w->bad_data++;
            done++;
        } else {
            gpumem_nvme_req req[XP_ASYNC];
            uint32_t lba_off[XP_ASYNC], n = 0, k;
            while (n < XP_ASYNC && done + n < XP_IOS) {
                unsigned char *b = w->buf + (size_t)(n + 1) * 4096;
                lba_off[n] = (uint32_t)(gpumem__rng_next(&rng) % XP_REGION);
                memset(b, 0xEE, LBA);
                if ((st = gpumem_nvme_qp_submit_buf(w->qp, GPUMEM_NVME_OP_READ, base + lba_off[n], 1, b, &req[n])) ==
                    GPUMEM_EAGAIN)
                    break; /* the asynchronous budget is spent: reap ours first */
                if (st != GPUMEM_OK) {
                    xp_fail(w, st);
                    break;
                }
                n++;
            }
            for (k = 0; k < n; k++) {
                if ((st = gpumem_nvme_qp_wait_timed(w->qp, &req[k], XP_TIMEOUT_NS)) != GPUMEM_OK) {
                    xp_fail(w, st);
                    continue;
                }
                w->async_reads++;
                if (!block_ok(w->buf + (size_t)(k + 1) * 4096, base + lba_off[k], w->gen[lba_off[k]])) w->bad_data++;
            }
            done += n;
        }
    }
    return NULL;
}

/* One blocking read of a command the controller will drop: it ends when
 * the controller stops (GPUMEM_ENODEV), or at its deadline if the stop
 * never reaches it (GPUMEM_ETIMEDOUT, a failure). */
typedef struct xp_dropped {
    gpumem_nvme_qp *qp;
    unsigned char *buf;
    gpumem_status st;
    uint32_t running;
} xp_dropped;

static void *xp_dropped_read(void *p) {
    xp_dropped *d = (xp_dropped *)p;
    gpumem_nvme_cmd cmd;
    gpumem_nvme_cmd_read(&cmd, &d->qp->ns, 0, 1, (uintptr_t)d->buf, 0);
    __atomic_store_n(&d->running, 1, __ATOMIC_RELEASE);
    d->st = gpumem_nvme_qp_exec_timed(d->qp, &cmd, NULL, 30000000000ull);
    return NULL;
}

Test(xproc, controller_in_another_process_sees_only_ring_memory, .timeout = 240, .fini = kill_child) {
    xp_shared shared;
    xp_private client;
    xp_control *cc;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp[XP_PAIRS];
    xp_worker *w;
    xp_dropped dropped;
    xp_monitor mon;
    pthread_t th[XP_THREADS], dth, mth;
    uint64_t writes = 0, reads = 0, async_reads = 0, bad = 0, failures = 0;
    uint32_t i;
    int status = 0;

    memset(&client, 0, sizeof client);
    shared.bytes = XP_SHARED_BYTES;
    shared.used = 0;
    shared.base = (unsigned char *)mmap(NULL, shared.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(shared.base != MAP_FAILED);
    cc = (xp_control *)shared_alloc(&shared, sizeof *cc);
    memset(cc, 0, sizeof *cc);

    cfg.n_blocks = (uint64_t)XP_THREADS * XP_REGION;
    cfg.mem.alloc = shared_alloc;
    cfg.mem.free = shared_free;
    cfg.mem.alloc_ctx = &shared;
    cfg.mem.client_alloc = private_alloc;
    cfg.mem.client_free = private_free;
    cfg.mem.client_ctx = &client;
    /* The command after the workload's last is never completed: a waiter the
     * stop must wake. Every workload command is counted, so its number is known. */
    cfg.drop_command = (uint64_t)XP_THREADS * XP_IOS + 1;
    cr_assert_eq(gpumem_swctl_create(&cfg, &ctl), GPUMEM_OK);
    {   /* generation 0 of every block, what a read before any write finds */
        unsigned char *ram = (unsigned char *)gpumem_swctl_ram(ctl);
        uint64_t b;
        cr_assert(ram >= shared.base && ram < shared.base + shared.bytes, "the namespace is ring memory");
        for (b = 0; b < cfg.n_blocks; b++) fill_block(ram + b * LBA, b, 0);
    }
    for (i = 0; i < XP_PAIRS; i++) {
        cr_assert_eq(gpumem_swctl_add_qp_ex(ctl, XP_DEPTH, XP_CIDS, 0, &qp[i]), GPUMEM_OK);
        cr_assert((unsigned char *)qp[i] < shared.base || (unsigned char *)qp[i] >= shared.base + shared.bytes,
                  "the pair's struct is client memory, not shared");
        cr_assert((unsigned char *)qp[i]->sq >= shared.base && (unsigned char *)qp[i]->signals >= shared.base,
                  "its rings and signals are shared");
    }
    cr_assert_eq(client.n, XP_PAIRS, "one private client block per pair");
    w = (xp_worker *)calloc(XP_THREADS, sizeof *w);
    cr_assert(w);
    for (i = 0; i < XP_THREADS; i++) {
        w[i].qp = qp[i % XP_PAIRS];
        w[i].id = i;
        /* data buffers are where the controller copies to and from: shared */
        w[i].buf = (unsigned char *)shared_alloc(&shared, (XP_ASYNC + 1) * 4096 + 4096);
        cr_assert(w[i].buf);
        w[i].buf = (unsigned char *)GPUMEM_ALIGN_UP((uintptr_t)w[i].buf, 4096);
    }
    dropped.buf = (unsigned char *)shared_alloc(&shared, LBA);
    dropped.qp = qp[0];
    dropped.running = 0;
    cr_assert(dropped.buf);

    child_pid = fork(); /* before any thread exists in this process */
    cr_assert(child_pid >= 0);
    if (child_pid == 0) child_main(ctl, cc, &client);
    cr_assert(wait_word(&cc->started, 10000), "the controller process did not start");
    cr_assert_eq(cc->child_status, GPUMEM_OK, "start in the child: %s", gpumem_status_str((gpumem_status)cc->child_status));

    memset(&mon, 0, sizeof mon);
    mon.pairs = qp;
    mon.n_pairs = XP_PAIRS;
    cr_assert_eq(pthread_create(&mth, NULL, xp_monitor_main, &mon), 0);
    for (i = 0; i < XP_THREADS; i++) cr_assert_eq(pthread_create(&th[i], NULL, xp_client, &w[i]), 0);
    for (i = 0; i < XP_THREADS; i++) pthread_join(th[i], NULL);
    if (__atomic_load_n(&mon.child_died, __ATOMIC_ACQUIRE)) {
        int died = 0;
        pthread_join(mth, NULL);
        waitpid(child_pid, &status, 0);
        child_pid = -1;
        died = WIFSIGNALED(status) ? WTERMSIG(status) : -WEXITSTATUS(status);
        cr_assert_fail("the controller process ended during the workload (%s %d; SIGSEGV (11) means it touched "
                       "client state)", died > 0 ? "signal" : "exit status", died > 0 ? died : -died);
    }
    for (i = 0; i < XP_THREADS; i++) {
        writes += w[i].writes;
        reads += w[i].reads;
        async_reads += w[i].async_reads;
        bad += w[i].bad_data;
        failures += w[i].failures;
        cr_expect_eq(w[i].failures, 0, "client %u: %llu failed commands, the first %s", i,
                     (unsigned long long)w[i].failures, gpumem_status_str(w[i].first_bad));
    }
    cr_assert_eq(failures, 0);
    cr_assert_eq(bad, 0, "reads with wrong content");
    cr_assert_eq(writes + reads + async_reads, (uint64_t)XP_THREADS * XP_IOS, "every operation done");

    /* A waiter for the dropped command, then the stop from the other process. */
    cr_assert_eq(pthread_create(&dth, NULL, xp_dropped_read, &dropped), 0);
    while (!__atomic_load_n(&dropped.running, __ATOMIC_ACQUIRE)) gpumem__host_sleep_ns(100000L);
    gpumem__host_sleep_ns(50000000L); /* well inside its wait */
    __atomic_store_n(&cc->stop, 1, __ATOMIC_RELEASE);
    cr_assert(wait_word(&cc->done, 10000), "the controller process did not stop");
    pthread_join(dth, NULL);
    __atomic_store_n(&mon.quit, 1, __ATOMIC_RELEASE);
    pthread_join(mth, NULL);
    cr_assert_eq(dropped.st, GPUMEM_ENODEV, "the stop in the other process ends the wait: %s",
                 gpumem_status_str(dropped.st));

    cr_assert_eq(waitpid(child_pid, &status, 0), child_pid);
    child_pid = -1;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the controller process %s %d (a signal means it touched client state)",
              WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) :
              WEXITSTATUS(status));
    cr_assert_eq(cc->stats.violations, 0, "protocol violations");
    cr_assert_eq(cc->stats.writes, writes, "%llu writes carried out, %llu done", (unsigned long long)cc->stats.writes,
                 (unsigned long long)writes);
    cr_assert_eq(cc->stats.reads, reads + async_reads, "%llu reads carried out, %llu done",
                 (unsigned long long)cc->stats.reads, (unsigned long long)(reads + async_reads));
    cr_assert_eq(cc->stats.commands, writes + reads + async_reads, "completions posted");
    cr_assert_eq(cc->stats.dropped, 1, "the read after the workload was fetched and dropped");
    cr_assert_eq(cc->stats.errors_other, 0);

    /* The parent's side is intact: the dropped request is abandoned, so the
     * pairs are idle and the controller (never started here) can go. */
    for (i = 0; i < XP_PAIRS; i++) cr_assert_eq(gpumem_nvme_qp_check_idle(qp[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
    free(w);
    munmap(shared.base, shared.bytes);
}
