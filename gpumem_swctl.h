/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_swctl.h - software NVMe controllers for gpumem's queue pairs: a host
 * thread (gpumem_swctl) or a persistent GPU block (gpumem_swctl_gpu) that
 * plays the SSD, on the same rings and doorbells a real controller would
 * see. Emulation, for tests, benchmarks and hardware-free use; optional: a
 * program that drives only real controllers needs gpumem_nvme.h alone.
 *
 * USAGE (host threads against the software controller)
 *
 *   #define _POSIX_C_SOURCE 200809L        // the host shim uses POSIX threads/clocks
 *   #define GPUMEM_IMPLEMENTATION           // in exactly one .c file
 *   #include "gpumem_swctl.h"               // includes gpumem_target.h, gpumem_nvme.h
 *
 *   gpumem_swctl_config cfg = gpumem_swctl_config_default();
 *   cfg.n_blocks = 1 << 20;                // 512 MiB of 512-byte blocks in RAM
 *   gpumem_swctl *ctl;
 *   gpumem_swctl_create(&cfg, &ctl);
 *   gpumem_nvme_qp *qp;
 *   gpumem_swctl_add_qp(ctl, 1024, &qp);    // depth 1024; as many pairs as you like
 *   gpumem_swctl_start(ctl);
 *
 *   // any number of threads use qp: gpumem_nvme_qp_read_buf, _submit_buf,
 *   // _poll, ... (USAGE in gpumem_nvme.h)
 *
 *   gpumem_swctl_stop(ctl);
 *   gpumem_swctl_stats s; gpumem_swctl_get_stats(ctl, &s);   // s.violations == 0
 *   gpumem_swctl_destroy(ctl);
 *
 * GPU CLIENTS (GPU threads against a controller)
 *
 *   - the host-thread controller above, set up for GPU clients in CUDA host
 *     code with gpumem_swctl_config_gpu_clients(&cfg) before create: each
 *     pair's rings, doorbells and signals (ring memory) and the namespace in
 *     pinned, mapped host memory, its client state (tickets, turns, command
 *     IDs) in GPU memory, and a controller thread that never parks, because
 *     GPU threads cannot wake it (cfg.idle_spin_ns / park_ns and
 *     gpumem_swctl_set_polled choose otherwise; the cost of each setting is
 *     in bench/results/issue12-doorbell-vm.md). Pass the gpumem_nvme_qp
 *     pointers to kernels as they are; they are device pointers;
 *   - or the GPU-resident controller, gpumem_swctl_gpu: a persistent block
 *     that serves pairs in GPU memory, from a namespace in GPU memory or in
 *     pinned host memory; see "GPU-resident software controller" below.
 *
 *   Both run the controller core of gpumem_target.h (gpumem_target_*), with
 *   the same completions and violation counters; the host-thread controller
 *   keeps its pairs in a gpumem_target.h pair set and idles by its idle step.
 *
 * SECTIONS: the GPU-resident controller; host shim: the host-thread
 * controller.
 */
#ifndef GPUMEM_SWCTL_H
#define GPUMEM_SWCTL_H

#include "gpumem_target.h" /* the controller core, the pair set, the idle step; includes gpumem_nvme.h */
#include "gpumem_watchdog.h" /* gpumem_swctl_watchdog_config */

/* ======================================================================== */
/* GPU-resident software controller                                         */
/* ======================================================================== */
/*
 * A persistent block of GPU threads that is an NVMe controller on queue pairs
 * in memory the caller places: the pairs, rings and controller state in GPU
 * memory (cudaMalloc) or in mapped pinned host memory (cudaHostAlloc with
 * cudaHostAllocMapped), the namespace either in GPU memory or in mapped
 * pinned host memory (then every transfer crosses PCIe). It runs the same
 * core as the host-thread controller (gpumem_target.h), so completions
 * carry the same phase, SQ ID, command ID and status, and it counts the same
 * protocol violations. The SQ head a completion reports may be further on
 * than the host controller's (the head after the warp's whole round of
 * fetches, up to 31 entries later): valid NVMe, as those entries have been
 * read by then.
 *
 * It supports a subset of the host controller: instant completion, in order,
 * from a namespace in memory, with an optional IOPS cap (completions spaced
 * by the GPU's global timer, the cap split evenly over the serving warps
 * that have pairs). No file backing, latency model, reordering or error
 * injection: those stay with gpumem_swctl.
 *
 * Warp w of W serves pairs w, w+W, w+2W, ...; each pair has one serving
 * warp, so the controller-side state needs no atomics, and the warp's lanes
 * take several commands of the pair at once and split each copy. The loop
 * ends when the stop word is set. Everything is GPUMEM_API: the host test suite runs the same
 * loop from a POSIX thread against host threads.
 *
 *   gpumem_swctl_gpu_desc d = gpumem_swctl_gpu_desc_default();
 *   d.n_pairs = 8; d.depth = 1024; d.n_blocks = 1 << 20; d.ram = ns_bytes;
 *   d.control = flags;                      // 2 words, mapped pinned host memory
 *   size_t bytes = gpumem_swctl_gpu_bytes(&d);
 *   void *mem;  cudaMalloc(&mem, bytes);
 *   gpumem_swctl_gpu_init_cuda(mem, bytes, &d);          // a 1-thread kernel inits it
 *   gpumem_swctl_gpu *ctl = (gpumem_swctl_gpu *)mem;   // device pointers from here
 *   cudaStream_t stream;  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
 *   const void *clients[] = {(const void *)my_kernel};   // every kernel that will use its pairs
 *   gpumem_swctl_gpu_start(ctl, &d, 32 * d.n_pairs, stream, clients, 1, 5000);
 *       // preloads its own kernel and the client kernels (lazy module loading
 *       // would never load one while the controller runs), launches the
 *       // persistent controller (a warp per pair: 256 threads; above one
 *       // block's worth, several blocks) and waits until it runs
 *   ... kernels use gpumem_swctl_gpu_pair(mem, i) like any other pair ...
 *   gpumem_swctl_gpu_stop(&d); cudaStreamSynchronize(stream);
 *   gpumem_target_stats s; gpumem_swctl_gpu_get_stats_cuda(ctl, &s);   // s.violations == 0
 *
 * Start the controller on its own non-blocking stream (start refuses any
 * other) before its clients (gpumem_swctl_gpu_start waits until it runs;
 * if it fails, it has stopped it, see there): clients that fill the GPU
 * first would keep it from ever being scheduled. Kernels launched while it
 * runs must have been loaded before it started: pass them to
 * gpumem_swctl_gpu_start, or preload them with gpumem_cuda_preload (or
 * set CUDA_MODULE_LOADING=EAGER). Or run gpumem_swctl_gpu_serve in block 0
 * of a cooperative launch that also holds the clients (the device tests do
 * both).
 */

typedef struct gpumem_swctl_gpu_desc {
    uint32_t n_pairs;    /* 1 .. 65535 */
    uint32_t depth;      /* entries per queue: a power of two, 2 .. 65536 */
    uint32_t n_cids;     /* command IDs per pair: a power of two, 2 .. 65536 */
    uint32_t lba_bytes;  /* a power of two, 512 .. 65536 */
    uint64_t n_blocks;   /* namespace capacity */
    uint32_t max_blocks; /* most blocks per command (MDTS), 1 .. 65536 */
    uint32_t reserved_;
    uint64_t iops;       /* completion rate cap; 0 = none */
    void *ram;           /* n_blocks * lba_bytes bytes, addressable by the serving threads */
    uint32_t *control;   /* 2 words, zeroed by init: [0] stop (nonzero ends the loop),
                            [1] serving threads running; host-visible memory */
} gpumem_swctl_gpu_desc;

typedef struct gpumem_swctl_gpu {
    gpumem_nvme_ns ns;
    unsigned char *ram;
    gpumem_nvme_qp *pairs;         /* n_pairs: what the pairs' users are handed */
    gpumem_target_queue *queues;       /* n_pairs: the controller's side of each */
    gpumem_target_stats *stats;   /* n_pairs: written by each pair's server */
    uint32_t *control;
    uint32_t n_pairs;
    uint32_t init_status;          /* gpumem_swctl_gpu_init_cuda's result, read back by copy */
    uint64_t iops;
    /* The stop word mirrored where the controller lives (GPU memory): the
     * serving warps take turns to look at control[0], which may be across
     * PCIe, and copy it here, where every thread looks while idle
     * (gpumem__gpuctl_stopping). stop_read_at: when control[0] was last
     * read, in 1024 ns units of gpumem_clock_ns (wrapping). */
    uint32_t stop_mirror;
    uint32_t stop_read_at;
} gpumem_swctl_gpu;

#ifndef GPUMEM_GPUCTL_BATCH
/* Commands a serving warp takes from one pair per visit before it moves on
 * (its other pairs, the stop word), in rounds of at most one per lane:
 * larger batches mean fewer doorbell reads per command, smaller ones
 * fairer service across pairs. 32 fills a warp's lanes in one round. */
#define GPUMEM_GPUCTL_BATCH 32u
#endif

#ifndef GPUMEM_GPUCTL_STOP_POLL_NS
/* How often, at most, the whole controller reads the host's stop word
 * (control[0], in pinned host memory: each read a PCIe round trip), and so
 * about how long a stop takes to be seen. */
#define GPUMEM_GPUCTL_STOP_POLL_NS 10000u
#endif
/* The same in the 1024 ns units of gpumem__gpuctl_stopping's clock. */
#define GPUMEM__GPUCTL_STOP_POLL_UNITS ((GPUMEM_GPUCTL_STOP_POLL_NS + 1023u) >> 10)

GPUMEM_API gpumem_swctl_gpu_desc gpumem_swctl_gpu_desc_default(void) {
    gpumem_swctl_gpu_desc d;
    unsigned char *b = (unsigned char *)&d;
    size_t k;
    for (k = 0; k < sizeof d; k++) b[k] = 0;
    d.n_pairs = 1;
    d.depth = 1024;
    d.n_cids = 1024;
    d.lba_bytes = 512;
    d.max_blocks = 256;
    return d;
}

/* Layout in the caller's memory: the controller, then the pairs, queues and
 * stats arrays, then each pair's block (4 KiB aligned from the base):
 * SQ ring, CQ ring, two doorbells on lines of their own, the signals block
 * (ring memory, the controller's side of the pair), pair state (client
 * memory), controller-side queue memory, then the command IDs' PRP-list
 * pages, on
 * the first page boundary of the real address (the base need only be
 * 64-byte aligned, and CUDA's allocators give 512). */
#define GPUMEM__GPUCTL_PAIRS_OFF GPUMEM_ALIGN_UP(sizeof(gpumem_swctl_gpu), 64)
#define GPUMEM__GPUCTL_SIGNALS_BYTES GPUMEM_ALIGN_UP(sizeof(gpumem_nvme_qp_signals), 64)

/* The namespace a controller of this description serves (what a cache in
 * front of its pairs is checked against), in *out. GPUMEM_ENULL for NULL
 * (then *out, if given, is a namespace of no blocks, which every pair and
 * cache refuses). */
GPUMEM_API gpumem_status gpumem_swctl_gpu_ns(const gpumem_swctl_gpu_desc *d, gpumem_nvme_ns *out) {
    if (!out) return GPUMEM_ENULL;
    out->nsid = out->lba_shift = out->max_blocks = out->reserved_ = 0;
    out->n_blocks = 0;
    if (!d) return GPUMEM_ENULL;
    out->nsid = 1;
    out->lba_shift = gpumem_log2_u64(d->lba_bytes);
    out->n_blocks = d->n_blocks;
    out->max_blocks = d->max_blocks;
    return GPUMEM_OK;
}

GPUMEM_API size_t gpumem__gpuctl_pair_core(const gpumem_swctl_gpu_desc *d) {
    return GPUMEM_ALIGN_UP((size_t)d->depth * (sizeof(gpumem_nvme_cmd) + sizeof(gpumem_nvme_cpl)) +
                               2 * GPUMEM_PAD_BYTES + GPUMEM__GPUCTL_SIGNALS_BYTES +
                               gpumem_nvme_qp_state_bytes(d->depth, d->n_cids) +
                               gpumem_target_queue_mem_bytes(d->depth),
                           4096);
}

GPUMEM_API size_t gpumem__gpuctl_pair_block(const gpumem_swctl_gpu_desc *d) {
    gpumem_nvme_ns ns;
    size_t prp;
    (void)gpumem_swctl_gpu_ns(d, &ns);
    prp = gpumem_nvme_qp_prp_bytes(d->n_cids, &ns);
    return gpumem__gpuctl_pair_core(d) + (prp ? prp + 4096 : 0);
}

GPUMEM_API size_t gpumem__gpuctl_first_block(uint32_t n_pairs) {
    return GPUMEM_ALIGN_UP(GPUMEM__GPUCTL_PAIRS_OFF +
                               (size_t)n_pairs * (sizeof(gpumem_nvme_qp) + sizeof(gpumem_target_queue) +
                                                  sizeof(gpumem_target_stats)),
                           4096);
}

/* Bytes of memory the controller needs for its pairs (not the namespace). */
GPUMEM_API size_t gpumem_swctl_gpu_bytes(const gpumem_swctl_gpu_desc *d) {
    if (!d) return 0;
    return gpumem__gpuctl_first_block(d->n_pairs) + (size_t)d->n_pairs * gpumem__gpuctl_pair_block(d);
}

/* Pair i, computed from the base without touching the memory (so the host
 * can hand device pointers to kernels). */
GPUMEM_API gpumem_nvme_qp *gpumem_swctl_gpu_pair(void *mem, uint32_t i) {
    if (!mem) return (gpumem_nvme_qp *)0;
    return (gpumem_nvme_qp *)((unsigned char *)mem + GPUMEM__GPUCTL_PAIRS_OFF) + i;
}

/* Lay the controller out in `mem` (64-byte aligned, gpumem_swctl_gpu_bytes
 * bytes) and initialise it and its pairs; `mem` is then the controller.
 * Runs where the memory can be written: on the host for host-visible memory,
 * in a one-thread kernel for GPU memory (gpumem_swctl_gpu_init_cuda). */
GPUMEM_API gpumem_status gpumem_swctl_gpu_init(void *mem, size_t bytes, const gpumem_swctl_gpu_desc *d) {
    gpumem_swctl_gpu *c = (gpumem_swctl_gpu *)mem;
    unsigned char *base = (unsigned char *)mem;
    size_t block, core, first, k;
    uint32_t i;
    gpumem_status st;
    if (!mem || !d || !d->ram || !d->control) return GPUMEM_ENULL;
    if (((uintptr_t)mem & 63u) != 0) return GPUMEM_EINVAL;
    if (d->n_pairs == 0 || d->n_pairs > 65535 || d->max_blocks == 0 || d->max_blocks > 65536 ||
        d->lba_bytes < 512 || d->lba_bytes > 65536 || !gpumem_is_pow2_u64(d->lba_bytes) || d->n_blocks == 0 ||
        !gpumem__valid_count(d->depth, GPUMEM_NVME_MAX_DEPTH) || !gpumem__valid_count(d->n_cids, GPUMEM_NVME_MAX_CIDS))
        return GPUMEM_EINVAL;
    if (d->n_blocks > UINT64_MAX / d->lba_bytes) return GPUMEM_ERANGE; /* byte offsets must not wrap */
    if (bytes < gpumem_swctl_gpu_bytes(d)) return GPUMEM_ENOMEM;
    block = gpumem__gpuctl_pair_block(d);
    core = gpumem__gpuctl_pair_core(d);
    first = gpumem__gpuctl_first_block(d->n_pairs);
    for (k = 0; k < first; k++) base[k] = 0;
    (void)gpumem_swctl_gpu_ns(d, &c->ns);
    c->ram = (unsigned char *)d->ram;
    c->pairs = gpumem_swctl_gpu_pair(mem, 0);
    c->queues = (gpumem_target_queue *)(c->pairs + d->n_pairs);
    c->stats = (gpumem_target_stats *)(c->queues + d->n_pairs);
    c->control = d->control;
    c->n_pairs = d->n_pairs;
    c->iops = d->iops;
    for (i = 0; i < d->n_pairs; i++) {
        unsigned char *p = base + first + (size_t)i * block;
        size_t rings = (size_t)d->depth * (sizeof(gpumem_nvme_cmd) + sizeof(gpumem_nvme_cpl));
        size_t state = gpumem_nvme_qp_state_bytes(d->depth, d->n_cids);
        unsigned char *after_rings = p + rings + 2 * GPUMEM_PAD_BYTES + GPUMEM__GPUCTL_SIGNALS_BYTES;
        gpumem_nvme_qp_desc q;
        unsigned char *qb = (unsigned char *)&q;
        for (k = 0; k < sizeof q; k++) qb[k] = 0;
        q.depth = d->depth;
        q.n_cids = d->n_cids;
        q.qid = i + 1;
        q.ns = c->ns;
        q.sq = (gpumem_nvme_cmd *)p;
        q.cq = (gpumem_nvme_cpl *)(p + (size_t)d->depth * sizeof(gpumem_nvme_cmd));
        q.sq_doorbell = (uint32_t *)(p + rings);
        q.cq_doorbell = (uint32_t *)(p + rings + GPUMEM_PAD_BYTES);
        q.signals = (gpumem_nvme_qp_signals *)(p + rings + 2 * GPUMEM_PAD_BYTES);
        q.state = after_rings;
        q.state_bytes = state;
        if (block > core) q.prp_lists = (uint64_t *)GPUMEM_ALIGN_UP((uintptr_t)(p + core), 4096);
        if ((st = gpumem_nvme_qp_init(&c->pairs[i], &q)) != GPUMEM_OK) return st;
        if ((st = gpumem_target_queue_init(&c->queues[i], &q, after_rings + state,
                                           gpumem_target_queue_mem_bytes(d->depth))) != GPUMEM_OK)
            return st;
    }
    d->control[0] = d->control[1] = 0;
    return GPUMEM_OK;
}

/* Whether the controller is asked to stop. The host's stop word is a
 * microsecond away across PCIe when it is in host memory, so it is read
 * about once per GPUMEM_GPUCTL_STOP_POLL_NS for the whole controller, and
 * mirrored into the controller's memory, where every thread looks. Any
 * serving warp may be the reader: lane 0 of each looks, at most once per
 * period of its own clock (*next_look, in 1024 ns units of gpumem_clock_ns:
 * %globaltimer on the device), at when the word was last read
 * (stop_read_at), and the one whose compare-and-swap moves that on reads
 * it. So no particular thread must serve (a caller's kernel may serve from
 * any whole warps), and a block that starts late, while the others wait
 * for an SM or have ended (a stop after a start that timed out), reads it
 * itself at its first look. The difference is unsigned: stop_read_at starts
 * at 0 on a clock it never came from, and a reader that finds it newer than
 * its own time only reads once more than it had to. Relaxed: nothing is
 * read after the stop word, the loop just ends; stop_read_at orders nothing. */
GPUMEM_API int gpumem__gpuctl_stopping(gpumem_swctl_gpu *c, uint32_t lane, uint32_t *next_look) {
    if (lane == 0) {
        const uint32_t now = (uint32_t)(gpumem_clock_ns() >> 10);
        if ((int32_t)(now - *next_look) >= 0) {
            uint32_t last = gpumem_atomic_load_u32(&c->stop_read_at, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
            *next_look = now + GPUMEM__GPUCTL_STOP_POLL_UNITS;
            if (now - last >= GPUMEM__GPUCTL_STOP_POLL_UNITS &&
                gpumem_atomic_cas_u32(&c->stop_read_at, &last, now, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE) &&
                gpumem_atomic_load_u32(&c->control[0], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) != 0)
                gpumem_atomic_store_u32(&c->stop_mirror, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE);
        }
    }
    return gpumem_atomic_load_u32(&c->stop_mirror, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_DEVICE) != 0;
}

/* One visit of a warp (`lanes` lanes, `mask` of them: every lane calls
 * with the same arguments but its own `lane`) to pair i, which this warp
 * alone serves. Lane 0 takes the doorbells; then, round by round, up to one
 * command per lane and at most `budget` in all:
 *   - each lane copies its command from the SQ (command j of the round from
 *     head + j: the warp's loads are one coalesced read of the ring);
 *   - in SQ order, one lane at a time, each accepts its command (SQ head,
 *     command ID) and checks it: the controller-side queue and the pair's
 *     counts have one writer at a time, in the order the host controller
 *     would make the same steps, and a warp barrier between turns passes
 *     each lane's writes on to the next;
 *   - the whole warp moves the data of each command in turn
 *     (gpumem_target_move_ram with every lane: a 4 KiB transfer is two
 *     groups of four 16-byte units per lane), a warp barrier after each, so
 *     that commands on the same blocks see each other's data in SQ order;
 *   - in SQ order again, each lane claims its CQ entry (position, phase, SQ
 *     head, command ID), and then every lane writes its entry at once, so
 *     that the system-scope release orders the round's data once for the
 *     warp rather than once per command. A harvester takes entries in CQ
 *     order and stops at the first not yet written, so entries that become
 *     visible out of order are still harvested in order.
 * So completions are posted in fetch order with the right phase, with up to
 * a warp's width of commands in flight; each reports the SQ head after its
 * round (every entry up to it has been read).
 * Returns the commands posted (the same on every lane) and sets *doorbells
 * on lane 0 when a doorbell moved. */
GPUMEM_API uint32_t gpumem__gpuctl_visit(gpumem_swctl_gpu *c, uint32_t i, uint32_t budget, uint32_t lane,
                                         uint32_t lanes, uint32_t mask, uint32_t *doorbells) {
    gpumem_target_queue *q = &c->queues[i];
    gpumem_target_stats *st = &c->stats[i];
    uint32_t n = 0;
    if (lane == 0) *doorbells = gpumem_target_take_cq_doorbell(q, st) + gpumem_target_take_sq_doorbell(q, st);
    /* Lane 0's acquire of the SQ doorbell before every lane's loads of the
     * commands it brought: the barrier orders memory between its lanes. */
    gpumem_warp_sync(mask);
    for (;;) {
        gpumem_nvme_cmd cmd;
        gpumem_nvme_cpl *cpl = (gpumem_nvme_cpl *)0;
        uint64_t off = 0, len = 0, round = 0;
        uint32_t movers, count, head, k, dw2 = 0, dw3 = 0;
        uint16_t status = 0;
        /* Lane 0 sizes the round (commands waiting, CQ room, the budget left,
         * the lanes) and passes it on with the SQ head it starts from. A
         * shuffle orders no memory: the other lanes' loads of the SQ entries
         * are ordered after lane 0's acquire of the SQ doorbell by the warp
         * barrier above, and after the previous round's accepts and claims
         * (SQ head, CQ room) by the barriers between the turns below. */
        if (lane == 0) {
            const uint32_t waiting = (q->sq_tail - q->sq_head) & q->mask, room = q->depth - 1 - q->cq_posted;
            uint32_t take = budget - n < lanes ? budget - n : lanes;
            if (take > waiting) take = waiting;
            if (take > room) take = room;
            round = (uint64_t)take << 32 | q->sq_head;
        }
        round = gpumem_warp_bcast_u64(mask, round, 0);
        count = (uint32_t)(round >> 32);
        head = (uint32_t)round;
        if (count == 0) break;
        /* A lane past the round loads command 0 of it again (the same line,
         * no divergence) and leaves it alone: it only takes part in the
         * shuffles and the copies. */
        cmd = q->sq[(head + (lane < count ? lane : 0)) & q->mask];
        for (k = 0; k < count; k++) {
            if (lane == k) {
                gpumem__target_accept(q, st, &cmd);
                if (!(cmd.cdw0 & GPUMEM_TARGET_CID_CONFLICT))
                    status = gpumem_target_check(st, &c->ns, &cmd, &off, &len);
            }
            gpumem_warp_sync(mask);
        }
        movers = gpumem_warp_ballot(mask, lane < count && !(cmd.cdw0 & GPUMEM_TARGET_CID_CONFLICT) && status == 0 &&
                                              len != 0);
        while (movers) {
            const uint32_t from = gpumem_lowest_lane(movers);
            const uint64_t to_host = gpumem_warp_bcast_u64(mask, (cmd.cdw0 & 0xFFu) == GPUMEM_NVME_OP_READ, from);
            const uint64_t at = gpumem_warp_bcast_u64(mask, off, from), bytes = gpumem_warp_bcast_u64(mask, len, from);
            const uint64_t prp1 = gpumem_warp_bcast_u64(mask, cmd.prp1, from);
            const uint64_t prp2 = gpumem_warp_bcast_u64(mask, cmd.prp2, from);
            /* Split over the lanes there are (a last warp may be partial). */
            if (gpumem_target_move_ram(c->ram, at, bytes, (int)to_host, prp1, prp2, lane, lanes) && lane == from)
                status = GPUMEM_NVME_STATUS(0, 0x13); /* counted in its turn below */
            movers &= movers - 1;
            /* Each command's data complete before the next one's moves (a
             * Write and a later Read of the same blocks in one round): the
             * lanes split every copy differently, and the shuffles above
             * order no memory, so the warp barrier does. */
            gpumem_warp_sync(mask);
        }
        /* Every lane's share of the data before any completion: each lane
         * orders its own stores at system scope, and the warp barrier orders
         * them before every lane's claim and write of a CQ entry. */
        gpumem_atomic_fence(GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
        gpumem_warp_sync(mask);
        for (k = 0; k < count; k++) {
            if (lane == k) {
                if (status == GPUMEM_NVME_STATUS(0, 0x13)) st->bad_prp++; /* only the copy gives this status */
                if (status) st->errors_other++;
                cpl = gpumem__target_post_claim(q, st, &cmd, status, &dw2, &dw3);
            }
            gpumem_warp_sync(mask);
        }
        if (lane < count) gpumem__target_post_write(cpl, dw2, dw3);
        n += count;
    }
    return n;
}

/* The serving loop of thread t of n. The warps of the n threads (W of them)
 * share the pairs: warp w serves pairs w, w + W, w + 2W, ..., each pair one
 * warp's alone, so the controller-side state needs no atomics, and the 32
 * lanes of a warp serve one pair at a time together (gpumem__gpuctl_visit:
 * several of its commands at once, every copy split over the lanes). Call it
 * from every thread of a persistent block (the kernel gpumem_swctl_gpu_kernel
 * does), or from host threads. On the device t must number threads so that
 * a warp's lanes are t = 32w .. 32w+31 (threadIdx.x and blockDim.x in one
 * block, or the global index with whole warps per block), and every thread
 * 0 .. n-1 must call it; a last warp of fewer than 32 threads serves with
 * the lanes it has. On the host a thread is a warp of one (tests/host_warp.h
 * makes warps of several host threads). Any whole warps may serve, in any
 * blocks: a caller's kernel may serve from its warps 1..k and keep warp 0
 * for other work (gpumem__gpuctl_stopping: whichever warps serve read the
 * stop word). Ends when the stop word is set, seen within about
 * GPUMEM_GPUCTL_STOP_POLL_NS. */
GPUMEM_API void gpumem_swctl_gpu_serve(gpumem_swctl_gpu *c, uint32_t t, uint32_t n) {
    const uint32_t lane = t % GPUMEM_WARP_WIDTH, first = t - lane, warp = t / GPUMEM_WARP_WIDTH;
    const uint32_t warps = (n + GPUMEM_WARP_WIDTH - 1) / GPUMEM_WARP_WIDTH;
    uint32_t servers, k, lanes, mask, next_look;
    uint64_t gap, next = 0;
    gpumem_backoff b = gpumem_backoff_start();
    if (!c || n == 0 || t >= n) return;
#if GPUMEM_ON_DEVICE
    GPUMEM_ASSERT(lane == gpumem_lane_id()); /* t numbered by warp */
#endif
    servers = warps < c->n_pairs ? warps : c->n_pairs;
    /* The lanes of this warp that take part (a last warp may be partial). */
    lanes = n - first < GPUMEM_WARP_WIDTH ? n - first : GPUMEM_WARP_WIDTH;
    mask = lanes >= 32 ? 0xFFFFFFFFu : (1u << lanes) - 1u;
    /* With a cap, this warp may complete one command every `gap` ns, with
     * bursts of at most 32 after an idle spell. */
    gap = c->iops ? (1000000000ull * servers + c->iops - 1) / c->iops : 0;
    /* Release is not needed (nothing is published), but the host polls this
     * word: system scope. */
    gpumem_atomic_fetch_add_u32(&c->control[1], 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    next_look = (uint32_t)(gpumem_clock_ns() >> 10); /* the first look reads the stop word */
    for (uint32_t round = 0, work = 0;; round++) {
        /* Look for the stop when idle, and every 64th busy round. */
        int stop = (work == 0 || (round & 63u) == 0) && gpumem__gpuctl_stopping(c, lane, &next_look);
        if (gpumem_warp_ballot(mask, stop)) break;
        work = 0;
        for (k = warp; k < c->n_pairs; k += warps) {
            uint32_t budget = GPUMEM_GPUCTL_BATCH, doorbells = 0, posted;
            if (gap) {
                /* Lane 0's clock for the whole warp: the budget must be the same on every lane. */
                const uint64_t now = gpumem_warp_bcast_u64(mask, lane == 0 ? gpumem_clock_ns() : 0, 0);
                if (next + 32 * gap < now) next = now - 32 * gap;
                if (next > now) budget = 0;
                else if ((now - next) / gap + 1 < budget) budget = (uint32_t)((now - next) / gap) + 1;
            }
            posted = gpumem__gpuctl_visit(c, k, budget, lane, lanes, mask, &doorbells);
            next += gap * posted;
            work |= posted | doorbells;
        }
        /* The warp idles (backs off) only when it had no work: lane 0 saw the
         * doorbells, and every lane counted the commands. */
        work = gpumem_warp_ballot(mask, work != 0) != 0;
        if (work) {
            b = gpumem_backoff_start();
        } else if (!gpumem_backoff_pause(&b)) {
#if !GPUMEM_ON_DEVICE
            gpumem__host_sleep_ns(2000); /* a host thread playing the GPU controller (tests) */
#endif
        }
    }
    /* Its pairs will not be served again: their waiters end with ENODEV
     * (through the signals block, the controller's side of each pair). */
    if (lane == 0)
        for (k = warp; k < c->n_pairs; k += warps) gpumem_nvme_qp_signals_set_stopped(c->queues[k].signals, 1);
}

/* The sum of every pair's counts (exact once the loop has ended). Runs
 * where the controller's memory can be read. */
GPUMEM_API gpumem_status gpumem_swctl_gpu_get_stats(const gpumem_swctl_gpu *c, gpumem_target_stats *out) {
    uint32_t i;
    unsigned char *b = (unsigned char *)out;
    size_t k;
    if (!c || !out) return GPUMEM_ENULL;
    for (k = 0; k < sizeof *out; k++) b[k] = 0;
    for (i = 0; i < c->n_pairs; i++) gpumem_target_stats_add(out, &c->stats[i]);
    return GPUMEM_OK;
}

/* Stop the loop: a release store, so that it is seen after anything the
 * caller wrote before (system scope: the caller may be the host). */
GPUMEM_API gpumem_status gpumem_swctl_gpu_stop(const gpumem_swctl_gpu_desc *d) {
    if (!d || !d->control) return GPUMEM_ENULL;
    gpumem_atomic_store_u32(&d->control[0], 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    return GPUMEM_OK;
}

#if defined(__CUDACC__)
#include <stdlib.h>
#include <string.h>
/* CUDA helpers for the host side of a .cu file. Templates, so that a header
 * included in several translation units defines each kernel once.
 *
 * Lazy module loading (CUDA 12.2+ default, CUDA_MODULE_LOADING=LAZY): a
 * kernel's module is loaded at its first launch, and that load waits for
 * the device to go idle - which it never does while the persistent
 * controller runs. So a client kernel first launched after the controller
 * started never starts (measured on an H100: the clients stay at stage 0
 * forever). gpumem_swctl_gpu_start therefore loads the controller's own
 * kernels (the serving loop and the init kernel, so that a later
 * gpumem_swctl_gpu_init_cuda, of another controller, works while this one
 * runs) and the client kernels it is given (gpumem_cuda_preload) before
 * the controller starts; under lazy loading, or where the driver cannot
 * say which (gpumem_cuda_lazy_loading() == -1), with no client kernels
 * given it refuses with GPUMEM_ESTATE and says what to do. Kernels launched
 * later must have been preloaded too (or run with CUDA_MODULE_LOADING=EAGER
 * set before the first CUDA call). No helper here calls cudaMalloc or
 * cudaFree, which wait for the whole device, and none uses the legacy
 * default stream, which a caller's persistent kernel may hold.
 *
 * CUDA errors: a runtime call that failed earlier leaves its error to be
 * returned by the next cudaGetLastError, so each launch here is preceded
 * by one that clears it; otherwise a failure that was not the launch's
 * (cudaGetDriverEntryPointByVersion in gpumem_cuda_lazy_loading, say) would
 * read as a failed launch, and start would return while the controller
 * ran with nobody to stop it. */
template <typename gpumem_unused_ = void>
__global__ void gpumem_swctl_gpu_kernel(gpumem_swctl_gpu *c) {
    gpumem_swctl_gpu_serve(c, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}
template <typename gpumem_unused_ = void>
__global__ void gpumem__gpuctl_init_kernel(void *mem, size_t bytes, gpumem_swctl_gpu_desc d) {
    /* The status goes where the controller struct starts (the caller checked
     * that mem holds one), read back with a copy: no allocation. */
    gpumem_status st = gpumem_swctl_gpu_init(mem, bytes, &d);
    ((gpumem_swctl_gpu *)mem)->init_status = (uint32_t)st;
}

/* Initialise a controller in GPU memory with a one-thread kernel, before
 * its loop starts, and wait for it. The kernel runs on a private
 * non-blocking stream (so that it waits for no persistent kernel, not even
 * one on the legacy stream) and is preloaded first; gpumem_swctl_gpu_start
 * preloads it too, so that this works while another controller runs under
 * lazy loading. Being on a stream of its own, it waits for nothing else
 * either: writes the caller queued to `mem` must have finished. GPUMEM_ESYS
 * if CUDA failed. */
static inline gpumem_status gpumem_swctl_gpu_init_cuda(void *mem, size_t bytes, const gpumem_swctl_gpu_desc *d) {
    const void *own[1] = {(const void *)gpumem__gpuctl_init_kernel<>};
    uint32_t st = (uint32_t)GPUMEM_ESYS;
    cudaStream_t s;
    if (!d || !mem) return GPUMEM_ENULL;
    if (bytes < sizeof(gpumem_swctl_gpu) || ((uintptr_t)mem & 63u) != 0) return GPUMEM_EINVAL;
    if (gpumem_cuda_preload(own, 1) != GPUMEM_OK) return GPUMEM_ESYS;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return GPUMEM_ESYS;
    (void)cudaGetLastError(); /* an earlier call's error is not the launch's (above) */
    gpumem__gpuctl_init_kernel<<<1, 1, 0, s>>>(mem, bytes, *d);
    if (cudaGetLastError() != cudaSuccess ||
        cudaMemcpyAsync(&st, &((gpumem_swctl_gpu *)mem)->init_status, sizeof st, cudaMemcpyDeviceToHost, s) !=
            cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
        st = (uint32_t)GPUMEM_ESYS; /* nothing is left running: the synchronise saw to it, or the launch failed */
    cudaStreamDestroy(s);
    return (gpumem_status)st;
}

/* gpumem_swctl_gpu_start's every error return after its launch: stop the
 * controller, then wait at most timeout_ms for `stream` to drain, so that
 * no block of it is left running or queued over memory the caller may free
 * next. Returns `st`, or GPUMEM_EBUSY if the launch is still queued. */
static inline gpumem_status gpumem__gpuctl_abandon(const gpumem_swctl_gpu_desc *d, cudaStream_t stream,
                                                   uint32_t timeout_ms, gpumem_status st) {
    const uint64_t end = gpumem_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
    gpumem_swctl_gpu_stop(d);
    /* Until it has drained, or failed: either way nothing of it runs after. */
    while (cudaStreamQuery(stream) == cudaErrorNotReady)
        if (gpumem_clock_ns() > end) {
#if !GPUMEM_ON_DEVICE
            GPUMEM_LOG("GPU controller: it did not start (%s) and is stopped, but its launch is still queued on "
                       "its stream %u ms later: keep its memory until cudaStreamSynchronize on that stream returns",
                       gpumem_status_str(st), timeout_ms);
#endif
            return GPUMEM_EBUSY;
        }
    return st;
}

/* Start the persistent controller, `threads` threads, on `stream` and wait,
 * at most timeout_ms, until every thread runs. The stream must be a
 * cudaStreamNonBlocking one: a persistent kernel on the legacy default
 * stream (stream 0), on a stream from plain cudaStreamCreate or on
 * cudaStreamPerThread serialises with the legacy stream, and from then on
 * every cudaMemcpy, every kernel on a blocking stream and this library's
 * own init wait forever. Any other stream is refused (cudaStreamGetFlags):
 * GPUMEM_EINVAL and a message. client_kernels (n of them) are the kernels
 * that will use its pairs: they are preloaded first (see above). Under lazy
 * loading, or where the driver cannot say, with n == 0: GPUMEM_ESTATE, and
 * a message naming the remedies.
 *
 * A warp serves a pair, so 128 pairs want 4,096 threads: more than one block
 * of the controller kernel holds (cudaFuncGetAttributes: its registers per
 * thread cap a block below 1024). Up to that cap the controller is one block
 * of `threads`; above it, `threads` must be whole warps, and it becomes the
 * fewest blocks of equal size (whole warps each, so the total may round up)
 * that hold it. Every block must be resident at once - they spin until
 * stopped - so a grid larger than the device holds with this kernel's
 * registers (occupancy times SMs) is refused: GPUMEM_EINVAL and a message
 * with the limits, as for a partial last warp above the cap. The running
 * count the wait looks for is the launched total.
 *
 * Nothing is left running or queued when start fails: the memory may be
 * freed at once, with one exception below. Before the launch it has
 * launched nothing. After it, every error return first sets the stop word,
 * and then waits on `stream` (another timeout_ms at most) until the launch
 * has drained: blocks that start late (the device was busy with other
 * kernels) end at their first look at the stop word instead of serving
 * pairs nobody expects them to. So GPUMEM_ETIMEDOUT (the threads did not all
 * run in time) and GPUMEM_ESYS (CUDA failed) mean the launch is over. If
 * the stream has not drained by then (the device still busy with kernels
 * that keep the controller's blocks from starting), start returns
 * GPUMEM_EBUSY with a message: the launch is still queued, stopped, and
 * may yet run, so its memory must stay allocated until
 * cudaStreamSynchronize(stream) returns. */
static inline gpumem_status gpumem_swctl_gpu_start(gpumem_swctl_gpu *c, const gpumem_swctl_gpu_desc *d,
                                                   uint32_t threads, cudaStream_t stream,
                                                   const void *const *client_kernels, uint32_t n,
                                                   uint32_t timeout_ms) {
    const void *own[2] = {(const void *)gpumem_swctl_gpu_kernel<>, (const void *)gpumem__gpuctl_init_kernel<>};
    cudaFuncAttributes attr;
    uint64_t blocks = 1, per_block = threads, launched; /* 64-bit: threads may be near 2^32 */
    uint32_t cap;
    int device = 0, sms = 0, resident = 0;
    uint64_t end;
    gpumem_status st;
    unsigned stream_flags = 0;
    if (!c || !d || !d->control) return GPUMEM_ENULL;
    if (stream == 0 || stream == cudaStreamLegacy || cudaStreamGetFlags(stream, &stream_flags) != cudaSuccess ||
        !(stream_flags & cudaStreamNonBlocking)) {
        (void)cudaGetLastError(); /* a handle CUDA did not know: its error is answered here */
#if !GPUMEM_ON_DEVICE
        GPUMEM_LOG("GPU controller: its stream must be non-blocking (cudaStreamCreateWithFlags(&s, "
                   "cudaStreamNonBlocking)): on the legacy default stream, a plain cudaStreamCreate stream or "
                   "cudaStreamPerThread the persistent kernel would make every cudaMemcpy and every kernel on a "
                   "blocking stream wait forever");
#endif
        return GPUMEM_EINVAL;
    }
    if (cudaFuncGetAttributes(&attr, own[0]) != cudaSuccess) return GPUMEM_ESYS;
    cap = (uint32_t)attr.maxThreadsPerBlock / GPUMEM_WARP_WIDTH * GPUMEM_WARP_WIDTH; /* whole warps */
    if (threads == 0 || cap == 0) return GPUMEM_EINVAL;
    /* A controller runs once per init: init zeroes the stop word and the
     * running count, and a second start would find the old count and
     * report blocks as running that end at once on the old stop. */
    if (gpumem_atomic_load_u32(&d->control[0], GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) != 0 ||
        gpumem_atomic_load_u32(&d->control[1], GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) != 0) {
#if !GPUMEM_ON_DEVICE
        GPUMEM_LOG("GPU controller: already started, or stopped (its control words are not zero); initialise it "
                   "again (gpumem_swctl_gpu_init_cuda) before starting it again");
#endif
        return GPUMEM_ESTATE;
    }
    if (threads > (uint32_t)attr.maxThreadsPerBlock) {
        if (threads % GPUMEM_WARP_WIDTH != 0) {
#if !GPUMEM_ON_DEVICE
            GPUMEM_LOG("GPU controller: %u threads: above one block (at most %d threads with %d registers per "
                       "thread) the controller takes whole warps",
                       threads, attr.maxThreadsPerBlock, attr.numRegs);
#endif
            return GPUMEM_EINVAL;
        }
        blocks = ((uint64_t)threads + cap - 1) / cap;
        per_block = ((uint64_t)threads / GPUMEM_WARP_WIDTH + blocks - 1) / blocks * GPUMEM_WARP_WIDTH;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, own[0], (int)per_block, 0) != cudaSuccess)
            return GPUMEM_ESYS;
        if ((uint64_t)resident * (uint64_t)sms < blocks) {
#if !GPUMEM_ON_DEVICE
            GPUMEM_LOG("GPU controller: %u threads cannot run at once: they take %u blocks of %u, and this device "
                       "holds %d such blocks at once (%d SMs, %d registers per thread)",
                       threads, (unsigned)blocks, (unsigned)per_block, resident * sms, sms, attr.numRegs);
#endif
            return GPUMEM_EINVAL;
        }
    }
    launched = blocks * per_block;
    /* "Cannot say" (-1) counts as lazy: taken for eager, it would start
     * the controller with no client kernel loaded, 0.3.0's hang. */
    if (n == 0 && gpumem_cuda_lazy_loading() != 0) {
#if !GPUMEM_ON_DEVICE /* host code, parsed by both passes; the log exists on the host */
        GPUMEM_LOG("GPU controller: CUDA loads modules lazily (CUDA_MODULE_LOADING=LAZY, the default since CUDA "
                   "12.2), or the driver cannot say whether it does, and a kernel first launched while the "
                   "controller runs would never start. Pass your client kernels to gpumem_swctl_gpu_start (or "
                   "preload them with gpumem_cuda_preload), or set CUDA_MODULE_LOADING=EAGER before the first "
                   "CUDA call");
#endif
        return GPUMEM_ESTATE;
    }
    if ((st = gpumem_cuda_preload(own, 2)) != GPUMEM_OK || (st = gpumem_cuda_preload(client_kernels, n)) != GPUMEM_OK)
        return st;
    (void)cudaGetLastError(); /* an earlier call's error is not the launch's (above) */
    gpumem_swctl_gpu_kernel<<<(unsigned)blocks, (unsigned)per_block, 0, stream>>>(c);
    st = cudaGetLastError() == cudaSuccess ? GPUMEM_OK : GPUMEM_ESYS;
    end = gpumem_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (st == GPUMEM_OK &&
           gpumem_atomic_load_u32(&d->control[1], GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) < launched)
        if (gpumem_clock_ns() > end) st = GPUMEM_ETIMEDOUT;
    if (st != GPUMEM_OK) return gpumem__gpuctl_abandon(d, stream, timeout_ms, st);
    return GPUMEM_OK;
}

/* The sum of every pair's counts of a controller in GPU memory, copied to
 * the host (exact once the controller has stopped; a snapshot while it
 * runs). No kernel and no device allocation. */
static inline gpumem_status gpumem_swctl_gpu_get_stats_cuda(const gpumem_swctl_gpu *c, gpumem_target_stats *out) {
    gpumem_swctl_gpu h;
    gpumem_target_stats *all;
    gpumem_status st;
    uint32_t i;
    if (!c || !out) return GPUMEM_ENULL;
    memset(out, 0, sizeof *out);
    if (gpumem__cuda_peek(&h, c, sizeof h) != GPUMEM_OK) return GPUMEM_ESYS;
    /* One copy of the whole array (a watchdog polls this while it runs). */
    if (!(all = (gpumem_target_stats *)malloc((size_t)h.n_pairs * sizeof *all))) return GPUMEM_ENOMEM;
    st = gpumem__cuda_peek(all, h.stats, (size_t)h.n_pairs * sizeof *all);
    for (i = 0; st == GPUMEM_OK && i < h.n_pairs; i++) gpumem_target_stats_add(out, &all[i]);
    free(all);
    return st;
}

#if !GPUMEM_ON_DEVICE
/* Every pair of a GPU-resident controller, client and controller side. */
static inline size_t gpumem_swctl_gpu_report_cuda(const gpumem_swctl_gpu *c, char *buf, size_t n, size_t at) {
    gpumem_swctl_gpu h;
    uint32_t i;
    void *cid_state = malloc(65536);
    if (gpumem__cuda_peek(&h, c, sizeof h) != GPUMEM_OK || !cid_state) {
        free(cid_state);
        return gpumem__appendf(buf, n, at, "GPU controller at %p: cannot be read\n", (const void *)c);
    }
    for (i = 0; i < h.n_pairs; i++) {
        gpumem_target_queue q;
        gpumem_target_stats st;
        at = gpumem_nvme_qp_report_cuda(h.pairs + i, buf, n, at);
        if (gpumem__cuda_peek(&q, h.queues + i, sizeof q) != GPUMEM_OK ||
            gpumem__cuda_peek(&st, h.stats + i, sizeof st) != GPUMEM_OK ||
            gpumem__cuda_peek(cid_state, q.cid_state, 65536) != GPUMEM_OK) {
            at = gpumem__appendf(buf, n, at, "  controller side of pair %u: cannot be read\n", i + 1);
            continue;
        }
        q.cid_state = (uint8_t *)cid_state;
        at = gpumem_target_queue_report(&q, &st, buf, n, at);
    }
    free(cid_state);
    return at;
}
#endif /* !GPUMEM_ON_DEVICE */
#endif /* __CUDACC__ */


/* ======================================================================== */
/* Host shim: the software NVMe controller                                  */
/* ======================================================================== */
/*
 * A host thread that is an NVMe controller on the queue memory above: it
 * touches only each pair's ring memory (rings, doorbells, signals block,
 * PRP-list pages), never its client state, so the pairs' users may keep that
 * where the controller cannot reach (GPU memory; another process,
 * tests/test_xproc.c). It watches the doorbells, polling them for a while
 * when idle (clients that cannot wake it, GPU threads, are heard that way)
 * before it parks, fetches commands in order, serves Read/Write/Flush
 * from RAM or from a file, and posts completions with phase tag, SQ head, SQ
 * ID, command ID and status, never into a full CQ. Each command is completed
 * no earlier than latency_ns after it was fetched and no sooner than 1/iops
 * after the previous one (so throughput = in-flight / latency, up to iops).
 * It can complete out of order and inject errors. It counts every protocol
 * violation it sees; a correct host leaves all counts at zero.
 *
 * Needs POSIX: define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before the
 * first #include in the file that defines GPUMEM_IMPLEMENTATION, and link
 * with -pthread.
 */
/* Declared in both CUDA passes (host code in a .cu file is parsed by both);
 * implemented in the host pass only. */
#if !defined(GPUMEM_NO_HOST_SHIM)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumem_swctl gpumem_swctl;

/* Zero means default in every field (docs/headers.md), so a zeroed config
 * is a 32 MiB RAM namespace; gpumem_swctl_config_resolved shows the values
 * a config stands for. */
typedef struct gpumem_swctl_config {
    uint32_t lba_bytes;    /* 512 (default) or 4096 (any power of two 512..65536) */
    uint64_t n_blocks;     /* namespace capacity; default 65536 */
    void *ram;             /* backing store of n_blocks*lba_bytes, or NULL: */
    int fd;                /*   ... a file (pread/pwrite), or 0 (or -1) with ram NULL: the controller
                              allocates RAM. So descriptor 0 is never a namespace: dup(2) a file
                              that was opened on it. */
    uint32_t max_blocks;   /* most blocks per command (MDTS); default 256 */
    uint64_t latency_ns;   /* service time per command; 0 = instant */
    uint64_t iops;         /* completion rate cap; 0 = none */
    uint32_t reorder;      /* 0 = in order; N>1 = pick randomly among the N oldest due */
    uint32_t error_ppm;    /* injected error rate, parts per million; an injected command is not carried out */
    uint16_t error_status; /* status field to inject, GPUMEM_NVME_STATUS(sct, sc); one that reads as
                              success (SCT 0, SC 0, e.g. the default 0) injects Internal Error (0/0x06):
                              success is never reported for work not done */
    uint32_t max_pending;  /* fetched but not completed commands held; default 4096 */
    uint64_t seed;         /* for reordering and injection; 0: a fixed default */
    uint64_t drop_command; /* test hook: the Nth command fetched (1 = the first) is never
                              completed, as a faulty device would; 0 = none. Counted in
                              stats.dropped; what a watchdog is for. */
    /* When idle, how the controller hears doorbells. Host threads that ring
     * one also wake the controller (gpumem_event_notify on its doorbell
     * event); GPU threads cannot (a device thread's notify is a no-op), so
     * for them the controller must look at the doorbell words itself. After
     * its last piece of work it polls every pair's doorbells for
     * idle_spin_ns (busy: a core), then parks, at most park_ns at a time,
     * polling once between parks. A doorbell that nobody notifies is thus
     * seen within a poll while the controller spins, and within park_ns
     * once it parks. GPUMEM_SWCTL_NEVER_PARK: poll forever (a core, always;
     * the lowest latency for GPU clients); so does a controller with a pair
     * set polled (gpumem_swctl_set_polled). Defaults (0): 50 us, 1 ms;
     * GPUMEM_SWCTL_NO_SPIN parks at once. CPU time of each setting:
     * bench/results/issue12-doorbell-vm.md. */
    uint64_t idle_spin_ns;
    uint64_t park_ns;      /* 1 us .. 1 s; 0: the default */
    /* Where memory comes from, by who touches it (gpumem_target_mem in
     * gpumem_target.h, whose pair set holds the pairs). Ring memory, which
     * the controller thread and the pairs' users share: each pair's rings,
     * doorbells and signals block, its PRP-list pages, the controller's
     * doorbell event, and the namespace RAM when the controller allocates
     * it: mem.alloc / mem.free (NULL: GPUMEM_MALLOC / GPUMEM_FREE). Client
     * memory, which only the pairs' users touch: each pair's struct and
     * state: mem.client_alloc / mem.client_free (NULL: mem.alloc / mem.free
     * as well); the controller thread never reads or writes it (the pair is
     * built there by gpumem_swctl_add_qp on the calling thread, and read
     * there only by gpumem_swctl_destroy's idle check and by
     * gpumem_swctl_report; mem.client_copy for memory host code cannot
     * touch, cudaMalloc: the pair is then built in host memory and copied
     * in, and those two read a copy). For GPU threads against this
     * host-thread controller: ring memory mapped pinned (cudaHostAlloc with
     * cudaHostAllocMapped, whose host pointers are valid on the GPU with
     * unified addressing), client memory in GPU memory, so that no client
     * atomic crosses PCIe: gpumem_swctl_config_gpu_clients sets all of it
     * (docs/gpu.md). */
    gpumem_target_mem mem;
} gpumem_swctl_config;

/* idle_spin_ns: never park. */
#define GPUMEM_SWCTL_NEVER_PARK GPUMEM_TARGET_NEVER_PARK
/* idle_spin_ns: park at once. */
#define GPUMEM_SWCTL_NO_SPIN GPUMEM_TARGET_NO_SPIN
#define GPUMEM_SWCTL_DEFAULT_SPIN_NS GPUMEM_TARGET_DEFAULT_SPIN_NS
#define GPUMEM_SWCTL_DEFAULT_PARK_NS GPUMEM_TARGET_DEFAULT_PARK_NS

/* The counts of gpumem_target_stats (the controller core), for the whole controller. */
typedef gpumem_target_stats gpumem_swctl_stats;

/* A zeroed config resolved: the same as gpumem_swctl_config_resolved of {0}. */
gpumem_swctl_config gpumem_swctl_config_default(void);
/* The config with its defaults filled in: what gpumem_swctl_create uses
 * (a NULL in: the zeroed config). Values out of range stay, for create to refuse. */
gpumem_swctl_config gpumem_swctl_config_resolved(const gpumem_swctl_config *in);
gpumem_status gpumem_swctl_create(const gpumem_swctl_config *cfg, gpumem_swctl **out);
/* Add a queue pair (only while stopped); the pair's memory belongs to the
 * controller, PRP-list pages for each command ID included (see
 * gpumem_nvme_qp_submit_buf). gpumem_swctl_add_qp gives it
 * max(depth, GPUMEM_SWCTL_DEFAULT_CIDS) command IDs. */
#define GPUMEM_SWCTL_DEFAULT_CIDS GPUMEM_TARGET_DEFAULT_CIDS
gpumem_status gpumem_swctl_add_qp_ex(gpumem_swctl *ctl, uint32_t depth, uint32_t n_cids, uint32_t virtual_start,
                                     gpumem_nvme_qp **out);
gpumem_status gpumem_swctl_add_qp(gpumem_swctl *ctl, uint32_t depth, gpumem_nvme_qp **out);
/* Mark a pair of this controller polled (polled != 0): its clients cannot
 * wake the controller (GPU threads), so while any pair is polled the
 * controller never parks, whatever idle_spin_ns says. Any time, any
 * thread. GPUMEM_EINVAL if qp is not one of its pairs. */
gpumem_status gpumem_swctl_set_polled(gpumem_swctl *ctl, const gpumem_nvme_qp *qp, int polled);
/* Start serving; the pairs' calls work again after a stop. */
gpumem_status gpumem_swctl_start(gpumem_swctl *ctl);
/* Stop serving. Every thread waiting in one of its pairs (for a command ID
 * or a completion) returns GPUMEM_ENODEV, as do new calls, until the next
 * start; commands fetched but not completed stay with the controller and
 * complete after a restart. */
gpumem_status gpumem_swctl_stop(gpumem_swctl *ctl);
/* The counts so far (exact once stopped); safe while the controller runs:
 * each count is read with an atomic load of what the controller published. */
gpumem_status gpumem_swctl_get_stats(gpumem_swctl *ctl, gpumem_swctl_stats *out);
/* Completions posted so far: safe to read from any thread at any time (a
 * watchdog's measure of progress). */
uint64_t gpumem_swctl_progress(gpumem_swctl *ctl);
/* CPU time (ns) the controller thread has used since its last start; after
 * a stop, what it used until then. What each idle setting costs. Call it
 * from the thread that starts and stops the controller. */
uint64_t gpumem_swctl_cpu_ns(gpumem_swctl *ctl);
/* Every pair in words, client side and controller side (gpumem_nvme_qp_report,
 * gpumem_target_queue_report), appended to buf; returns the whole text's length.
 * Call it with the controller stopped: it reads the controller thread's state. */
size_t gpumem_swctl_report(gpumem_swctl *ctl, char *buf, size_t n);
/* The namespace's bytes when backed by RAM (NULL for a file, or ctl NULL). */
void *gpumem_swctl_ram(gpumem_swctl *ctl);
/* The namespace (all zero, so n_blocks 0, for ctl NULL). */
gpumem_nvme_ns gpumem_swctl_ns(const gpumem_swctl *ctl);
/* Stop (if running) and free everything, pairs included. Refuses with
 * GPUMEM_EBUSY, changing nothing, while a thread waits in one of its pairs
 * or a request still holds a command ID (submitted and not yet polled to
 * its end; after a stop, polling returns GPUMEM_ENODEV and ends it), and
 * with GPUMEM_ESYS if client_copy cannot read a pair to tell. It does not
 * drain: finish or abandon the requests, join the threads, then destroy
 * (README: shutdown order). */
gpumem_status gpumem_swctl_destroy(gpumem_swctl *ctl);
/* Reset pair qp (issue 19), in two steps around its users, as NVMe does
 * with Delete and Create I/O Queue (gpumem_nvme.h, "Reset"):
 * reset_begin deletes the pair's SQ, then its CQ: commands fetched and not
 * completed are dropped (never carried out: no data moves for the pair's
 * commands once it returns), nothing more is fetched or posted; then every
 * wait on the pair and every poll of a request without its result ends
 * with GPUMEM_EABORTED (gpumem_nvme_qp_abort); safe under load. Once no
 * thread is inside a call on the pair, reset_end reinitialises it
 * (gpumem_nvme_qp_reinit: requests still submitted end "aborted", results
 * that came before are kept) and recreates the queues; the pair is served
 * again (or stopped, if the controller is). reset_end returns GPUMEM_EBUSY,
 * changing nothing, while a thread is still inside a call on the pair
 * (aborted, it leaves soon): call it again. From reset_begin on, a call
 * that enters the pair gets GPUMEM_EABORTED (gpumem_nvme.h, "Gate").
 * Other pairs are served throughout (paused for a moment).
 * Not for pairs whose client memory the host cannot write (cfg.mem.client_copy
 * set, as gpumem_swctl_config_gpu_clients does): GPUMEM_ESTATE. */
gpumem_status gpumem_swctl_reset_begin(gpumem_swctl *ctl, gpumem_nvme_qp *qp);
gpumem_status gpumem_swctl_reset_end(gpumem_swctl *ctl, gpumem_nvme_qp *qp);
/* A watchdog on one software controller: progress is its completions, stop
 * is gpumem_swctl_stop, the report is gpumem_swctl_report. */
gpumem_watchdog_config gpumem_swctl_watchdog_config(gpumem_swctl *ctl, const char *what, uint32_t stall_ms);

#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__)
/* GPU threads as the pairs' clients (CUDA host code; see docs/gpu.md):
 * gpumem_swctl_config_gpu_clients(&cfg) before gpumem_swctl_create puts
 * - ring memory (rings, doorbells, signals block, PRP-list pages, the
 *   doorbell event, namespace RAM) in pinned host memory mapped for the GPU
 *   (cudaHostAlloc, cudaHostAllocMapped): the controller thread reaches it,
 *   the GPU reaches it across PCIe, at system scope;
 * - client memory (each pair's struct and state: tickets, turns, markers,
 *   locks, command IDs, the budget) in GPU memory (cudaMalloc), built and read
 *   on the host through copies on a stream of their own (gpumem__cuda_peek,
 *   which waits for no kernel): no client atomic crosses PCIe;
 * - a controller that never parks: GPU threads cannot wake it (their notify
 *   is a no-op), so it polls the doorbells (a host core, always). For a
 *   controller that may park, set idle_spin_ns back and mark each GPU-driven
 *   pair with gpumem_swctl_set_polled while its kernels run.
 * The gpumem_nvme_qp pointers gpumem_swctl_add_qp returns are then device
 * pointers: pass them to kernels, never dereference them on the host.
 * Add pairs, and destroy the controller, while none of your kernels runs:
 * both allocate or free with cudaMalloc/cudaHostAlloc/cudaFree, which wait
 * for the device, and a persistent kernel (a GPU-resident controller, a
 * spinning client) would make them wait for ever. */
static inline void *gpumem__cuda_mapped_alloc(void *ctx, size_t n) {
    void *p = NULL;
    (void)ctx;
    return cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess ? p : NULL;
}
static inline void gpumem__cuda_mapped_free(void *ctx, void *p) {
    (void)ctx;
    cudaFreeHost(p);
}
static inline void *gpumem__cuda_device_alloc(void *ctx, size_t n) {
    void *p = NULL;
    (void)ctx;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}
static inline void gpumem__cuda_device_free(void *ctx, void *p) {
    (void)ctx;
    cudaFree(p);
}
static inline int gpumem__cuda_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    return gpumem__cuda_peek(dst, src, n) == GPUMEM_OK ? 0 : -1;
}
static inline void gpumem_swctl_config_gpu_clients(gpumem_swctl_config *cfg) {
    if (!cfg) return;
    cfg->mem.alloc = gpumem__cuda_mapped_alloc;
    cfg->mem.free = gpumem__cuda_mapped_free;
    cfg->mem.alloc_ctx = NULL;
    cfg->mem.client_alloc = gpumem__cuda_device_alloc;
    cfg->mem.client_free = gpumem__cuda_device_free;
    cfg->mem.client_copy = gpumem__cuda_copy;
    cfg->mem.client_ctx = NULL;
    cfg->idle_spin_ns = GPUMEM_SWCTL_NEVER_PARK;
}
#endif /* __CUDACC__ */

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE

#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(__cplusplus)
#error "gpumem host shim: define _POSIX_C_SOURCE 200809L before the first #include (see gpumem_swctl.h)"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct gpumem__sw_pending {
    gpumem_nvme_cmd cmd;
    uint64_t due_ns;
} gpumem__sw_pending;

/* The controller thread's own state of pair i, beside the pair set's (the
 * same index): the commands it has fetched and not yet completed. */
typedef struct gpumem__sw_queue {
    gpumem__sw_pending *pend; /* ring of fetched commands, in fetch order */
    uint32_t pend_head, pend_count;
} gpumem__sw_queue;

struct gpumem_swctl {
    gpumem_swctl_config cfg;
    gpumem_nvme_ns ns;
    unsigned char *ram;
    int own_ram;
    /* The pairs, their memory and their doorbell event (gpumem_target.h):
     * the thread touches only each pair's ring memory, never its client
     * state. */
    gpumem_target_pairs *pairs;
    gpumem__sw_queue *queues; /* one per pair, the same index */
    pthread_t thread;
    uint32_t running;       /* atomic: the thread serves while nonzero */
    int thread_alive;
    uint64_t cpu_ns_final;  /* the thread's CPU time, stored as it ends (atomic) */
    uint64_t last_due_ns;
    uint64_t rng;
    uint64_t fetched;       /* commands fetched (the drop_command hook counts them) */
    uint64_t progress;      /* completions posted: written atomically, read by watchdogs */
    gpumem_swctl_stats st;  /* written by the controller thread only while running */
    gpumem_swctl_stats pub; /* st as last published: atomic stores by the controller, atomic loads by readers */
};

static uint64_t gpumem__rng_next(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

gpumem_swctl_config gpumem_swctl_config_resolved(const gpumem_swctl_config *in) {
    gpumem_swctl_config c;
    if (in) c = *in;
    else memset(&c, 0, sizeof c);
    if (!c.lba_bytes) c.lba_bytes = 512;
    if (!c.n_blocks) c.n_blocks = 1u << 16;
    if (c.fd <= 0) c.fd = -1; /* no file */
    if (!c.max_blocks) c.max_blocks = 256;
    if (!c.max_pending) c.max_pending = 4096;
    if (!c.seed) c.seed = 0x9E3779B97F4A7C15ull;
    c.idle_spin_ns = gpumem_target_spin_resolved(c.idle_spin_ns);
    if (!c.park_ns) c.park_ns = GPUMEM_SWCTL_DEFAULT_PARK_NS;
    return c;
}

gpumem_swctl_config gpumem_swctl_config_default(void) { return gpumem_swctl_config_resolved(NULL); }

gpumem_status gpumem_swctl_create(const gpumem_swctl_config *in, gpumem_swctl **out) {
    gpumem_swctl *c;
    gpumem_status st;
    gpumem_swctl_config resolved;
    const gpumem_swctl_config *cfg = &resolved;
    if (!in || !out) return GPUMEM_ENULL;
    *out = NULL;
    resolved = gpumem_swctl_config_resolved(in);
    if (cfg->lba_bytes < 512 || cfg->lba_bytes > 65536 || !gpumem_is_pow2_u64(cfg->lba_bytes)) {
        GPUMEM_LOG("software controller: LBA size %u is not a power of two in 512..65536", cfg->lba_bytes);
        return GPUMEM_EINVAL;
    }
    if (cfg->n_blocks == 0 || cfg->max_blocks == 0 || cfg->max_blocks > 65536 || cfg->max_pending == 0 ||
        cfg->error_ppm > 1000000 || (cfg->reorder == 1)) {
        GPUMEM_LOG("software controller: n_blocks, max_blocks (1..65536), max_pending, error_ppm (<=1e6) "
                   "or reorder (0 or >1) out of range");
        return GPUMEM_EINVAL;
    }
    if (cfg->n_blocks > (UINT64_MAX / cfg->lba_bytes)) return GPUMEM_EINVAL;
    if (cfg->park_ns < 1000 || cfg->park_ns > 1000000000ull) {
        GPUMEM_LOG("software controller: park_ns %llu out of range (1 us .. 1 s)", (unsigned long long)cfg->park_ns);
        return GPUMEM_EINVAL;
    }
    c = (gpumem_swctl *)GPUMEM_MALLOC(sizeof *c);
    if (!c) return GPUMEM_ENOMEM;
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->ns.nsid = 1;
    c->ns.lba_shift = gpumem_log2_u64(cfg->lba_bytes);
    c->ns.n_blocks = cfg->n_blocks;
    c->ns.max_blocks = cfg->max_blocks;
    c->rng = cfg->seed;
    /* The allocators are checked there (both of a pair, or neither). */
    if ((st = gpumem_target_pairs_create(&c->ns, &cfg->mem, &c->pairs)) != GPUMEM_OK) {
        GPUMEM_FREE(c);
        return st;
    }
    if (cfg->ram) {
        c->ram = (unsigned char *)cfg->ram;
    } else if (cfg->fd < 0) {
        size_t bytes = (size_t)(cfg->n_blocks * cfg->lba_bytes);
        c->ram = (unsigned char *)gpumem_target_mem_alloc(&cfg->mem, bytes); /* ring memory: both sides reach it */
        if (!c->ram) {
            GPUMEM_LOG("software controller: cannot allocate %zu bytes of backing RAM", bytes);
            gpumem_target_pairs_destroy(c->pairs);
            GPUMEM_FREE(c);
            return GPUMEM_ENOMEM;
        }
        memset(c->ram, 0, bytes);
        c->own_ram = 1;
    }
    *out = c;
    return GPUMEM_OK;
}

void *gpumem_swctl_ram(gpumem_swctl *ctl) { return ctl ? ctl->ram : NULL; }
gpumem_nvme_ns gpumem_swctl_ns(const gpumem_swctl *ctl) {
    gpumem_nvme_ns none;
    if (ctl) return ctl->ns;
    memset(&none, 0, sizeof none);
    return none;
}

gpumem_status gpumem_swctl_add_qp_ex(gpumem_swctl *ctl, uint32_t depth, uint32_t n_cids, uint32_t virtual_start,
                                     gpumem_nvme_qp **out) {
    gpumem__sw_queue *grown;
    gpumem__sw_pending *pend;
    uint32_t n;
    gpumem_status st;
    if (!ctl || !out) return GPUMEM_ENULL;
    *out = NULL;
    /* The thread reads the pair set without a lock: only while stopped. */
    if (gpumem_atomic_load_u32(&ctl->running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)) return GPUMEM_ESTATE;
    n = gpumem_target_pairs_count(ctl->pairs);
    pend = (gpumem__sw_pending *)GPUMEM_MALLOC((size_t)ctl->cfg.max_pending * sizeof(gpumem__sw_pending));
    grown = (gpumem__sw_queue *)GPUMEM_MALLOC((n + 1) * sizeof *grown);
    if (!pend || !grown) {
        GPUMEM_FREE(pend);
        GPUMEM_FREE(grown);
        return GPUMEM_ENOMEM;
    }
    /* The pair's memory, checks and layout are the pair set's; its command
     * timeout the default (0). */
    if ((st = gpumem_target_pairs_add(ctl->pairs, depth, n_cids, virtual_start, 0, out)) != GPUMEM_OK) {
        GPUMEM_FREE(pend);
        GPUMEM_FREE(grown);
        return st;
    }
    if (n) memcpy(grown, ctl->queues, n * sizeof *grown);
    GPUMEM_FREE(ctl->queues);
    ctl->queues = grown;
    memset(&grown[n], 0, sizeof grown[n]);
    grown[n].pend = pend;
    return GPUMEM_OK;
}

gpumem_status gpumem_swctl_add_qp(gpumem_swctl *ctl, uint32_t depth, gpumem_nvme_qp **out) {
    return gpumem_swctl_add_qp_ex(ctl, depth, depth > GPUMEM_SWCTL_DEFAULT_CIDS ? depth : GPUMEM_SWCTL_DEFAULT_CIDS,
                                  0, out);
}

/* Execute one command; returns the status field to post. A namespace in
 * RAM is the core's gpumem_target_execute_ram; a file is read and written
 * here, segment by segment along the same PRP walk. */
static uint16_t gpumem__sw_execute(gpumem_swctl *c, const gpumem_nvme_cmd *cmd) {
    uint64_t off, len, addr, seg;
    gpumem_target_prp_walk w;
    int to_host = (cmd->cdw0 & 0xFFu) == GPUMEM_NVME_OP_READ, r;
    uint16_t status;
    if (c->ram) return gpumem_target_execute_ram(&c->st, &c->ns, c->ram, cmd);
    if ((status = gpumem_target_check(&c->st, &c->ns, cmd, &off, &len)) != 0) return status;
    if (len == 0) return fsync(c->cfg.fd) == 0 ? 0 : GPUMEM_NVME_STATUS(2, 0x80); /* Flush */
    if (gpumem_target_prp_walk_start(&w, cmd, len) != 0) goto bad_prp;
    while ((r = gpumem_target_prp_walk_next(&w, &addr, &seg)) == 1) {
        off_t at = (off_t)(off + w.done - seg);
        ssize_t got = to_host ? pread(c->cfg.fd, (void *)(uintptr_t)addr, (size_t)seg, at)
                              : pwrite(c->cfg.fd, (const void *)(uintptr_t)addr, (size_t)seg, at);
        if (got != (ssize_t)seg) {
            if (to_host && got >= 0) memset((char *)(uintptr_t)addr + got, 0, (size_t)(seg - (uint64_t)got));
            else return to_host ? GPUMEM_NVME_STATUS(2, 0x81) : GPUMEM_NVME_STATUS(2, 0x80);
        }
    }
    if (r == 0) return 0;
bad_prp:
    c->st.bad_prp++;
    return GPUMEM_NVME_STATUS(0, 0x13);
}

/* Take doorbell values, fetch commands, post due completions of pair i.
 * Returns the number of things done (0 = idle). */
static uint32_t gpumem__sw_service(gpumem_swctl *c, uint32_t i, uint64_t now) {
    gpumem__sw_queue *q = &c->queues[i];
    gpumem_target_queue *sw = gpumem_target_pairs_queue(c->pairs, i);
    uint32_t work = 0, posted_before;

    work += gpumem_target_take_cq_doorbell(sw, &c->st);
    work += gpumem_target_take_sq_doorbell(sw, &c->st);
    /* Fetch in order while there is room to hold them. */
    while (q->pend_count < c->cfg.max_pending) {
        gpumem__sw_pending *p = &q->pend[(q->pend_head + q->pend_count) % c->cfg.max_pending];
        uint64_t due = now + c->cfg.latency_ns;
        if (!gpumem_target_fetch(sw, &c->st, &p->cmd)) break;
        work++;
        if (++c->fetched == c->cfg.drop_command) { /* test hook: never completed */
            c->st.dropped++;
            continue;
        }
        if (c->cfg.iops) {
            uint64_t gap = 1000000000ull / c->cfg.iops;
            if (due < c->last_due_ns + gap) due = c->last_due_ns + gap;
        }
        c->last_due_ns = due;
        p->due_ns = due;
        q->pend_count++;
    }
    /* Post completions that are due while the CQ has room (it holds depth-1). */
    posted_before = sw->cq_posted;
    while (q->pend_count && sw->cq_posted < sw->depth - 1) {
        uint32_t pick = 0;
        gpumem__sw_pending e;
        uint16_t status = 0;
        if (q->pend[q->pend_head].due_ns > now) break;
        if (c->cfg.reorder > 1) {
            uint32_t window = q->pend_count < c->cfg.reorder ? q->pend_count : c->cfg.reorder;
            pick = (uint32_t)(gpumem__rng_next(&c->rng) % window);
            if (q->pend[(q->pend_head + pick) % c->cfg.max_pending].due_ns > now) pick = 0;
            if (pick) c->st.reordered++;
        }
        {   /* take entry `pick`, moving the oldest into its place */
            uint32_t at = (q->pend_head + pick) % c->cfg.max_pending;
            e = q->pend[at];
            q->pend[at] = q->pend[q->pend_head];
            q->pend_head = (q->pend_head + 1) % c->cfg.max_pending;
            q->pend_count--;
        }
        if (e.cmd.cdw0 & GPUMEM_TARGET_CID_CONFLICT) {
            /* completes with "command ID conflict" (gpumem_target_post) */
        } else if (c->cfg.error_ppm && gpumem__rng_next(&c->rng) % 1000000u < c->cfg.error_ppm) {
            /* injected: the command is not executed, so the status must say
             * failure; a configured status that reads as success does not */
            status = (c->cfg.error_status & 0x7FFu) ? c->cfg.error_status : GPUMEM_NVME_STATUS(0, 0x06);
            c->st.errors_injected++;
        } else if ((status = gpumem__sw_execute(c, &e.cmd)) != 0) {
            c->st.errors_other++;
        }
        gpumem_target_post(sw, &c->st, &e.cmd, status);
        work++;
    }
    if (posted_before != sw->cq_posted) {
        /* Relaxed: a count for watchdogs, nothing is published through it. */
        gpumem_atomic_fetch_add_u64(&c->progress, (uint64_t)(uint32_t)(sw->cq_posted - posted_before),
                                    GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
        gpumem_nvme_qp_signals_interrupt(sw->signals); /* wake one parked host waiter, which harvests */
    }
    return work;
}

/* Earliest due time among the queues' oldest pending commands (UINT64_MAX: none). */
static uint64_t gpumem__sw_next_due(gpumem_swctl *c) {
    uint64_t next = UINT64_MAX;
    uint32_t i, n = gpumem_target_pairs_count(c->pairs);
    for (i = 0; i < n; i++) {
        const gpumem__sw_queue *q = &c->queues[i];
        if (q->pend_count && q->pend[q->pend_head].due_ns < next) next = q->pend[q->pend_head].due_ns;
    }
    return next;
}

/* Publish the controller's counts for gpumem_swctl_get_stats: relaxed
 * atomic stores, one per count (each is exact; together they are a recent
 * snapshot, not one instant). The controller thread alone writes them. */
static void gpumem__sw_publish(gpumem_swctl *c) {
    const uint64_t *from = (const uint64_t *)&c->st;
    uint64_t *to = (uint64_t *)&c->pub;
    size_t k;
    for (k = 0; k < sizeof c->st / sizeof(uint64_t); k++)
        gpumem_atomic_store_u64(&to[k], from[k], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
}

/* The controller thread: serve every pair; when idle, the pair set's idle
 * step (gpumem_target.h): poll the doorbells for idle_spin_ns after the
 * last work (clients that cannot wake it, GPU threads, are heard within a
 * poll), then park on the doorbell event at most park_ns at a time, or
 * until the next command falls due, looking at the doorbells once between
 * parks. A stop notifies the event, so it does not wait out a park. */
static void *gpumem__sw_main(void *arg) {
    gpumem_swctl *c = (gpumem_swctl *)arg;
    gpumem_target_idle idle = gpumem_target_idle_start(c->cfg.idle_spin_ns, c->cfg.park_ns);
    struct timespec cpu;
    /* Acquire: pairs with the release store of start and stop; the thread
     * reads the pair set, which the owner changes only while it is stopped
     * (pthread_create and pthread_join order those changes too). */
    while (gpumem_atomic_load_u32(&c->running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)) {
        uint64_t now = gpumem_clock_ns(), wait, next;
        uint32_t i, work = 0, n = gpumem_target_pairs_count(c->pairs);
        for (i = 0; i < n; i++)
            if (!gpumem_target_pairs_deleted(c->pairs, i)) work += gpumem__sw_service(c, i, now);
        if (work) gpumem__sw_publish(c);
        if ((wait = gpumem_target_idle_step(&idle, c->pairs, work, now)) == 0) continue;
        /* Past the spin: park, no longer than until the next command is due. */
        next = gpumem__sw_next_due(c);
        now = gpumem_clock_ns();
        if (next <= now) continue;
        gpumem_target_pairs_park(c->pairs, 0, 1, next - now < wait ? next - now : wait, &c->running);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    /* Release: the final CPU time for gpumem_swctl_cpu_ns's acquire load. */
    gpumem_atomic_store_u64(&c->cpu_ns_final, (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec,
                            GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    return NULL;
}

gpumem_status gpumem_swctl_set_polled(gpumem_swctl *ctl, const gpumem_nvme_qp *qp, int polled) {
    if (!ctl) return GPUMEM_ENULL;
    return gpumem_target_pairs_set_polled(ctl->pairs, qp, polled);
}

uint64_t gpumem_swctl_cpu_ns(gpumem_swctl *ctl) {
    clockid_t id;
    struct timespec t;
    if (!ctl) return 0;
    if (ctl->thread_alive && gpumem_atomic_load_u32(&ctl->running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) &&
        pthread_getcpuclockid(ctl->thread, &id) == 0 && clock_gettime(id, &t) == 0)
        return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    return gpumem_atomic_load_u64(&ctl->cpu_ns_final, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
}

/* Start and end the controller thread, touching no pair's stopped word.
 * Release on running: the owner's changes to the pair set before it (the
 * thread reads them after its acquire load). */
static gpumem_status gpumem__sw_thread_start(gpumem_swctl *ctl) {
    int rc;
    gpumem_atomic_store_u32(&ctl->running, 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    rc = pthread_create(&ctl->thread, NULL, gpumem__sw_main, ctl);
    if (rc != 0) {
        gpumem_atomic_store_u32(&ctl->running, 0, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
        GPUMEM_LOG("software controller: pthread_create failed: %s", strerror(rc));
        return GPUMEM_ESYS;
    }
    ctl->thread_alive = 1;
    return GPUMEM_OK;
}
static void gpumem__sw_thread_stop(gpumem_swctl *ctl) {
    gpumem_atomic_store_u32(&ctl->running, 0, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    /* Out of a park at once, however long park_ns (the park looks at
     * running after registering, so a notify before that is not lost). */
    gpumem_event_notify(gpumem_target_pairs_event(ctl->pairs));
    pthread_join(ctl->thread, NULL);
    gpumem__sw_publish(ctl); /* the final counts */
    ctl->thread_alive = 0;
}

gpumem_status gpumem_swctl_start(gpumem_swctl *ctl) {
    if (!ctl) return GPUMEM_ENULL;
    if (ctl->thread_alive) return GPUMEM_ESTATE;
    if (gpumem_target_pairs_count(ctl->pairs) == 0) {
        GPUMEM_LOG("software controller: start with no queue pairs");
        return GPUMEM_ESTATE;
    }
    gpumem_target_pairs_set_stopped(ctl->pairs, 0);
    gpumem_atomic_store_u64(&ctl->cpu_ns_final, 0, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    if (gpumem__sw_thread_start(ctl) != GPUMEM_OK) {
        gpumem_target_pairs_set_stopped(ctl->pairs, 1);
        return GPUMEM_ESYS;
    }
    return GPUMEM_OK;
}

gpumem_status gpumem_swctl_reset_begin(gpumem_swctl *ctl, gpumem_nvme_qp *qp) {
    uint32_t i;
    int was_running;
    if (!ctl || !qp) return GPUMEM_ENULL;
    if ((i = gpumem_target_pairs_find(ctl->pairs, qp)) == GPUMEM_TARGET_NO_PAIR) return GPUMEM_EINVAL;
    if (ctl->cfg.mem.client_copy) {
        /* reset_end reinitialises the pair's client state from the host */
        GPUMEM_LOG("software controller: reset of a pair whose client memory the host cannot write (client_copy "
                   "set, e.g. GPU clients) is not supported");
        return GPUMEM_ESTATE;
    }
    if (gpumem_target_pairs_deleted(ctl->pairs, i)) return GPUMEM_ESTATE;
    /* The thread is paused while the queue changes: it reads the queue's
     * fields without a lock. */
    was_running = ctl->thread_alive;
    if (was_running) gpumem__sw_thread_stop(ctl);
    /* Delete I/O SQ, then I/O CQ: what was fetched and not completed is
     * dropped, never carried out; nothing more is fetched or posted. */
    ctl->queues[i].pend_count = 0;
    gpumem_target_pairs_set_deleted(ctl->pairs, i, 1);
    /* The pair is closed to new entrants, and its waits end with EABORTED
     * (its client memory is the host's: client_copy is refused above). */
    gpumem_nvme_qp_abort(qp);
    if (was_running && gpumem__sw_thread_start(ctl) != GPUMEM_OK) return GPUMEM_ESYS;
    return GPUMEM_OK;
}

gpumem_status gpumem_swctl_reset_end(gpumem_swctl *ctl, gpumem_nvme_qp *qp) {
    gpumem_target_queue *q;
    gpumem_status st;
    uint32_t i;
    int was_running;
    if (!ctl || !qp) return GPUMEM_ENULL;
    if ((i = gpumem_target_pairs_find(ctl->pairs, qp)) == GPUMEM_TARGET_NO_PAIR) return GPUMEM_EINVAL;
    if (!gpumem_target_pairs_deleted(ctl->pairs, i)) return GPUMEM_ESTATE;
    q = gpumem_target_pairs_queue(ctl->pairs, i);
    was_running = ctl->thread_alive;
    if (was_running) gpumem__sw_thread_stop(ctl);
    /* The pair first (it zeroes the CQ and the doorbells), then the
     * controller's side of the recreated queues. */
    if ((st = gpumem_nvme_qp_reinit(qp)) == GPUMEM_OK) {
        gpumem_target_queue_restart(q);
        gpumem_target_pairs_set_deleted(ctl->pairs, i, 0);
        if (!was_running) gpumem_nvme_qp_signals_set_stopped(q->signals, 1);
    }
    if (was_running && gpumem__sw_thread_start(ctl) != GPUMEM_OK) {
        gpumem_nvme_qp_signals_set_stopped(q->signals, 1);
        return GPUMEM_ESYS;
    }
    return st;
}

gpumem_status gpumem_swctl_stop(gpumem_swctl *ctl) {
    if (!ctl) return GPUMEM_ENULL;
    if (!ctl->thread_alive) return GPUMEM_ESTATE;
    gpumem__sw_thread_stop(ctl);
    /* After the thread has ended, so that no completion follows the mark:
     * every waiter wakes and returns GPUMEM_ENODEV. */
    gpumem_target_pairs_set_stopped(ctl->pairs, 1);
    return GPUMEM_OK;
}

gpumem_status gpumem_swctl_get_stats(gpumem_swctl *ctl, gpumem_swctl_stats *out) {
    const uint64_t *from;
    uint64_t *to;
    size_t k;
    if (!ctl || !out) return GPUMEM_ENULL;
    from = (const uint64_t *)&ctl->pub;
    to = (uint64_t *)out;
    for (k = 0; k < sizeof *out / sizeof(uint64_t); k++)
        to[k] = gpumem_atomic_load_u64((uint64_t *)&from[k], GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    out->violations = 0;
    {   /* the sum of the violation counts (gpumem_target_stats_add sets it) */
        gpumem_swctl_stats zero;
        memset(&zero, 0, sizeof zero);
        gpumem_target_stats_add(out, &zero);
    }
    return GPUMEM_OK;
}

uint64_t gpumem_swctl_progress(gpumem_swctl *ctl) {
    return ctl ? gpumem_atomic_load_u64(&ctl->progress, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) : 0;
}

size_t gpumem_swctl_report(gpumem_swctl *ctl, char *buf, size_t n) {
    size_t at = 0;
    uint32_t i, count;
    if (!ctl || !buf) return 0;
    if (n) buf[0] = 0;
    count = gpumem_target_pairs_count(ctl->pairs);
    for (i = 0; i < count; i++) {
        at = gpumem_target_pairs_report_client(ctl->pairs, i, buf, n, at);
        at = gpumem__appendf(buf, n, at, "  controller holds %u fetched commands not yet due or posted\n",
                             ctl->queues[i].pend_count);
        at = gpumem_target_queue_report(gpumem_target_pairs_queue(ctl->pairs, i), &ctl->st, buf, n, at);
    }
    return at;
}
static uint64_t gpumem__swctl_wd_progress(void *ctx) { return gpumem_swctl_progress((gpumem_swctl *)ctx); }
static void gpumem__swctl_wd_stop(void *ctx) {
    gpumem_swctl *c = (gpumem_swctl *)ctx;
    if (c->thread_alive) gpumem_swctl_stop(c);
}
static size_t gpumem__swctl_wd_report(void *ctx, char *buf, size_t n) {
    return gpumem_swctl_report((gpumem_swctl *)ctx, buf, n);
}

gpumem_watchdog_config gpumem_swctl_watchdog_config(gpumem_swctl *ctl, const char *what, uint32_t stall_ms) {
    return gpumem_watchdog_config_make(what, stall_ms, gpumem__swctl_wd_progress, gpumem__swctl_wd_stop,
                                       gpumem__swctl_wd_report, ctl);
}

gpumem_status gpumem_swctl_destroy(gpumem_swctl *ctl) {
    gpumem_status st;
    uint32_t i, count;
    if (!ctl) return GPUMEM_ENULL;
    /* Refuses, changing nothing, while a pair is in use (GPUMEM_EBUSY) or
     * cannot be read to tell (GPUMEM_ESYS). */
    if ((st = gpumem_target_pairs_check_idle(ctl->pairs)) != GPUMEM_OK) return st;
    if (ctl->thread_alive) gpumem_swctl_stop(ctl);
    count = gpumem_target_pairs_count(ctl->pairs);
    for (i = 0; i < count; i++) GPUMEM_FREE(ctl->queues[i].pend);
    GPUMEM_FREE(ctl->queues);
    gpumem_target_pairs_destroy(ctl->pairs);
    if (ctl->own_ram) gpumem_target_mem_free(&ctl->cfg.mem, ctl->ram);
    GPUMEM_FREE(ctl);
    return GPUMEM_OK;
}

#endif /* GPUMEM_IMPLEMENTATION */
#endif /* host shim */

#endif /* GPUMEM_SWCTL_H */
