/* Criterion tests of gpumem_nvme.h against the software controller. Every I/O
 * is counted and every byte read is checked by content (see nvme_workload.h). */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS 0x20 /* strict C11 hides it */
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log_capture.h"
#include "gpumem_swctl.h"
#include "gpumem_nvmectl.h"
#include "nvme_workload.h"
#include "bare_pair.h"

static gpumem_swctl *make_ctl(uint64_t n_blocks, gpumem_swctl_config *tweak) {
    gpumem_swctl_config c = tweak ? *tweak : gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    c.lba_bytes = LBA;
    c.n_blocks = n_blocks;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_OK);
    return ctl;
}

/* A started controller with one queue pair of `depth` entries. */
static gpumem_swctl *started_ctl(uint64_t n_blocks, gpumem_swctl_config *tweak, uint32_t depth, gpumem_nvme_qp **qp) {
    gpumem_swctl *ctl = make_ctl(n_blocks, tweak);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, depth, qp), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    return ctl;
}

static void stop_and_check_clean(gpumem_swctl *ctl, uint64_t expect_commands, gpumem_swctl_stats *out) {
    gpumem_swctl_stats s;
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    gpumem_swctl_get_stats(ctl, &s);
    cr_assert_eq(s.violations, 0, "protocol violations: doorbell %lu back %lu cqhead %lu cid %lu prp %lu lba %lu",
                 (unsigned long)s.bad_doorbell, (unsigned long)s.doorbell_backwards,
                 (unsigned long)s.cq_head_past_posted, (unsigned long)s.cid_in_flight, (unsigned long)s.bad_prp,
                 (unsigned long)s.lba_out_of_range);
    cr_assert_eq(s.commands, expect_commands, "controller completed %lu commands, host issued %lu",
                 (unsigned long)s.commands, (unsigned long)expect_commands);
    if (out) *out = s;
}

/* ---- wire format, builders, decoder -------------------------------------- */

Test(nvme_wire, layout) {
    gpumem_nvme_cmd c;
    cr_assert_eq(sizeof(gpumem_nvme_cmd), 64u);
    cr_assert_eq(sizeof(gpumem_nvme_cpl), 16u);
    cr_assert_eq((char *)&c.nsid - (char *)&c, 4);
    cr_assert_eq((char *)&c.prp2 - (char *)&c, 32);
    cr_assert_eq((char *)&c.cdw12 - (char *)&c, 48);
}

Test(nvme_wire, read_builder_fields_and_bad_input) {
    gpumem_nvme_ns ns = {1, 9, 1000, 64, 0};
    gpumem_nvme_cmd c;
    cr_assert_eq(gpumem_nvme_cmd_read(&c, &ns, 0x3E7ull - 7, 8, 0x1000, 0), GPUMEM_OK);
    cr_assert_eq(c.cdw0 & 0xFF, GPUMEM_NVME_OP_READ);
    cr_assert_eq(c.nsid, 1u);
    cr_assert_eq(c.cdw10, 992u);
    cr_assert_eq(c.cdw11, 0u);
    cr_assert_eq(c.cdw12, 7u, "NLB is zero based");
    cr_assert_eq(c.prp1, 0x1000u);
    cr_assert_eq(gpumem_nvme_cmd_write(&c, &ns, 993, 8, 0x1000, 0), GPUMEM_ERANGE, "one block past the end");
    cr_assert_eq(gpumem_nvme_cmd_write(&c, &ns, 1000, 1, 0x1000, 0), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_nvme_cmd_write(&c, &ns, UINT64_MAX, 2, 0x1000, 0), GPUMEM_ERANGE, "no wrap-around");
    cr_assert_eq(gpumem_nvme_cmd_read(&c, &ns, 0, 0, 0x1000, 0), GPUMEM_EINVAL, "zero blocks");
    cr_assert_eq(gpumem_nvme_cmd_read(&c, &ns, 0, 65, 0x1000, 0), GPUMEM_E2BIG, "more than MDTS");
    cr_assert_eq(gpumem_nvme_cmd_read(NULL, &ns, 0, 1, 0x1000, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_cmd_read(&c, NULL, 0, 1, 0x1000, 0), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_cmd_read(&c, &ns, 0, 1, 0, 0), GPUMEM_ENULL, "no data pointer");
    {
        gpumem_nvme_ns big = {1, 9, 1ull << 40, 64, 0};
        cr_assert_eq(gpumem_nvme_cmd_read(&c, &big, (1ull << 33) + 5, 1, 0x1000, 0), GPUMEM_OK);
        cr_assert_eq(c.cdw10, 5u);
        cr_assert_eq(c.cdw11, 2u, "upper LBA bits in CDW11");
    }
}

Test(nvme_wire, status_decoder) {
    cr_assert_str_eq(gpumem_nvme_status_str(0), "successful completion");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(0, 0x80)), "LBA out of range");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(0, 0x01)), "invalid command opcode");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(1, 0x02)), "invalid queue size");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(2, 0x81)), "unrecovered read error");
    /* Path related (SCT 3), as NVMe 2.0 and Linux number them (0x370: host pathing error). */
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(3, 0x01)), "asymmetric access persistent loss");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(3, 0x60)), "controller pathing error");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(3, 0x70)), "host pathing error");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(3, 0x71)), "command aborted by host");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(0, 0x7F)), "unknown generic command status");
    cr_assert_str_eq(gpumem_nvme_status_str(GPUMEM_NVME_STATUS(5, 0)), "reserved status code type");
    cr_assert_str_eq(gpumem_nvme_status_str((uint16_t)(GPUMEM_NVME_STATUS(2, 0x81) | 0x4000)),
                     "unrecovered read error", "DNR does not change the words");
}

Test(nvme_wire, prp_setup) {
    static uint64_t list[1100] __attribute__((aligned(4096)));
    uint64_t p1, p2, base = 0x100000;
    uint32_t i;
    cr_assert_eq(gpumem_nvme_prp_setup(base + 512, 512, NULL, 0, 0, &p1, &p2), GPUMEM_OK);
    cr_assert(p1 == base + 512 && p2 == 0);
    cr_assert_eq(gpumem_nvme_prp_setup(base + 512, 4096, NULL, 0, 0, &p1, &p2), GPUMEM_OK);
    cr_assert_eq(p2, base + 4096, "second page");
    cr_assert_eq(gpumem_nvme_prp_setup(base, 3 * 4096, NULL, 0, 0, &p1, &p2), GPUMEM_ENULL, "needs a list");
    cr_assert_eq(gpumem_nvme_prp_setup(base, 3 * 4096, list, 0x5000, 1, &p1, &p2), GPUMEM_ENOMEM);
    cr_assert_eq(gpumem_nvme_prp_setup(base, 3 * 4096, list, 0x5008, 8, &p1, &p2), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_nvme_prp_setup(base + 2, 512, NULL, 0, 0, &p1, &p2), GPUMEM_EALIGN, "dword aligned");
    cr_assert_eq(gpumem_nvme_prp_setup(base, 3 * 4096, list, 0x5000, 8, &p1, &p2), GPUMEM_OK);
    cr_assert(p2 == 0x5000 && list[0] == base + 4096 && list[1] == base + 8192);
    /* 600 pages: 599 list entries, chained after 511 entries of the first page. */
    cr_assert_eq(gpumem_nvme_prp_setup(base, 600 * 4096ull, list, 0x5000, 1100, &p1, &p2), GPUMEM_OK);
    for (i = 0; i < 511; i++) cr_assert_eq(list[i], base + 4096ull * (i + 1));
    cr_assert_eq(list[511], 0x5000u + 4096u, "chain pointer to the next list page");
    cr_assert_eq(list[512], base + 4096ull * 512);
    cr_assert_eq(list[599], base + 4096ull * 599);
}

/* Data and list pages scattered in I/O space, as a process's ordinary pages are. */
Test(nvme_wire, prp_build_scattered_pages) {
    static uint64_t list[1100] __attribute__((aligned(4096)));
    static uint64_t data_pages[700], list_pages[3];
    gpumem_nvme_iomap data, lmap;
    uint64_t p1, p2;
    uint32_t i;
    for (i = 0; i < 700; i++) data_pages[i] = 0x40000000ull + (uint64_t)(699 - i) * 0x3000; /* descending, gaps */
    for (i = 0; i < 3; i++) list_pages[i] = 0x9000000ull + (uint64_t)(2 - i) * 0x10000;
    data.iova = 0, data.pages = data_pages, data.offset = 0x200; /* starts 512 bytes into its first page */
    lmap.iova = 0, lmap.pages = list_pages, lmap.offset = 0;
    cr_assert_eq(gpumem_nvme_prp_build(&data, 4096, list, &lmap, 1100, &p1, &p2), GPUMEM_OK);
    cr_assert(p1 == data_pages[0] + 0x200 && p2 == data_pages[1], "two pages: PRP2 is the second page");
    cr_assert_eq(gpumem_nvme_prp_build(&data, 600 * 4096ull, list, &lmap, 1100, &p1, &p2), GPUMEM_OK);
    cr_assert_eq(p1, data_pages[0] + 0x200);
    cr_assert_eq(p2, list_pages[0]);
    for (i = 0; i < 511; i++) cr_assert_eq(list[i], data_pages[i + 1]);
    cr_assert_eq(list[511], list_pages[1], "chain pointer: the next list page's own I/O address");
    cr_assert_eq(list[512], data_pages[512]);
    cr_assert_eq(list[600], data_pages[600], "600 pages touched from offset 512: 600 list entries");
    {
        gpumem_nvme_iomap sub = gpumem_nvme_iomap_sub(&data, 4096 - 0x200);
        cr_assert_eq(gpumem_nvme_iomap_at(&sub, 0), data_pages[1]);
    }
}

/* ---- queue-pair setup: bad input ------------------------------------------ */

Test(nvme_qp, init_rejects_bad_input) {
    gpumem_nvme_qp qp;
    gpumem_nvme_qp_desc d = bare_pair_desc(16, 100, 8);
    cr_assert_eq(gpumem_nvme_qp_init(&qp, &d), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_init(NULL, &d), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_init(&qp, NULL), GPUMEM_ENULL);
    {
        gpumem_nvme_qp_desc e = d;
        uint32_t bad_depths[] = {0, 1, 3, 12, 131072};
        size_t i;
        for (i = 0; i < sizeof bad_depths / sizeof *bad_depths; i++) {
            e.depth = bad_depths[i];
            cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_EINVAL, "depth %u", bad_depths[i]);
        }
        e = d;
        e.n_cids = 1;
        cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_EINVAL);
        e = d;
        e.virtual_start = 8; /* must be a multiple of 2 * depth */
        cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_EINVAL);
        e = d;
        e.state_bytes = gpumem_nvme_qp_state_bytes(8, 16) - 1;
        cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_ENOMEM);
        e = d;
        e.sq = NULL;
        cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_ENULL);
        e = d;
        e.ns.lba_shift = 8;
        cr_assert_eq(gpumem_nvme_qp_init(&qp, &e), GPUMEM_EINVAL);
    }
}

Test(nvme_qp, controller_rejects_bad_config_and_late_pairs) {
    gpumem_swctl_config c = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    c.lba_bytes = 1000;
    EXPECT_LOG("LBA size 1000 is not a power of two", cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL));
    c = gpumem_swctl_config_default();
    c.max_blocks = 70000;
    EXPECT_LOG("max_blocks", cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL));
    cr_assert_eq(gpumem_swctl_create(NULL, &ctl), GPUMEM_ENULL);
    ctl = make_ctl(64, NULL);
    EXPECT_LOG("no queue pairs",
               cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_ESTATE, "no queue pairs yet"));
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 6, &qp), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 4, &qp), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 4, &qp), GPUMEM_ESTATE, "pairs are added while stopped");
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_ESTATE);
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    gpumem_swctl_destroy(ctl);
}

Test(nvme_qp, io_rejects_bad_input) {
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    unsigned char buf[LBA] __attribute__((aligned(LBA)));
    gpumem_nvme_req req;
    ctl = started_ctl(64, NULL, 4, &qp);
    cr_assert_eq(gpumem_nvme_qp_read(qp, 64, 1, (uintptr_t)buf, 0, NULL), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_nvme_qp_write(qp, 60, 8, (uintptr_t)buf, 0, NULL), GPUMEM_ERANGE);
    cr_assert_eq(gpumem_nvme_qp_read(NULL, 0, 1, (uintptr_t)buf, 0, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_read(qp, 0, 1, 0, 0, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_exec(qp, NULL, NULL), GPUMEM_ENULL);
    memset(&req, 0, sizeof req);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_ESTATE, "poll of a request never submitted");
    cr_assert_eq(gpumem_nvme_qp_submit(qp, NULL, &req), GPUMEM_ENULL);
    stop_and_check_clean(ctl, 0, NULL);
    gpumem_swctl_destroy(ctl);
}

Test(nvme_qp, pick_a_pair_per_thread) {
    gpumem_nvme_qp pairs[3];
    cr_assert_eq(gpumem_nvme_qp_pick(pairs, 3, 7), &pairs[1]);
    cr_assert_eq(gpumem_nvme_qp_pick(pairs, 3, 0), &pairs[0]);
    cr_assert_null(gpumem_nvme_qp_pick(pairs, 0, 1), "no pairs: NULL, not a division by zero");
    cr_assert_null(gpumem_nvme_qp_pick(NULL, 3, 1));
    cr_assert_eq(gpumem_sm_id(), 0u, "host threads are SM 0");
}

/* ---- round trips ----------------------------------------------------------- */

Test(nvme_io, single_thread_write_then_read_by_content) {
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    unsigned char w[8 * LBA] __attribute__((aligned(4096))), r[8 * LBA] __attribute__((aligned(4096)));
    uint64_t p1, p2, q1, q2, lba;
    gpumem_nvme_cpl cpl;
    ctl = started_ctl(256, NULL, 2, &qp);
    for (lba = 0; lba < 8; lba++) fill_block(w + lba * LBA, 100 + lba, 1);
    cr_assert_eq(gpumem_nvme_prp_identity(w, sizeof w, NULL, 0, &p1, &p2), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_prp_identity(r, sizeof r, NULL, 0, &q1, &q2), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_write(qp, 100, 8, p1, p2, &cpl), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_cpl_status(&cpl), 0);
    cr_assert_eq(gpumem_nvme_cpl_sq_id(&cpl), qp->qid);
    cr_assert_eq(gpumem_nvme_qp_flush(qp, NULL), GPUMEM_OK);
    memset(r, 0, sizeof r);
    cr_assert_eq(gpumem_nvme_qp_read(qp, 100, 8, q1, q2, NULL), GPUMEM_OK);
    for (lba = 0; lba < 8; lba++) cr_assert(block_ok(r + lba * LBA, 100 + lba, 1), "block %lu", (unsigned long)lba);
    cr_assert(memcmp((unsigned char *)gpumem_swctl_ram(ctl) + 100 * LBA, w, sizeof w) == 0, "backing store");
    stop_and_check_clean(ctl, 3, NULL);
    gpumem_swctl_destroy(ctl);
}

Test(nvme_io, largest_depth_65536) {
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    unsigned char b[LBA] __attribute__((aligned(LBA)));
    uint64_t i;
    ctl = started_ctl(4096, NULL, 65536, &qp);
    for (i = 0; i < 200; i++) {
        fill_block(b, i, 5);
        cr_assert_eq(gpumem_nvme_qp_write(qp, i, 1, (uintptr_t)b, 0, NULL), GPUMEM_OK);
        memset(b, 0, LBA);
        cr_assert_eq(gpumem_nvme_qp_read(qp, i, 1, (uintptr_t)b, 0, NULL), GPUMEM_OK);
        cr_assert(block_ok(b, i, 5), "block %lu", (unsigned long)i);
    }
    stop_and_check_clean(ctl, 400, NULL);
    gpumem_swctl_destroy(ctl);
}

Test(nvme_io, long_transfer_through_a_prp_list) {
    gpumem_swctl_config c = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    const uint32_t nlb = 256; /* 128 KiB, 33 pages with the offset below */
    unsigned char *w = aligned_alloc(4096, nlb * LBA + 4096), *r = aligned_alloc(4096, nlb * LBA + 4096);
    static uint64_t list[64] __attribute__((aligned(4096)));
    uint64_t p1, p2, i;
    c.max_blocks = nlb;
    ctl = started_ctl(4096, &c, 16, &qp);
    for (i = 0; i < nlb; i++) fill_block(w + 1024 + i * LBA, 7 + i, 3);
    cr_assert_eq(gpumem_nvme_prp_identity(w + 1024, nlb * LBA, list, 64, &p1, &p2), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_write(qp, 7, nlb, p1, p2, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_prp_identity(r + 512, nlb * LBA, list, 64, &p1, &p2), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_read(qp, 7, nlb, p1, p2, NULL), GPUMEM_OK);
    for (i = 0; i < nlb; i++) cr_assert(block_ok(r + 512 + i * LBA, 7 + i, 3), "block %lu", (unsigned long)i);
    stop_and_check_clean(ctl, 2, NULL);
    gpumem_swctl_destroy(ctl);
    free(w);
    free(r);
}

Test(nvme_io, file_backed_namespace) {
    char path[] = "/tmp/gpumem-test-XXXXXX";
    int fd = mkstemp(path);
    unsigned char blk[LBA] __attribute__((aligned(LBA))), got[LBA] __attribute__((aligned(LBA)));
    gpumem_swctl_config c = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    uint64_t i;
    cr_assert(fd >= 0);
    unlink(path);
    for (i = 0; i < 64; i++) {
        fill_block(blk, i, 0);
        cr_assert_eq(pwrite(fd, blk, LBA, (off_t)(i * LBA)), (ssize_t)LBA);
    }
    c.fd = fd;
    ctl = started_ctl(64, &c, 4, &qp);
    cr_assert_null(gpumem_swctl_ram(ctl), "a file-backed namespace has no RAM");
    cr_assert_eq(gpumem_nvme_qp_read(qp, 17, 1, (uintptr_t)got, 0, NULL), GPUMEM_OK);
    cr_assert(block_ok(got, 17, 0), "read from the file");
    fill_block(blk, 33, 9);
    cr_assert_eq(gpumem_nvme_qp_write(qp, 33, 1, (uintptr_t)blk, 0, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_flush(qp, NULL), GPUMEM_OK);
    stop_and_check_clean(ctl, 3, NULL);
    cr_assert_eq(pread(fd, got, LBA, 33 * LBA), (ssize_t)LBA);
    cr_assert(block_ok(got, 33, 9), "the write reached the file");
    gpumem_swctl_destroy(ctl);
    close(fd);
}

/* ---- many threads ------------------------------------------------------------ */

/* Run the shared workload and require a clean result. */
static gpumem_swctl_stats run_workers(const run_cfg *rc, uint64_t *eio_out) {
    run_result r;
    const char *problem;
    run_workload(rc, &r);
    problem = run_problem(&r);
    cr_assert_null(problem, "%s", problem ? problem : "");
    if (eio_out) *eio_out = r.eio;
    return r.stats;
}

Test(nvme_mt, depth_2_sixty_four_threads, .timeout = 600) {
    run_cfg rc = base_run(2);
    rc.ios = (uint32_t)(300 * test_scale()); /* one command in flight: every I/O is a handoff */
    run_workers(&rc, NULL);
}
Test(nvme_mt, depth_4_sixty_four_threads, .timeout = 600) {
    run_cfg rc = base_run(4);
    rc.ios = (uint32_t)(500 * test_scale());
    run_workers(&rc, NULL);
}
Test(nvme_mt, depth_64_sixty_four_threads, .timeout = 600) { run_cfg rc = base_run(64); run_workers(&rc, NULL); }
Test(nvme_mt, depth_1024_sixty_four_threads, .timeout = 600) {
    run_cfg rc = base_run(1024);
    rc.ios = (uint32_t)(2000 * test_scale());
    run_workers(&rc, NULL);
}
Test(nvme_mt, four_pairs_few_command_ids, .timeout = 600) {
    run_cfg rc = base_run(16);
    rc.pairs = 4;
    rc.n_cids = 32; /* fewer IDs than threads per pair x async depth: IDs are reused constantly */
    run_workers(&rc, NULL);
}

/* Tickets, turns and the CQ head start 64 laps below 2^32 and run through. */
static void wrap_run(uint32_t depth, uint32_t threads, uint32_t ios) {
    run_cfg rc = base_run(depth);
    gpumem_swctl_stats s;
    rc.threads = threads;
    rc.ios = ios;
    rc.virtual_start = 0u - 64u * depth;
    s = run_workers(&rc, NULL);
    cr_assert_gt(s.commands, 64u * depth, "enough commands to cross 2^32 (%lu)", (unsigned long)s.commands);
}
Test(nvme_wrap, depth_2, .timeout = 600) { wrap_run(2, 16, 100); }
Test(nvme_wrap, depth_64, .timeout = 600) { wrap_run(64, 16, 400); }
Test(nvme_wrap, depth_1024, .timeout = 600) { wrap_run(1024, 64, 1200); }

Test(nvme_mt, out_of_order_completions, .timeout = 600) {
    run_cfg rc = base_run(64);
    gpumem_swctl_stats s;
    rc.ctl.reorder = 16;
    rc.ctl.latency_ns = 20000;
    s = run_workers(&rc, NULL);
    cr_assert_gt(s.reordered, 0, "the controller really completed out of order");
}

Test(nvme_mt, injected_errors_reach_their_caller, .timeout = 600) {
    run_cfg rc = base_run(64);
    uint64_t eio;
    gpumem_swctl_stats s;
    rc.ctl.error_ppm = 50000; /* 5 % */
    rc.ctl.error_status = GPUMEM_NVME_STATUS(2, 0x81);
    rc.ctl.reorder = 8;
    s = run_workers(&rc, &eio);
    cr_assert_gt(eio, 0, "errors were injected");
    cr_assert_str_eq(gpumem_nvme_status_str(rc.ctl.error_status), "unrecovered read error");
    (void)s;
}

/* ---- the controller's violation counters can fire ------------------------- */

/* Provoke each kind of violation once on `qp` (and one good command); the
 * caller then stops its controller and checks the counts with
 * expect_provoked_violations. */
static void provoke_violations(gpumem_nvme_qp *qp) {
    gpumem_nvme_cmd cmd;
    gpumem_nvme_cpl cpl;
    static unsigned char buf[LBA] __attribute__((aligned(LBA)));
    /* An LBA range past the namespace, built by hand around the checked builder. */
    cr_assert_eq(gpumem_nvme_cmd_read(&cmd, &qp->ns, 0, 1, (uintptr_t)buf, 0), GPUMEM_OK);
    cmd.cdw10 = 64;
    cr_assert_eq(gpumem_nvme_qp_exec(qp, &cmd, &cpl), GPUMEM_EIO);
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)), "LBA out of range");
    /* A misaligned PRP. */
    cmd.cdw10 = 0;
    cmd.prp1 = (uintptr_t)buf + 1;
    cr_assert_eq(gpumem_nvme_qp_exec(qp, &cmd, &cpl), GPUMEM_EIO);
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)), "PRP offset invalid");
    /* An unknown opcode. */
    cmd.prp1 = (uintptr_t)buf;
    cmd.cdw0 = 0x7F;
    cr_assert_eq(gpumem_nvme_qp_exec(qp, &cmd, &cpl), GPUMEM_EIO);
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)), "invalid command opcode");
    cmd.cdw0 = GPUMEM_NVME_OP_READ;
    cr_assert_eq(gpumem_nvme_qp_exec(qp, &cmd, &cpl), GPUMEM_OK, "a good command still works");
    /* A doorbell value out of range, written behind the library's back. */
    __atomic_store_n(qp->cq_doorbell, 9u, __ATOMIC_RELEASE);
    { struct timespec ts = {0, 20000000}; nanosleep(&ts, NULL); }
}

static void expect_provoked_violations(const gpumem_swctl_stats *s) {
    cr_assert_eq(s->lba_out_of_range, 1);
    cr_assert_eq(s->bad_prp, 1);
    cr_assert_eq(s->bad_opcode, 1);
    cr_assert_eq(s->bad_doorbell, 1, "counted once, not once per look");
    cr_assert_eq(s->violations, 4);
    cr_assert_eq(s->commands, 4);
    cr_assert_eq(s->reads, 2, "the bad-PRP read passed the checks before its PRP was walked");
}

Test(nvme_ctl, counts_protocol_violations) {
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_swctl_stats s;
    ctl = started_ctl(64, NULL, 8, &qp);
    provoke_violations(qp);
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    gpumem_swctl_get_stats(ctl, &s);
    expect_provoked_violations(&s);
    gpumem_swctl_destroy(ctl);
}

/* ---- the GPU-resident controller's loop, run by host threads --------------- */
/* gpumem_swctl_gpu_serve is GPUMEM_API: here host threads play the GPU's
 * serving threads, so the code the GPU runs is tested on every machine. */

Test(nvme_gpuctl, sixty_four_threads_four_pairs_two_servers, .timeout = 600) {
    run_cfg rc = base_run(64);
    rc.pairs = 4;
    rc.n_cids = 64;
    rc.gpuctl_servers = 2;
    run_workers(&rc, NULL);
}

Test(nvme_gpuctl, depth_4_more_servers_than_pairs, .timeout = 600) {
    run_cfg rc = base_run(4);
    rc.pairs = 2;
    rc.n_cids = 8;
    rc.gpuctl_servers = 3; /* one server has no pair and just idles */
    rc.ios = (uint32_t)(300 * test_scale());
    run_workers(&rc, NULL);
}

Test(nvme_gpuctl, init_rejects_bad_input) {
    gpumem_swctl_gpu_desc d = gpumem_swctl_gpu_desc_default();
    uint32_t control[2];
    static unsigned char ram[64 * LBA];
    void *mem;
    size_t bytes;
    d.n_blocks = 64;
    d.ram = ram;
    d.control = control;
    bytes = gpumem_swctl_gpu_bytes(&d);
    mem = aligned_alloc(4096, GPUMEM_ALIGN_UP(bytes, 4096));
    cr_assert_eq(gpumem_swctl_gpu_init(mem, bytes - 1, &d), GPUMEM_ENOMEM);
    cr_assert_eq(gpumem_swctl_gpu_init((char *)mem + 8, bytes, &d), GPUMEM_EINVAL, "64-byte alignment");
    d.depth = 6;
    cr_assert_eq(gpumem_swctl_gpu_init(mem, bytes, &d), GPUMEM_EINVAL);
    d.depth = 1024;
    d.control = NULL;
    cr_assert_eq(gpumem_swctl_gpu_init(mem, bytes, &d), GPUMEM_ENULL);
    d.control = control;
    d.lba_bytes = 1000;
    cr_assert_eq(gpumem_swctl_gpu_init(mem, bytes, &d), GPUMEM_EINVAL);
    d.lba_bytes = LBA;
    cr_assert_eq(gpumem_swctl_gpu_init(mem, bytes, &d), GPUMEM_OK);
    cr_assert_eq((void *)gpumem_swctl_gpu_pair(mem, 0), (void *)((gpumem_swctl_gpu *)mem)->pairs);
    free(mem);
}

/* Any serving thread sees the stop, not only thread 0: here threads 1 and
 * 2 of 3 serve and thread 0 never calls (as a kernel that serves from its
 * warps 1..k and keeps warp 0 for other work, or a block still waiting for
 * an SM). Each serves its pair (a read through each, checked by content),
 * then both end at the stop. With thread 0 the only reader of the stop word
 * they served forever, and the test's timeout failed it. */
typedef struct late_server { gpumem_swctl_gpu *ctl; uint32_t t, n; } late_server;
static void *serve_as(void *p) {
    const late_server *a = (const late_server *)p;
    gpumem_swctl_gpu_serve(a->ctl, a->t, a->n);
    return NULL;
}
Test(nvme_gpuctl, stop_seen_by_servers_without_thread_0, .timeout = 60) {
    run_cfg rc = base_run(8);
    gpuctl_rig g;
    pthread_t th[2];
    late_server a[2];
    gpumem_target_stats s;
    unsigned char buf[LBA] __attribute__((aligned(LBA)));
    uint32_t i;
    rc.pairs = 3;
    rc.gpuctl_servers = 3;
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 64), GPUMEM_OK);
    for (i = 0; i < 64 * LBA; i++) ((unsigned char *)g.d.ram)[i] = (unsigned char)(i / LBA + 1);
    for (i = 0; i < 2; i++) {
        a[i].ctl = (gpumem_swctl_gpu *)g.mem, a[i].t = i + 1, a[i].n = 3;
        cr_assert_eq(pthread_create(&th[i], NULL, serve_as, &a[i]), 0);
    }
    while (__atomic_load_n(&g.control[1], __ATOMIC_ACQUIRE) < 2) sched_yield();
    for (i = 1; i < 3; i++) { /* pair i is served by thread i */
        memset(buf, 0, sizeof buf);
        cr_assert_eq(gpumem_nvme_qp_read(gpumem_swctl_gpu_pair(g.mem, i), 10 + i, 1, (uintptr_t)buf, 0, NULL),
                     GPUMEM_OK);
        cr_assert_eq(buf[0], 11 + i, "pair %u read block %u: found %u", i, 10 + i, buf[0]);
        cr_assert_eq(buf[LBA - 1], 11 + i);
    }
    gpumem_swctl_gpu_stop(&g.d);
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    gpumem_swctl_gpu_get_stats((gpumem_swctl_gpu *)g.mem, &s);
    cr_assert_eq(s.commands, 2);
    cr_assert_eq(s.violations, 0);
    gpuctl_rig_free(&g);
}

/* The same violations as counts_protocol_violations, against the GPU loop. */
Test(nvme_gpuctl, counts_protocol_violations) {
    run_cfg rc = base_run(8);
    gpuctl_rig g;
    gpumem_target_stats s;
    rc.gpuctl_servers = 1;
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 64), GPUMEM_OK);
    gpuctl_rig_start(&g);
    provoke_violations(gpumem_swctl_gpu_pair(g.mem, 0));
    gpuctl_rig_stop(&g, &s);
    expect_provoked_violations(&s);
    gpuctl_rig_free(&g);
}

/* The IOPS cap spaces completions: 2000 commands at 20K IOPS take at least
 * (2000 - the 33-command burst) / 20K s. A lower bound only. */
Test(nvme_gpuctl, iops_cap_spaces_completions, .timeout = 60) {
    run_cfg rc = base_run(64);
    gpuctl_rig g;
    gpumem_nvme_qp *qp;
    gpumem_target_stats s;
    unsigned char buf[LBA] __attribute__((aligned(LBA)));
    struct timespec t0, t1;
    double secs;
    uint32_t i;
    rc.gpuctl_servers = 1;
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 64), GPUMEM_OK);
    ((gpumem_swctl_gpu *)g.mem)->iops = 20000;
    qp = gpumem_swctl_gpu_pair(g.mem, 0);
    gpuctl_rig_start(&g);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < 2000; i++) cr_assert_eq(gpumem_nvme_qp_read(qp, i % 64, 1, (uintptr_t)buf, 0, NULL), GPUMEM_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    gpuctl_rig_stop(&g, &s);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert_geq(secs, (2000.0 - 33.0) / 20000.0 * 0.99, "2000 commands took %.3f s", secs);
    cr_assert_eq(s.commands, 2000);
    cr_assert_eq(s.violations, 0);
    gpuctl_rig_free(&g);
}

/* One server thread, eight pairs, eight asynchronous requests per client:
 * the server takes up to GPUMEM_GPUCTL_BATCH commands from a pair per visit,
 * with several requests of each client in flight. Counted and checked by
 * content (run_workers). */
Test(nvme_gpuctl, one_server_eight_pairs_deep_async, .timeout = 600) {
    run_cfg rc = base_run(64);
    rc.pairs = 8;
    rc.n_cids = 64;
    rc.async_depth = 8;
    rc.gpuctl_servers = 1;
    run_workers(&rc, NULL);
}

/* The controller's copy, split over `width` lanes run one after another here
 * (on the GPU they run together): every byte copied once, by content, for
 * every relative alignment (16-, 8-, 4-, 2-byte and byte units), odd sizes,
 * and nothing outside the range touched. */
Test(nvme_gpuctl, copy_lanes_every_alignment_size_and_width) {
    static const uint32_t widths[] = {1, 2, 3, 32};
    static const uint64_t sizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 511, 512, 513, 4095, 4096, 4109};
    enum { ROOM = 4224 + 64 }; /* a multiple of the alignment, as aligned_alloc requires */
    unsigned char *src = aligned_alloc(64, ROOM), *dst = aligned_alloc(64, ROOM);
    uint64_t checked = 0;
    size_t i;
    cr_assert(src && dst);
    for (i = 0; i < ROOM; i++) src[i] = (unsigned char)(i * 131u + 7u);
    for (uint32_t w = 0; w < sizeof widths / sizeof *widths; w++)
        for (uint32_t so = 0; so < 18; so++)
            for (uint32_t d_o = 0; d_o < 18; d_o++)
                for (uint32_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
                    const uint64_t n = sizes[z];
                    memset(dst, 0xEE, ROOM);
                    for (uint32_t lane = 0; lane < widths[w]; lane++)
                        gpumem_copy_lanes(dst + d_o, src + so, n, lane, widths[w]);
                    for (i = 0; i < ROOM; i++) {
                        unsigned char want = i >= d_o && i < d_o + n ? src[so + (i - d_o)] : 0xEE;
                        if (dst[i] != want)
                            cr_assert_fail("width %u, src +%u, dst +%u, %lu bytes: byte %zu is %02x, not %02x", widths[w],
                                     so, d_o, (unsigned long)n, i, dst[i], want);
                    }
                    checked++;
                }
    cr_assert_eq(checked, 4 * 18 * 18 * (sizeof sizes / sizeof *sizes));
    free(src);
    free(dst);
}

/* A Read and a Write moved by 32 lanes (one after another) through a PRP list
 * for a buffer at a dword offset inside its first page: the namespace bytes
 * land in the buffer and back, by content. */
Test(nvme_gpuctl, move_ram_by_lanes_through_a_prp_list) {
    const uint64_t len = 5 * 4096 + 512, off = 3 * 512;
    unsigned char *ram = aligned_alloc(4096, 16 * 4096), *mem = aligned_alloc(4096, 8 * 4096);
    uint64_t *list = aligned_alloc(4096, 4096), prp1 = 0, prp2 = 0, i;
    unsigned char *buf = mem + 4092; /* dword aligned, 4 bytes before a page boundary */
    cr_assert(ram && mem && list);
    for (i = 0; i < 16 * 4096; i++) ram[i] = (unsigned char)(i * 7u + (i >> 12));
    memset(mem, 0, 8 * 4096);
    cr_assert_eq(gpumem_nvme_prp_identity(buf, len, list, 512, &prp1, &prp2), GPUMEM_OK);
    for (uint32_t lane = 0; lane < 32; lane++)
        cr_assert_eq(gpumem_target_move_ram(ram, off, len, 1, prp1, prp2, lane, 32), 0);
    for (i = 0; i < len; i++) cr_assert_eq(buf[i], ram[off + i], "read: byte %lu", (unsigned long)i);
    cr_assert_eq(mem[4091], 0, "a byte before the buffer was written");
    cr_assert_eq(buf[len], 0, "a byte after the buffer was written");
    for (i = 0; i < len; i++) buf[i] = (unsigned char)~buf[i];
    for (uint32_t lane = 0; lane < 32; lane++) /* Write: buffer to namespace, 8 KiB further on */
        cr_assert_eq(gpumem_target_move_ram(ram, off + 8192, len, 0, prp1, prp2, lane, 32), 0);
    for (i = 0; i < len; i++) cr_assert_eq(ram[off + 8192 + i], buf[i], "write: byte %lu", (unsigned long)i);
    cr_assert_eq(gpumem_target_move_ram(ram, off, len, 1, prp1 | 2u, prp2, 0, 32), -1, "a misaligned PRP1 is refused");
    free(ram);
    free(mem);
    free(list);
}

/* The device wait cap of a pair: its default, its range. */
Test(nvme_gpuctl, wait_cap_is_set_per_pair_within_range) {
    gpuctl_rig g;
    run_cfg rc = base_run(64);
    gpumem_nvme_qp *qp;
    rc.gpuctl_servers = 1;
    cr_assert_eq(gpuctl_rig_init(&g, &rc, 64), GPUMEM_OK);
    qp = gpumem_swctl_gpu_pair(g.mem, 0);
    cr_assert_eq(qp->wait_max_ns, GPUMEM_BACKOFF_MAX_NS);
    cr_assert_eq(gpumem_nvme_qp_set_wait_max_ns(qp, 0), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_nvme_qp_set_wait_max_ns(qp, 1000001u), GPUMEM_EINVAL);
    cr_assert_eq(gpumem_nvme_qp_set_wait_max_ns(NULL, 100), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_set_wait_max_ns(qp, 4096), GPUMEM_OK);
    cr_assert_eq(qp->wait_max_ns, 4096);
    gpuctl_rig_free(&g);
}

/* ---- allocator callbacks (pinned, mapped memory for GPU clients) ------------ */

typedef struct counting_alloc {
    int allocs, frees;
    void *blocks[8];
    size_t sizes[8];
} counting_alloc;

static void *count_alloc(void *ctx, size_t n) {
    counting_alloc *a = (counting_alloc *)ctx;
    void *p = malloc(n);
    if (a->allocs < 8) a->blocks[a->allocs] = p, a->sizes[a->allocs] = n;
    a->allocs++;
    return p;
}
static void count_free(void *ctx, void *p) {
    ((counting_alloc *)ctx)->frees++;
    free(p);
}

static int inside(const counting_alloc *a, const void *p) {
    for (int i = 0; i < a->allocs && i < 8; i++)
        if ((const char *)p >= (const char *)a->blocks[i] && (const char *)p < (const char *)a->blocks[i] + a->sizes[i])
            return 1;
    return 0;
}

Test(nvme_ctl, allocator_callbacks_place_rings_and_client_state_apart) {
    counting_alloc ring, client;
    gpumem_swctl_config c = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    unsigned char w[LBA] __attribute__((aligned(LBA))), r[LBA] __attribute__((aligned(LBA)));
    memset(&ring, 0, sizeof ring);
    memset(&client, 0, sizeof client);
    c.mem.alloc = count_alloc;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL, "alloc without free");
    c.mem.free = count_free;
    c.mem.alloc_ctx = &ring;
    c.mem.client_alloc = count_alloc;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL, "client_alloc without client_free");
    c.mem.client_free = count_free;
    c.mem.client_ctx = &client;
    c.n_blocks = 64;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
    cr_assert_eq(ring.allocs, 4, "the namespace, the doorbell event, the pair's rings and its PRP-list pages");
    cr_assert_eq(client.allocs, 1, "the pair's struct and state");
    cr_assert(inside(&ring, gpumem_swctl_ram(ctl)) && inside(&ring, qp->sq) && inside(&ring, qp->cq) &&
                  inside(&ring, qp->sq_doorbell) && inside(&ring, qp->cq_doorbell) && inside(&ring, qp->signals) &&
                  inside(&ring, qp->prp_lists) && inside(&ring, qp->doorbell_event),
              "what the controller touches is ring memory");
    cr_assert(inside(&client, qp) && inside(&client, qp->slots) && inside(&client, qp->cids) &&
                  inside(&client, qp->cid_mail) && !inside(&ring, qp) && !inside(&ring, qp->cids),
              "what only clients touch is client memory");
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    fill_block(w, 7, 1);
    cr_assert_eq(gpumem_nvme_qp_write(qp, 7, 1, (uintptr_t)w, 0, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_read(qp, 7, 1, (uintptr_t)r, 0, NULL), GPUMEM_OK);
    cr_assert(block_ok(r, 7, 1));
    stop_and_check_clean(ctl, 2, NULL);
    gpumem_swctl_destroy(ctl);
    cr_assert_eq(ring.frees, 4, "each freed through its callback");
    cr_assert_eq(client.frees, 1);

    /* Without client callbacks, client memory comes from alloc as well. */
    memset(&ring, 0, sizeof ring);
    c.mem.client_alloc = NULL;
    c.mem.client_free = NULL;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
    cr_assert_eq(ring.allocs, 5);
    cr_assert(inside(&ring, qp) && inside(&ring, qp->cids));
    gpumem_swctl_destroy(ctl);
    cr_assert_eq(ring.frees, 5);
}

/* Client memory host code cannot touch (GPU memory): here a mapping that
 * is PROT_NONE except while client_copy copies through it or while the
 * test's own client calls run, so any direct access by add_qp, destroy or
 * the report would crash the test. The pair is built in host memory and
 * copied in; destroy's idle check and the report read copies. */
typedef struct guarded_client {
    void *block;
    size_t bytes;
    uint32_t copies;
    int fail;
} guarded_client;

static void *guarded_alloc(void *ctx, size_t n) {
    guarded_client *g = (guarded_client *)ctx;
    void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    g->block = p, g->bytes = n;
    return p;
}
static void guarded_free(void *ctx, void *p) { munmap(p, ((guarded_client *)ctx)->bytes); }
static void guard(guarded_client *g, int open) {
    cr_assert_eq(mprotect(g->block, g->bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE), 0);
}
static int guarded_copy(void *ctx, void *dst, const void *src, size_t n) {
    guarded_client *g = (guarded_client *)ctx;
    if (g->fail) return -1;
    g->copies++;
    guard(g, 1);
    memcpy(dst, src, n);
    guard(g, 0);
    return 0;
}

Test(nvme_ctl, client_memory_host_code_cannot_touch) {
    guarded_client g;
    gpumem_swctl_config c = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp *qp;
    gpumem_nvme_req req;
    unsigned char w[LBA] __attribute__((aligned(LBA))), r[LBA] __attribute__((aligned(LBA)));
    char *text = malloc(1 << 16);
    cr_assert(text);
    memset(&g, 0, sizeof g);
    c.n_blocks = 64;
    c.mem.client_alloc = guarded_alloc;
    c.mem.client_free = guarded_free;
    c.mem.client_copy = guarded_copy;
    c.mem.client_ctx = &g;
    cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_OK);
    g.fail = 1;
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_ESYS, "a failed copy fails the pair");
    g.fail = 0;
    cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
    cr_assert_eq(g.copies, 1, "built in host memory, copied in once");
    cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
    guard(&g, 1); /* the clients' turn */
    fill_block(w, 9, 2);
    cr_assert_eq(gpumem_nvme_qp_write_buf(qp, 9, 1, w, NULL), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 9, 1, r, NULL), GPUMEM_OK);
    cr_assert(block_ok(r, 9, 2), "the pair built elsewhere works");
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 9, 1, r, &req), GPUMEM_OK); /* not polled */
    guard(&g, 0);
    gpumem__host_sleep_ns(20000000L); /* the controller answers; nobody collects */
    cr_assert_eq(gpumem_swctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_EBUSY, "the held ID is seen through a copy");
    gpumem_swctl_report(ctl, text, 1 << 16);
    cr_assert(strstr(text, "(1 in all)"), "the report reads a copy: %s", text);
    g.fail = 1;
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_ESYS, "a copy that fails: no verdict, nothing freed");
    g.fail = 0;
    guard(&g, 1);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_OK);
    cr_assert(block_ok(r, 9, 2));
    guard(&g, 0);
    cr_assert_eq(gpumem_swctl_destroy(ctl), GPUMEM_OK);
    cr_assert_eq(g.copies, 4, "add_qp, the report and both destroys that got an answer went through the copy");
    free(text);
}

/* ---- doorbells nobody notifies (GPU clients) -------------------------------- */

/* Clients that cannot wake the controller, as GPU threads cannot (their
 * notify is a no-op): here host threads whose pair has no doorbell event.
 * Under every idle setting - park at once, spin then park, never park, and
 * parking allowed but the pair set polled - the controller still hears every
 * doorbell (it looks at the doorbell words between parks, or never parks):
 * 4 threads each write and read back 100 blocks, checked by content, and
 * the controller completes exactly those commands. No timing is asserted
 * (bench-doorbell measures it). */
typedef struct silent_client {
    gpumem_nvme_qp *qp;
    uint32_t id, bad;
} silent_client;

static void *silent_client_main(void *p) {
    silent_client *c = (silent_client *)p;
    unsigned char buf[LBA] __attribute__((aligned(LBA)));
    uint32_t k;
    for (k = 0; k < 100; k++) {
        uint64_t lba = c->id * 100u + k;
        fill_block(buf, lba, 3);
        if (gpumem_nvme_qp_write_buf(c->qp, lba, 1, buf, NULL) != GPUMEM_OK) c->bad++;
        memset(buf, 0, sizeof buf);
        if (gpumem_nvme_qp_read_buf(c->qp, lba, 1, buf, NULL) != GPUMEM_OK || !block_ok(buf, lba, 3)) c->bad++;
    }
    return NULL;
}

Test(nvme_ctl, doorbells_heard_without_wakeups) {
    static const struct {
        uint64_t spin, park;
        int polled;
    } settings[] = {{GPUMEM_SWCTL_NO_SPIN, 1000000, 0}, {GPUMEM_SWCTL_NO_SPIN, 20000, 0}, {0, 1000000, 0},
                   {GPUMEM_SWCTL_NEVER_PARK, 1000000, 0},
                   {GPUMEM_SWCTL_NO_SPIN, 1000000, 1}};
    uint32_t k, i;
    for (k = 0; k < sizeof settings / sizeof *settings; k++) {
        gpumem_swctl_config c = gpumem_swctl_config_default();
        gpumem_swctl *ctl, *other;
        gpumem_nvme_qp *qp, *foreign;
        silent_client cl[4];
        pthread_t th[4];
        c.idle_spin_ns = settings[k].spin;
        c.park_ns = settings[k].park;
        ctl = make_ctl(400, &c);
        cr_assert_eq(gpumem_swctl_add_qp(ctl, 16, &qp), GPUMEM_OK);
        qp->doorbell_event = NULL; /* the clients ring doorbells and wake nobody */
        if (settings[k].polled) cr_assert_eq(gpumem_swctl_set_polled(ctl, qp, 1), GPUMEM_OK);
        cr_assert_eq(gpumem_swctl_start(ctl), GPUMEM_OK);
        for (i = 0; i < 4; i++) {
            cl[i].qp = qp, cl[i].id = i, cl[i].bad = 0;
            cr_assert_eq(pthread_create(&th[i], NULL, silent_client_main, &cl[i]), 0);
        }
        for (i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            cr_assert_eq(cl[i].bad, 0, "setting %u, client %u: %u failed or wrong", k, i, cl[i].bad);
        }
        stop_and_check_clean(ctl, 800, NULL);
        cr_assert_gt(gpumem_swctl_cpu_ns(ctl), 0, "the controller thread's CPU time is read back");
        /* set_polled: only the controller's own pairs */
        other = make_ctl(8, NULL);
        cr_assert_eq(gpumem_swctl_add_qp(other, 4, &foreign), GPUMEM_OK);
        cr_assert_eq(gpumem_swctl_set_polled(ctl, foreign, 1), GPUMEM_EINVAL);
        cr_assert_eq(gpumem_swctl_set_polled(ctl, qp, 0), GPUMEM_OK);
        gpumem_swctl_destroy(other);
        gpumem_swctl_destroy(ctl);
    }
    {   /* the park bound is checked */
        gpumem_swctl_config c = gpumem_swctl_config_default();
        gpumem_swctl *ctl;
        c.park_ns = 999;
        cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL);
        c.park_ns = 1000000001ull;
        cr_assert_eq(gpumem_swctl_create(&c, &ctl), GPUMEM_EINVAL);
    }
}

/* ---- commands built from buffer pointers ---------------------------------- */

/* Every 512-byte offset within a page (CUDA's allocators return blocks at
 * 512, 1024, 1536, ... into a page), lengths from one block to several pages
 * and a 4 MiB transfer whose PRP list chains over three list pages. Each
 * write goes from a buffer at that offset, each read into another buffer at
 * that offset; the controller walks and validates every PRP (bad_prp must
 * stay 0), the namespace is checked byte for byte, and guard bytes around
 * each buffer must be untouched. */
#define BUF_MAX_BLOCKS 8192u /* 4 MiB of 512-byte blocks */
static const uint32_t buf_lengths[] = {512, 1024, 3584, 4096, 4608, 8192, 12288, 5 * 4096 + 512, 65536,
                                       1u << 20, BUF_MAX_BLOCKS * LBA};

static void fill_run(unsigned char *b, uint64_t len, uint32_t seed) {
    uint64_t i;
    for (i = 0; i < len; i++) b[i] = (unsigned char)((i * 2654435761u >> 7) ^ seed ^ (i >> 12));
}

Test(nvme_buf, every_512_byte_offset_and_length_through_prp_lists) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES, span = BUF_MAX_BLOCKS * LBA + 2 * pg;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl;
    unsigned char *src = aligned_alloc(pg, span), *dst = aligned_alloc(pg, span), *want = malloc(span);
    const unsigned char *ram;
    uint64_t commands = 0;
    uint32_t off, k, seed = 1;
    cr_assert(src && dst && want);
    cfg.max_blocks = BUF_MAX_BLOCKS;
    ctl = started_ctl(2 * BUF_MAX_BLOCKS, &cfg, 64, &qp);
    ram = gpumem_swctl_ram(ctl);
    cr_assert_eq(qp->prp_list_pages, 3, "a 4 MiB transfer at the worst offset needs 3 chained list pages");
    for (off = 0; off < pg; off += 512) {
        for (k = 0; k < sizeof buf_lengths / sizeof *buf_lengths; k++, seed++) {
            uint32_t len = buf_lengths[k], nlb = len / LBA;
            uint64_t slba = (seed * 37u) % (2 * BUF_MAX_BLOCKS - nlb + 1);
            fill_run(src + off, len, seed);
            memset(dst, 0xA5, span);
            cr_assert_eq(gpumem_nvme_qp_write_buf(qp, slba, nlb, src + off, NULL), GPUMEM_OK, "write off %u len %u",
                         off, len);
            cr_assert(memcmp(ram + slba * LBA, src + off, len) == 0, "namespace after write: off %u len %u", off,
                      len);
            cr_assert_eq(gpumem_nvme_qp_read_buf(qp, slba, nlb, dst + off, NULL), GPUMEM_OK, "read off %u len %u",
                         off, len);
            cr_assert(memcmp(dst + off, src + off, len) == 0, "read back: off %u len %u", off, len);
            memset(want, 0xA5, span);
            cr_assert(memcmp(dst, want, off) == 0 && memcmp(dst + off + len, want, span - off - len) == 0,
                      "bytes outside the buffer changed: off %u len %u", off, len);
            commands += 2;
        }
    }
    stop_and_check_clean(ctl, commands, NULL);
    gpumem_swctl_destroy(ctl);
    free(src);
    free(dst);
    free(want);
}

/* Many asynchronous buffer commands in flight at once, each with its own PRP
 * list: if two command IDs shared a list page, one command would carry the
 * other's pages and the content check would fail. */
Test(nvme_buf, asynchronous_commands_each_have_their_own_list) {
    enum { N = 48, NLB = 40 }; /* 20 KiB at offset 1536: 6 pages, a 5-entry list */
    const size_t pg = GPUMEM_NVME_PAGE_BYTES, each = NLB * LBA + 2 * pg;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl;
    gpumem_nvme_req req[N];
    unsigned char *src = aligned_alloc(pg, N * each), *dst = aligned_alloc(pg, N * each);
    uint32_t i, lap;
    cr_assert(src && dst);
    cfg.latency_ns = 200000; /* so that all N are outstanding together */
    ctl = started_ctl(N * NLB, &cfg, 64, &qp);
    for (lap = 0; lap < 2; lap++) {
        for (i = 0; i < N; i++) {
            unsigned char *b = (lap == 0 ? src : dst) + i * each + 1536;
            if (lap == 0) fill_run(b, NLB * LBA, 1000 + i);
            else memset(b, 0, NLB * LBA);
            cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, lap == 0 ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ,
                                                   (uint64_t)i * NLB, NLB, b, &req[i]),
                         GPUMEM_OK);
        }
        for (i = 0; i < N; i++) cr_assert_eq(gpumem_nvme_qp_wait(qp, &req[i]), GPUMEM_OK);
    }
    for (i = 0; i < N; i++)
        cr_assert(memcmp(src + i * each + 1536, dst + i * each + 1536, NLB * LBA) == 0, "request %u", i);
    stop_and_check_clean(ctl, 2 * N, NULL);
    gpumem_swctl_destroy(ctl);
    free(src);
    free(dst);
}

/* Buffers the rules forbid get a status, and nothing reaches the controller. */
Test(nvme_buf, forbidden_buffers_are_refused_before_submission) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_nvme_qp *qp, bare;
    gpumem_nvme_qp_desc d;
    gpumem_nvme_req req;
    gpumem_swctl *ctl;
    unsigned char *buf = aligned_alloc(pg, 64 * pg);
    cr_assert(buf);
    cfg.max_blocks = 64;
    ctl = started_ctl(1024, &cfg, 16, &qp);
    cr_assert_eq(gpumem_nvme_qp_write_buf(qp, 0, 1, buf + 2, NULL), GPUMEM_EALIGN, "not dword aligned");
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 0, 1, buf + 510, &req), GPUMEM_EALIGN);
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 0, 65, buf, NULL), GPUMEM_E2BIG, "more than MDTS");
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 1020, 8, buf, NULL), GPUMEM_ERANGE, "past the namespace");
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 0, 8, NULL, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_read_buf(NULL, 0, 8, buf, NULL), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvme_qp_write_buf(qp, 0, 1, buf + 4, NULL), GPUMEM_OK, "dword aligned is allowed");
    cr_assert(strstr(gpumem_status_str(GPUMEM_EALIGN), "4-byte (dword) aligned"), "the message names the rule");
    stop_and_check_clean(ctl, 1, NULL);
    gpumem_swctl_destroy(ctl);

    /* A pair without PRP-list pages carries up to two pages, no more. */
    d = bare_pair_desc(8, 1024, 64);
    cr_assert_eq(gpumem_nvme_qp_init(&bare, &d), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(&bare, GPUMEM_NVME_OP_READ, 0, 17, buf + 512, &req), GPUMEM_E2BIG,
                 "3 pages need a list the pair does not have");
    cr_assert_eq(*d.sq_doorbell, 0, "nothing was submitted");
    d.prp_lists = (uint64_t *)(buf + 512);
    cr_assert_eq(gpumem_nvme_qp_init(&bare, &d), GPUMEM_EALIGN, "list pages must be page aligned");
    free(buf);
}

/* ---- watchdog --------------------------------------------------------------- */

/* The child: blocking reads through a controller that drops its `drop`th
 * command (0: none), watched by a watchdog with a 300 ms stall bound. */
static void watched_reads(uint64_t drop) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_watchdog_config wc;
    gpumem_watchdog *wd;
    gpumem_nvme_qp *qp;
    gpumem_swctl *ctl;
    unsigned char *buf = aligned_alloc(4096, 4096);
    uint32_t i;
    cfg.drop_command = drop;
    ctl = started_ctl(64, &cfg, 16, &qp);
    wc = gpumem_swctl_watchdog_config(ctl, "ten reads", 300);
    wc.exit_code = 3;
    if (!buf || gpumem_watchdog_start(&wc, &wd) != GPUMEM_OK) _exit(10);
    for (i = 0; i < 10; i++) {
        gpumem_status st = gpumem_nvme_qp_read_buf(qp, i, 1, buf, NULL);
        /* The watchdog stopped the controller, which ends this wait: it
         * ends the process itself once it has printed the state. */
        if (st == GPUMEM_ENODEV)
            for (;;) pause();
        if (st != GPUMEM_OK) _exit(11);
    }
    if (gpumem_watchdog_finish(wd) != 0) _exit(12);
    gpumem_swctl_destroy(ctl);
    _exit(0);
}

/* Runs watched_reads in a child; returns its exit status, what it printed,
 * and how long it took. Kills it after 20 s (then the status is -1). */
static int run_watched(uint64_t drop, char *out, size_t n, double *seconds) {
    int fds[2], status = 0;
    size_t got = 0;
    pid_t pid;
    struct timespec t0, t1;
    cr_assert_eq(pipe(fds), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        watched_reads(drop);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    for (;;) {
        ssize_t k = read(fds[0], out + got, n - 1 - got);
        pid_t w;
        if (k > 0) got += (size_t)k;
        w = waitpid(pid, &status, WNOHANG);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (w == pid) break;
        if (t1.tv_sec - t0.tv_sec > 20) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            status = -1;
            break;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    for (ssize_t k; (k = read(fds[0], out + got, n - 1 - got)) > 0;) got += (size_t)k;
    out[got] = 0;
    close(fds[0]);
    *seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(watchdog, catches_a_dropped_command_and_exits_with_the_state) {
    static char out[1 << 20];
    double s;
    int code = run_watched(5, out, sizeof out, &s);
    cr_assert_eq(code, 3, "exit status %d; output:\n%s", code, out);
    cr_assert_lt(s, 15.0, "bounded: took %.1f s", s);
    cr_assert(strstr(out, "watchdog: ten reads: no progress for"), "says what stalled:\n%s", out);
    cr_assert(strstr(out, "pair 1 (depth 16"), "client side of the pair:\n%s", out);
    cr_assert(strstr(out, "ticket 5, tail 5"), "five commands were submitted:\n%s", out);
    cr_assert(strstr(out, "(1 in all)"), "one command ID outstanding:\n%s", out);
    cr_assert(strstr(out, "dropped 1"), "controller side:\n%s", out);
    cr_assert(strstr(out, "exiting with status 3"), "%s", out);
}

Test(watchdog, stays_quiet_while_progress_is_made) {
    static char out[1 << 16];
    double s;
    int code = run_watched(0, out, sizeof out, &s);
    cr_assert_eq(code, 0, "exit status %d; output:\n%s", code, out);
    cr_assert_null(strstr(out, "watchdog"), "%s", out);
}

/* The real-controller shim's open reports why it failed to the caller, not
 * only to the log: there is no handle left to ask. (Runs anywhere: it needs
 * no device; tests/qemu covers the rest.) */
Test(nvmectl, open_failure_reason_reaches_the_caller) {
    gpumem_nvmectl_config cfg = gpumem_nvmectl_config_default();
    gpumem_nvmectl *ctl = (gpumem_nvmectl *)1;
    char why[320];
    cfg.pci_addr = "0000:ff:1f.7"; /* no such device */
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    cr_assert_eq(gpumem_nvmectl_open(&cfg, &ctl), GPUMEM_ENODEV);
    cr_assert_null(ctl);
    cr_assert(strstr(why, "no such PCI device") != NULL, "reason: \"%s\"", why);
    cfg.max_pairs = 70000;
    cr_assert_eq(gpumem_nvmectl_open(&cfg, &ctl), GPUMEM_EINVAL);
    cr_assert(strstr(why, "max_pairs") != NULL, "reason: \"%s\"", why);
    cfg.max_pairs = 4;
    cfg.error_bytes = 8; /* truncated, still terminated */
    cr_assert_eq(gpumem_nvmectl_open(&cfg, &ctl), GPUMEM_ENODEV);
    cr_assert_eq(strlen(why), 7);
}

Test(nvmectl, buffers_without_a_controller_are_refused) {
    gpumem_nvmectl_dma d;
    uint64_t iova;
    char buf[64];
    cr_assert_eq(gpumem_nvmectl_dma_register(NULL, buf, sizeof buf, &d), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvmectl_iova(NULL, buf, sizeof buf, &iova), GPUMEM_ENULL);
    cr_assert_eq(gpumem_nvmectl_uses_vfio(NULL), 0);
}
