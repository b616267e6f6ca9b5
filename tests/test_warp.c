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
    gpumem_nvme_sw_stats s;
    gpumem_nvme_qp *qp;
    unsigned char *mem = aligned_alloc(4096, 8 * 4096);
    static const uint32_t offsets[] = {0, 4, 8, 12, 512, 4092};
    uint64_t commands = 0;
    rc.gpuctl_servers = 4;
    rc.ctl.max_blocks = 16;
    cr_assert(mem);
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 256), GPUMEM_OK);
    qp = gpumem_nvme_gpuctl_pair(g.mem, 0);
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
