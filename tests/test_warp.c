/* The GPU-resident controller's warp-wide loop with several lanes, on the
 * host: its serving threads play warps of 4 lanes (tests/host_warp.h), so
 * the ballots, broadcasts, turns and copies split over lanes run as on a
 * GPU (with 4 lanes, not 32). Every command counted, every read checked by content. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#define GPUMEM_HOST_WARP 4
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "nvme_workload.h"

/* The queue workload (blocking and asynchronous I/O, every read by content)
 * on `pairs` pairs of `depth` served by `servers` host threads in warps of
 * 4. Fewer clients and I/Os than the queue suite: every step of a host warp
 * is two barrier waits, so these servers are slow. */
static void serve_with_warps(uint32_t depth, uint32_t pairs, uint32_t n_cids, uint32_t async_depth,
                             uint32_t servers) {
    run_cfg rc = base_run(depth);
    run_result r;
    const char *problem;
    rc.pairs = pairs;
    rc.n_cids = n_cids;
    rc.async_depth = async_depth;
    rc.gpuctl_servers = servers;
    rc.threads = 32;
    rc.ios = (uint32_t)(300 * test_scale());
    run_workload(&rc, &r);
    problem = run_problem(&r);
    cr_assert_null(problem, "%s", problem ? problem : "");
    cr_assert_gt(r.issued, 0);
}

/* Two warps of four lanes, four pairs each (warp w serves pairs w, w + 2,
 * ...): up to four commands of a pair in flight per round, each moved by
 * the whole warp. */
Test(host_warp, two_warps_of_four_lanes_eight_pairs, .timeout = 600) { serve_with_warps(64, 8, 64, 8, 8); }

/* A partial last warp (3 lanes): it serves its pairs with the lanes it has. */
Test(host_warp, partial_warp_and_lanes_without_pairs, .timeout = 600) { serve_with_warps(16, 5, 16, 4, 7); }

/* One pair served by one warp of four lanes:
 * transfers of 1 to 9 blocks at every dword offset class in a page (so the
 * units and the PRP lists vary), written then read back by content. */
Test(host_warp, one_pair_multi_block_transfers_at_odd_offsets, .timeout = 120) {
    run_cfg rc = base_run(64);
    gpuctl_rig g;
    gpumem_target_stats s;
    gpumem_nvme_qp *qp;
    unsigned char *mem = aligned_alloc(4096, 8 * 4096);
    static const uint32_t offsets[] = {0, 4, 8, 12, 512, 4092};
    uint64_t commands = 0;
    rc.gpuctl_servers = 4;
    rc.ctl.max_blocks = 16;
    cr_assert(mem);
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 256), GPUMEM_OK);
    qp = gpumem_swctl_gpu_pair(g.mem, 0);
    gpuctl_rig_start(&g);
    for (uint32_t o = 0; o < sizeof offsets / sizeof *offsets; o++)
        for (uint32_t nlb = 1; nlb <= 9; nlb++) {
            unsigned char *buf = mem + offsets[o];
            const uint64_t lba = (uint64_t)(o * 10 + nlb) * 2 % 240;
            const uint32_t gen = o * 16 + nlb;
            for (uint32_t b = 0; b < nlb; b++) fill_block(buf + (size_t)b * LBA, lba + b, gen);
            cr_assert_eq(gpumem_nvme_qp_write_buf(qp, lba, nlb, buf, NULL), GPUMEM_OK);
            memset(mem, 0, 8 * 4096);
            cr_assert_eq(gpumem_nvme_qp_read_buf(qp, lba, nlb, buf, NULL), GPUMEM_OK);
            for (uint32_t b = 0; b < nlb; b++)
                cr_assert(block_ok(buf + (size_t)b * LBA, lba + b, gen), "offset %u, %u blocks: block %u", offsets[o],
                          nlb, b);
            commands += 2;
        }
    gpuctl_rig_stop(&g, &s);
    cr_assert_eq(s.commands, commands);
    cr_assert_eq(s.violations, 0);
    gpuctl_rig_free(&g);
    free(mem);
}

/* One pair, one warp of four lanes, batches of 40 commands of every kind -
 * reads and writes of 1 to 9 blocks at dword offsets all over a page,
 * flushes - submitted asynchronously: the first batch before the
 * controller starts, so its visits take full rounds of four commands; then
 * two more while it runs (the CQ wraps and its phase flips). Each batch is
 * checked by content (reads match the namespace, writes land in it, no byte
 * next to a buffer touched), counted, and its CQ entries checked against its
 * SQ entries position by position: completions in fetch order, with the
 * lap's phase and an SQ head past the entry's own command. */
enum { BATCH_CMDS = 40, SLOT_BYTES = 3 * 4096, WARP_DEPTH = 64 };

static uint32_t batch_op(uint32_t j) {
    return j % 5 == 4 ? GPUMEM_NVME_OP_FLUSH : (j % 5) & 1u ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ;
}
static uint32_t batch_nlb(uint32_t j) { return 1 + (j * 7) % 9; }
static uint32_t batch_offset(uint32_t j, uint32_t b) { return ((j * 37 + b * 11) * 4) % 4096; }

Test(host_warp, one_pair_rounds_of_mixed_commands_in_fetch_order, .timeout = 120) {
    run_cfg rc = base_run(WARP_DEPTH);
    gpuctl_rig g;
    gpumem_target_stats s;
    gpumem_nvme_qp *qp;
    gpumem_target_queue *q;
    gpumem_nvme_req req[BATCH_CMDS];
    unsigned char *arena = aligned_alloc(4096, (size_t)BATCH_CMDS * SLOT_BYTES);
    uint64_t posted = 0, reads = 0, writes = 0, flushes = 0;
    rc.gpuctl_servers = 4;
    rc.n_cids = WARP_DEPTH;
    rc.ctl.max_blocks = 16;
    cr_assert(arena);
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 9 * BATCH_CMDS), GPUMEM_OK);
    for (uint32_t lba = 0; lba < 9 * BATCH_CMDS; lba++)
        fill_block((unsigned char *)g.d.ram + (size_t)lba * LBA, lba, 1);
    qp = gpumem_swctl_gpu_pair(g.mem, 0);
    q = &((gpumem_swctl_gpu *)g.mem)->queues[0];
    for (uint32_t b = 0; b < 3; b++) {
        memset(arena, 0x5A, (size_t)BATCH_CMDS * SLOT_BYTES);
        for (uint32_t j = 0; j < BATCH_CMDS; j++) {
            unsigned char *buf = arena + (size_t)j * SLOT_BYTES + batch_offset(j, b);
            const uint32_t op = batch_op(j), nlb = batch_nlb(j);
            gpumem_status st;
            if (op == GPUMEM_NVME_OP_FLUSH) {
                gpumem_nvme_cmd c;
                gpumem_nvme_cmd_flush(&c, &qp->ns);
                st = gpumem_nvme_qp_submit(qp, &c, &req[j]);
            } else {
                if (op == GPUMEM_NVME_OP_WRITE)
                    for (uint32_t k = 0; k < nlb; k++) fill_block(buf + (size_t)k * LBA, 9 * j + k, 2 + b);
                st = gpumem_nvme_qp_submit_buf(qp, (uint8_t)op, 9 * j, nlb, buf, &req[j]);
            }
            cr_assert_eq(st, GPUMEM_OK, "batch %u command %u: %d", b, j, st);
            reads += op == GPUMEM_NVME_OP_READ, writes += op == GPUMEM_NVME_OP_WRITE,
                flushes += op == GPUMEM_NVME_OP_FLUSH;
        }
        if (b == 0) gpuctl_rig_start(&g);
        for (uint32_t j = 0; j < BATCH_CMDS; j++) {
            gpumem_status st;
            while ((st = gpumem_nvme_qp_poll(qp, &req[j])) == GPUMEM_EAGAIN) sched_yield();
            cr_assert_eq(st, GPUMEM_OK, "batch %u command %u: %d", b, j, st);
        }
        for (uint32_t j = 0; j < BATCH_CMDS; j++) {
            const unsigned char *slot = arena + (size_t)j * SLOT_BYTES;
            const uint32_t op = batch_op(j), nlb = batch_nlb(j), at = batch_offset(j, b);
            const uint32_t len = op == GPUMEM_NVME_OP_FLUSH ? 0 : nlb * LBA;
            const uint32_t pos = (uint32_t)((posted + j) % WARP_DEPTH);
            const uint32_t dw3 = q->cq[pos].dw3, sq_head = q->cq[pos].dw2 & 0xFFFFu;
            for (uint32_t k = 0; k < nlb && op != GPUMEM_NVME_OP_FLUSH; k++) {
                const unsigned char *blk = op == GPUMEM_NVME_OP_READ
                                               ? slot + at + (size_t)k * LBA
                                               : (const unsigned char *)g.d.ram + (size_t)(9 * j + k) * LBA;
                cr_assert(block_ok(blk, 9 * j + k, op == GPUMEM_NVME_OP_READ ? 1 : 2 + b),
                          "batch %u command %u block %u", b, j, k);
            }
            for (uint32_t i = 0; i < SLOT_BYTES; i++)
                if (i < at || i >= at + len)
                    cr_assert_eq(slot[i], 0x5A, "batch %u command %u: byte %u touched", b, j, i);
            cr_assert_eq(dw3 & 0xFFFFu, q->sq[pos].cdw0 >> 16, "batch %u: CQ entry %u is not SQ entry %u's", b, pos,
                         pos);
            cr_assert_eq((dw3 >> 16) & 1u, (uint32_t)(((posted + j) / WARP_DEPTH) % 2 == 0),
                         "batch %u: phase at %u", b, pos);
            cr_assert_eq(dw3 >> 17, 0, "batch %u: status at %u", b, pos);
            cr_assert_eq((sq_head - pos - 1) % WARP_DEPTH < BATCH_CMDS, 1, "batch %u: SQ head %u at CQ entry %u", b,
                         sq_head, pos);
        }
        posted += BATCH_CMDS;
    }
    gpuctl_rig_stop(&g, &s);
    cr_assert_eq(s.commands, posted);
    cr_assert_eq(s.reads, reads);
    cr_assert_eq(s.writes, writes);
    cr_assert_eq(s.flushes, flushes);
    cr_assert_eq(s.violations, 0);
    cr_assert_eq(s.errors_other, 0);
    gpuctl_rig_free(&g);
    free(arena);
}

/* gpumem_copy_lanes split over `width` lanes, run one lane at a time on a
 * fresh destination: every (destination, source) alignment within 16 bytes
 * and lengths 0 to 200 and around the four-unit groups' edges. The lanes'
 * writes together equal memcpy's, no two lanes write the same byte, and no
 * byte outside the range is touched. The source has no zero byte, so a byte
 * a lane wrote is one that is no longer zero. */
Test(host_warp, copy_lanes_each_byte_by_one_lane) {
    static const uint32_t widths[] = {1, 4, 5, 32};
    static const uint32_t long_lengths[] = {255, 256, 257, 1023, 1024, 1025, 2047, 2048, 4096, 4113};
    enum { ROOM = 4224 };
    unsigned char *src = aligned_alloc(64, ROOM), *dst = aligned_alloc(64, ROOM), *want = aligned_alloc(64, ROOM);
    unsigned char *owner = malloc(ROOM);
    cr_assert(src && dst && want && owner);
    for (uint32_t i = 0; i < ROOM; i++) src[i] = (unsigned char)(1 + i % 251);
    for (uint32_t w = 0; w < sizeof widths / sizeof *widths; w++)
        for (uint32_t li = 0; li < 201 + sizeof long_lengths / sizeof *long_lengths; li++) {
            const uint32_t n = li <= 200 ? li : long_lengths[li - 201];
            for (uint32_t d_o = 0; d_o < 16; d_o++)
                for (uint32_t s_o = 0; s_o < 16; s_o++) {
                    if (li > 200 && (d_o & 3) != 0 && (s_o & 3) != 1) continue; /* long lengths: a sample */
                    memset(want, 0, ROOM);
                    memcpy(want + d_o, src + s_o, n);
                    memset(owner, 0xFF, ROOM);
                    for (uint32_t lane = 0; lane < widths[w]; lane++) {
                        memset(dst, 0, ROOM);
                        gpumem_copy_lanes(dst + d_o, src + s_o, n, lane, widths[w]);
                        for (uint32_t i = 0; i < ROOM; i++) {
                            if (!dst[i]) continue;
                            cr_assert_eq(dst[i], want[i], "width %u lane %u n %u at %u/%u: byte %u wrong",
                                         widths[w], lane, n, d_o, s_o, i);
                            cr_assert_eq(owner[i], 0xFF, "width %u n %u at %u/%u: byte %u by lanes %u and %u",
                                         widths[w], n, d_o, s_o, i, owner[i], lane);
                            owner[i] = (unsigned char)lane;
                        }
                    }
                    for (uint32_t i = 0; i < ROOM; i++)
                        cr_assert_eq(owner[i] != 0xFF, i >= d_o && i < d_o + n, "width %u n %u at %u/%u: byte %u",
                                     widths[w], n, d_o, s_o, i);
                }
        }
    free(src), free(dst), free(want), free(owner);
}

/* gpumem_copy_value (the cache's element copy): every size from 1 to 32 at
 * every pair of alignments within 16 bytes equals memcpy and touches
 * nothing else. */
Test(host_warp, copy_value_every_size_and_alignment) {
    unsigned char src[64], dst[64], want[64];
    for (uint32_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 13 + 7);
    for (uint32_t n = 1; n <= 32; n++)
        for (uint32_t d_o = 0; d_o < 16; d_o++)
            for (uint32_t s_o = 0; s_o < 16; s_o++) {
                memset(dst, 0xEE, sizeof dst);
                memset(want, 0xEE, sizeof want);
                memcpy(want + d_o, src + s_o, n);
                gpumem_copy_value(dst + d_o, src + s_o, n);
                cr_assert_arr_eq(dst, want, sizeof dst, "n %u at %u/%u", n, d_o, s_o);
            }
}
