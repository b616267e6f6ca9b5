// Submissions per second (submit + complete, one 512-byte read each) against
// the software controller set to complete instantly, for gpumem's lock-free
// queue pair and, in the same run, for a baseline: the same queue memory
// guarded by one mutex (the dissertation's "locking" design, §5.5).
//
//   make bench        (writes bench/results/queue-<host>.json and .md with ratios)
//
// The controller thread has a CPU of its own and polls (it plays an SSD);
// the client threads share the others (pin_self), so on 2 CPUs every row with
// more than one client thread is oversubscribed.
//
// "ideal" is the floor of the protocol for one client thread (no lock, no
// read-modify-write, no ID table): no queue design can beat it with one
// client, so ideal/mutex bounds what lockfree/mutex can reach at 1 thread.
//
// Each benchmark uses a fresh controller and one queue pair of depth 1024,
// except wakeup_depth: 64 blocking threads on one pair of depth 4 and of
// depth 1024 (issue 13: waiters for a command ID are woken one per ID
// given back, so a shallow queue should not cost much more than a deep one),
// and inline: one thread is both the pair's user and its controller (the
// software controller's core, gpumem_target_serve_ram, called in line):
// submit a batch of N reads, serve them, poll them; no controller thread, so
// the rate is the pair's and the controller core's own CPU cost, which the
// thread scheduling of a loaded machine does not set (issue 19 measures its
// completion validation with it).
#define GPUMEM_IMPLEMENTATION
#include <benchmark/benchmark.h>

#include <sched.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "gpumem_swctl.h"

namespace {

constexpr uint32_t kDepth = 1024;
constexpr uint32_t kLba = 512;

// The baseline: every step under one mutex. Submission writes the entry at
// the tail and rings the doorbell; completion drains whatever the controller
// posted into a per-command-ID table, moves the head, and frees SQ slots from
// the SQ-head field, then looks for its own command ID in the table. It waits
// exactly as the lock-free pair does (gpumem.h's spin-then-park, one class
// of waiter per command ID, the controller's interrupt waking one waiter,
// which drains for everyone and wakes the owners it finds), so that the two
// differ only in how they share the rings: one lock against lock-free steps.
// (Until issue 13 it spun on sched_yield, whose rate measured how busy the
// machine's other processes kept the core more than the queue.)
struct MutexQueue {
    gpumem_nvme_qp *qp;  // borrowed for its rings, doorbells, signals and namespace
    std::mutex m;
    uint32_t tail = 0, sq_head = 0, cq_head = 0, phase = 1, next_cid = 0;
    std::vector<uint32_t> done;  // per CID: 0 free, 1 in flight, 2 completed
    std::vector<uint16_t> status;
    std::unique_ptr<uint32_t[]> parked{new uint32_t[65536]()};  // per CID: its owner may be asleep
    explicit MutexQueue(gpumem_nvme_qp *q) : qp(q), done(65536, 0), status(65536, 0) {}

    // Drain under the lock; what to wake is returned, and woken by
    // wake_after() once the lock is dropped (as the pair does: a woken thread
    // may take the waker's core on the spot).
    struct Wakes {
        uint32_t drained = 0, owners = 0;
    };
    Wakes drain_locked() {
        const uint32_t mask = qp->depth - 1;
        Wakes w;
        uint32_t &n = w.drained, &wake = w.owners;
        for (;;) {
            gpumem_nvme_cpl *e = &qp->cq[cq_head];
            uint32_t dw3 = __atomic_load_n(&e->dw3, __ATOMIC_ACQUIRE);
            if (((dw3 >> 16) & 1u) != phase) break;
            done[dw3 & 0xFFFF] = 2;
            status[dw3 & 0xFFFF] = (uint16_t)(dw3 >> 17);
            if (__atomic_exchange_n(&parked[dw3 & 0xFFFF], 0, __ATOMIC_SEQ_CST)) wake |= gpumem__cid_class(dw3 & 0xFFFF);
            sq_head = e->dw2 & 0xFFFF;
            cq_head = (cq_head + 1) & mask;
            if (cq_head == 0) phase ^= 1u;
            n++;
        }
        if (n) __atomic_store_n(qp->cq_doorbell, cq_head, __ATOMIC_RELEASE);
        return w;
    }
    void wake_after(Wakes w, bool submitted) {
        if (!w.drained && !w.owners && !submitted) return;
        gpumem__event_fence();
        if (w.drained || submitted) gpumem__event_kick(qp->doorbell_event, GPUMEM__WAKE_EVERYONE, GPUMEM_EVENT_ALL);
        if (w.owners) gpumem__event_kick(&qp->signals->event, GPUMEM__WAKE_EVERYONE, w.owners);
    }
    void drain() {
        Wakes w;
        {
            std::lock_guard<std::mutex> g(m);
            w = drain_locked();
        }
        wake_after(w, false);
    }
    bool try_submit(gpumem_nvme_cmd &cmd, uint16_t &cid) {
        const uint32_t mask = qp->depth - 1;
        Wakes w;
        bool ok = false;
        {
            std::lock_guard<std::mutex> g(m);
            w = drain_locked();
            if (((tail + 1) & mask) != sq_head && done[next_cid & 0xFFFF] == 0) {
                cid = (uint16_t)(next_cid++ & 0xFFFF);
                done[cid] = 1;
                cmd.cdw0 = (cmd.cdw0 & 0xFFFFu) | ((uint32_t)cid << 16);
                qp->sq[tail] = cmd;
                tail = (tail + 1) & mask;
                __atomic_store_n(qp->sq_doorbell, tail, __ATOMIC_RELEASE);
                ok = true;
            }
        }
        wake_after(w, ok);
        return ok;
    }
    bool try_complete(uint16_t cid, gpumem_status &st) {
        Wakes w;
        bool ok = false;
        {
            std::lock_guard<std::mutex> g(m);
            w = drain_locked();
            if (done[cid] == 2) {
                done[cid] = 0;
                st = status[cid] ? GPUMEM_EIO : GPUMEM_OK;
                ok = true;
            }
        }
        wake_after(w, false);
        return ok;
    }

    gpumem_status exec(gpumem_nvme_cmd cmd) {
        uint16_t cid = 0;
        gpumem_status st = GPUMEM_OK;
        // Room on the SQ: freed by drains, which the controller's interrupt
        // (it wakes submission waiters too) or the park's timeout prompts.
        GPUMEM_WAIT_UNTIL(&qp->signals->sq_event, try_submit(cmd, cid));
        GPUMEM__WAIT_PARKING(&qp->signals->event, GPUMEM_BACKOFF_MAX_NS, gpumem__cid_class(cid), try_complete(cid, st),
                             0, __atomic_store_n(&parked[cid], 1, __ATOMIC_SEQ_CST), drain());
        return st;
    }
};

// The floor of the ring protocol for one client thread: no lock, no
// atomic read-modify-write, no command-ID table; just what the wire asks of
// any queue (write the entry, ring the doorbell, spin on the phase bit, move
// the head, ring the CQ doorbell). Single-threaded by construction, so it
// runs at 1 thread only. Its rate bounds what ANY queue design could reach
// with one client against this controller: the ratio "ideal / mutex" is the
// most the lock-free pair could gain over the mutex ring at 1 thread.
struct IdealRing {
    gpumem_nvme_qp *qp;
    uint32_t tail = 0, cq_head = 0, phase = 1;
    uint16_t next_cid = 0;
    explicit IdealRing(gpumem_nvme_qp *q) : qp(q) {}
    gpumem_status exec(gpumem_nvme_cmd cmd) {
        const uint32_t mask = qp->depth - 1;
        const uint16_t cid = next_cid++;
        cmd.cdw0 = (cmd.cdw0 & 0xFFFFu) | ((uint32_t)cid << 16);
        qp->sq[tail] = cmd;
        tail = (tail + 1) & mask;
        __atomic_store_n(qp->sq_doorbell, tail, __ATOMIC_RELEASE);  // the entry is written before it is announced
        gpumem_nvme_cpl *e = &qp->cq[cq_head];
        uint32_t dw3;
        while ((((dw3 = __atomic_load_n(&e->dw3, __ATOMIC_ACQUIRE)) >> 16) & 1u) != phase) {
        }
        cq_head = (cq_head + 1) & mask;
        if (cq_head == 0) phase ^= 1u;
        __atomic_store_n(qp->cq_doorbell, cq_head, __ATOMIC_RELEASE);
        return (dw3 & 0xFFFF) == cid && !(dw3 >> 17) ? GPUMEM_OK : GPUMEM_EIO;
    }
};

// Where the threads run. The controller thread gets the last CPU this
// process may use to itself, as an SSD is hardware of its own; the client
// threads share the others. Unpinned, the scheduler's wake-affine placement
// put the controller and a client on one core now and then, and a run then
// measured the two taking turns at spinning (tens of microseconds an
// operation) instead of the queue. With fewer than two CPUs nothing is pinned.
void pin_self(bool controller) {
    static cpu_set_t all = [] {  // what the process may use, read before any pinning
        cpu_set_t s;
        if (sched_getaffinity(0, sizeof s, &s) != 0) CPU_ZERO(&s);
        return s;
    }();
    cpu_set_t want = all;
    int last = -1;
    if (CPU_COUNT(&all) < 2) return;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &all)) last = i;
    if (controller) {
        CPU_ZERO(&want);
        CPU_SET(last, &want);
    } else {
        CPU_CLR(last, &want);
    }
    sched_setaffinity(0, sizeof want, &want);
}

struct Rig {
    gpumem_swctl *ctl = nullptr;
    gpumem_nvme_qp *qp = nullptr;
    MutexQueue *mq = nullptr;
    explicit Rig(uint32_t depth = kDepth) {
        gpumem_swctl_config c = gpumem_swctl_config_default();
        c.lba_bytes = kLba;
        c.n_blocks = 1 << 16;
        c.max_pending = kDepth;
        // The controller plays an SSD, which never sleeps: it polls its core
        // (pinned, below) instead of parking when idle, so that no row
        // measures how fast a parked thread wakes on this machine (tens of
        // microseconds on the VM, enough to make runs bimodal).
        c.idle_spin_ns = GPUMEM_SWCTL_NEVER_PARK;
        pin_self(true);  // the controller thread inherits this thread's CPU
        if (gpumem_swctl_create(&c, &ctl) != GPUMEM_OK || gpumem_swctl_add_qp(ctl, depth, &qp) != GPUMEM_OK ||
            gpumem_swctl_start(ctl) != GPUMEM_OK)
            abort();
        pin_self(false);
        mq = new MutexQueue(qp);
    }
    ~Rig() {
        gpumem_swctl_stop(ctl);
        gpumem_swctl_stats s;
        gpumem_swctl_get_stats(ctl, &s);
        if (s.violations) fprintf(stderr, "bench: %lu protocol violations!\n", (unsigned long)s.violations);
        delete mq;
        gpumem_swctl_destroy(ctl);
    }
};

Rig *g_rig;

enum Design { kLockFreePair, kMutexRing, kIdealRing };

// kDepthArg: the pair's depth is the benchmark's argument (else kDepth).
template <Design kDesign, bool kDepthArg = false>
void BM_Submit(benchmark::State &state) {
    pin_self(false);
    if (state.thread_index() == 0) g_rig = new Rig(kDepthArg ? (uint32_t)state.range(0) : kDepth);
    alignas(4096) static thread_local unsigned char buf[kLba];
    uint64_t rng = 0x9E3779B97F4A7C15ull * (state.thread_index() + 1);
    IdealRing ideal(g_rig->qp);  // used by kIdealRing only (one thread)
    for (auto _ : state) {
        gpumem_nvme_cmd cmd;
        uint64_t lba = (rng = rng * 6364136223846793005ull + 1) >> 48;
        gpumem_nvme_cmd_read(&cmd, &g_rig->qp->ns, lba, 1, (uintptr_t)buf, 0);
        gpumem_status st = kDesign == kLockFreePair ? gpumem_nvme_qp_exec(g_rig->qp, &cmd, nullptr)
                           : kDesign == kMutexRing  ? g_rig->mq->exec(cmd)
                                                    : ideal.exec(cmd);
        if (st != GPUMEM_OK) state.SkipWithError("I/O failed");
    }
    state.SetItemsProcessed(state.iterations());
    if (state.thread_index() == 0) {
        delete g_rig;
        g_rig = nullptr;
    }
}

// The inline rig: a pair and the controller core's queue in ordinary memory,
// served by the calling thread. Builds against 0.3.0's header too (for the
// issue 19 comparison): there the pair has no signals block and the
// controller's queue binds to the pair.
struct InlineRig {
    static constexpr uint32_t kBlocks = 1 << 12;
    std::vector<gpumem_nvme_cmd> sq{kDepth};
    std::vector<gpumem_nvme_cpl> cq{kDepth};
    alignas(64) uint32_t doorbells[32] = {};
    std::vector<uint64_t> state;
    std::vector<uint16_t> swq_mem;
    std::vector<unsigned char> ram = std::vector<unsigned char>((size_t)kBlocks * kLba);
    gpumem_nvme_qp qp;
    gpumem_target_queue swq;
    gpumem_target_stats st;
#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
    gpumem_nvme_qp_signals signals;
#endif
    InlineRig() {
        gpumem_nvme_qp_desc d;
        memset(&d, 0, sizeof d);
        memset(&st, 0, sizeof st);
        d.depth = kDepth;
        d.n_cids = kDepth;
        d.qid = 1;
        d.ns.nsid = 1;
        d.ns.lba_shift = 9;
        d.ns.n_blocks = kBlocks;
        d.ns.max_blocks = 8;
        d.sq = sq.data();
        d.cq = cq.data();
        d.sq_doorbell = &doorbells[0];
        d.cq_doorbell = &doorbells[16];
        state.resize(gpumem_nvme_qp_state_bytes(kDepth, kDepth) / 8 + 2);
        d.state = state.data();
        d.state_bytes = state.size() * 8;
        swq_mem.resize(gpumem_target_queue_mem_bytes(kDepth) / 2 + 1);
#ifdef GPUMEM_NVME_CMD_TIMEOUT_NEVER
        d.signals = &signals;
        if (gpumem_nvme_qp_init(&qp, &d) != GPUMEM_OK ||
            gpumem_target_queue_init(&swq, &d, swq_mem.data(), swq_mem.size() * 2) != GPUMEM_OK)
            abort();
#else
        if (gpumem_nvme_qp_init(&qp, &d) != GPUMEM_OK ||
            gpumem_target_queue_init(&swq, &qp, swq_mem.data(), swq_mem.size() * 2) != GPUMEM_OK)
            abort();
#endif
    }
};

void BM_Inline(benchmark::State &state) {
    static InlineRig rig;
    const uint32_t batch = (uint32_t)state.range(0);
    alignas(4096) static unsigned char bufs[16][kLba];
    gpumem_nvme_req req[16];
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (auto _ : state) {
        uint32_t i;
        for (i = 0; i < batch; i++) {
            gpumem_nvme_cmd cmd;
            uint64_t lba = ((rng = rng * 6364136223846793005ull + 1) >> 40) % InlineRig::kBlocks;
            gpumem_nvme_cmd_read(&cmd, &rig.qp.ns, lba, 1, (uintptr_t)bufs[i], 0);
            if (gpumem_nvme_qp_submit(&rig.qp, &cmd, &req[i]) != GPUMEM_OK) state.SkipWithError("submit");
        }
        gpumem_target_serve_ram(&rig.swq, &rig.st, &rig.qp.ns, rig.ram.data(), 0);
        for (i = 0; i < batch; i++)
            if (gpumem_nvme_qp_poll(&rig.qp, &req[i]) != GPUMEM_OK) state.SkipWithError("poll");
    }
    state.SetItemsProcessed(state.iterations() * batch);
}

}  // namespace

BENCHMARK(BM_Inline)->Name("inline")->Arg(1)->Arg(16)->MinTime(0.5);
#define GPUMEM_THREADS Threads(1)->Threads(2)->Threads(4)->Threads(16)->Threads(64)
BENCHMARK_TEMPLATE(BM_Submit, kLockFreePair)->Name("lockfree")->GPUMEM_THREADS->UseRealTime()->MinTime(0.5);
BENCHMARK_TEMPLATE(BM_Submit, kMutexRing)->Name("mutex")->GPUMEM_THREADS->UseRealTime()->MinTime(0.5);
BENCHMARK_TEMPLATE(BM_Submit, kIdealRing)->Name("ideal")->Threads(1)->UseRealTime()->MinTime(0.5);
BENCHMARK_TEMPLATE(BM_Submit, kLockFreePair, true)->Name("wakeup_depth")->Arg(4)->Arg(1024)->Threads(64)->UseRealTime()->MinTime(0.5);

BENCHMARK_MAIN();
