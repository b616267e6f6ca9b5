/* Criterion tests of gpumem_uring.h without an NVMe device: the command
 * translation (PRPs to iovecs, checks), the kernel-status mapping, the
 * checks on kernel completions (a fake CQ ring), and the whole forwarder
 * through io_uring on a regular file (IORING_OP_READV/WRITEV/FSYNC), with
 * every I/O counted and every block checked by content. /dev/ngXnY and
 * nvmet are tested in QEMU (make qemu-test, docs/uring.md). */
#define _GNU_SOURCE
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem_uring.h"
#include "block_content.h"
#include "uring_open.h"

#define PG GPUMEM_NVME_PAGE_BYTES
#define N_BLOCKS 4096u

static gpumem_nvme_ns test_ns(void) {
    gpumem_nvme_ns ns = {1, 9, N_BLOCKS, 256, 0};
    return ns;
}

/* ---- translation -------------------------------------------------------------- */

/* What a translation test translates with: the pair's list page (x's list
 * range, no translator), fresh stats, the test namespace, one command and
 * room for 20 iovecs. */
typedef struct xlate_rig {
    unsigned char *list;
    gpumem__uring_xlate x;
    gpumem_target_stats st;
    gpumem_nvme_ns ns;
    gpumem_nvme_cmd cmd;
    gpumem__uring_io io;
    struct iovec iov[20];
    int untr;
} xlate_rig;

static void xlate_rig_init(xlate_rig *t) {
    memset(t, 0, sizeof *t);
    t->list = aligned_alloc(PG, PG);
    t->x.ns = test_ns();
    t->x.list_lo = (uint64_t)(uintptr_t)t->list;
    t->x.list_hi = (uint64_t)(uintptr_t)t->list + PG;
    t->ns = test_ns();
}

/* gpumem__uring_translate of t's command into t's iovecs. */
static int translate(xlate_rig *t) {
    return gpumem__uring_translate(&t->x, &t->st, &t->cmd, &t->io, t->iov, 20, &t->untr);
}

Test(uring_translate, contiguous_buffer_is_one_iovec) {
    unsigned char *buf = aligned_alloc(PG, 16 * PG);
    xlate_rig t;
    uint64_t prp1, prp2;
    xlate_rig_init(&t);
    /* 40 blocks from a 512-byte offset: 6 pages, a PRP list of 5 entries */
    cr_assert_eq(gpumem_nvme_prp_setup((uint64_t)(uintptr_t)(buf + 512), 40 * 512, (uint64_t *)t.list,
                                       (uint64_t)(uintptr_t)t.list, 512, &prp1, &prp2), GPUMEM_OK);
    cr_assert_eq(gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_WRITE, &t.ns, 100, 40, prp1, prp2), GPUMEM_OK);
    cr_assert_eq(translate(&t), 0);
    cr_assert_eq(t.io.opcode, GPUMEM_NVME_OP_WRITE);
    cr_assert_eq(t.io.off, 100u * 512);
    cr_assert_eq(t.io.len, 40u * 512);
    cr_assert_eq(t.io.n_iov, 1, "adjacent pages join into one iovec, got %u", t.io.n_iov);
    cr_assert_eq(t.iov[0].iov_base, buf + 512);
    cr_assert_eq(t.iov[0].iov_len, 40u * 512);
    cr_assert_eq(t.st.writes, 1);
    free(buf);
    free(t.list);
}

Test(uring_translate, scattered_pages_are_iovecs_in_prp_order) {
    unsigned char *buf = aligned_alloc(PG, 8 * PG);
    xlate_rig t;
    uint64_t *l;
    int k;
    xlate_rig_init(&t);
    l = (uint64_t *)t.list;
    /* 4 pages, in the order 6 (from offset 1024), 4, 2, 0 of the buffer; the last one half */
    l[0] = (uint64_t)(uintptr_t)(buf + 4 * PG);
    l[1] = (uint64_t)(uintptr_t)(buf + 2 * PG);
    l[2] = (uint64_t)(uintptr_t)(buf + 0 * PG);
    cr_assert_eq(gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 26, /* 3072 + 4096 + 4096 + 2048 bytes */
                                    (uint64_t)(uintptr_t)(buf + 6 * PG + 1024), (uint64_t)(uintptr_t)t.list),
                 GPUMEM_OK);
    cr_assert_eq(translate(&t), 0);
    cr_assert_eq(t.io.n_iov, 4);
    cr_assert_eq(t.iov[0].iov_base, buf + 6 * PG + 1024);
    cr_assert_eq(t.iov[0].iov_len, PG - 1024);
    for (k = 1; k < 3; k++) {
        cr_assert_eq(t.iov[k].iov_base, buf + (6 - 2 * k) * PG, "iovec %d", k);
        cr_assert_eq(t.iov[k].iov_len, PG);
    }
    cr_assert_eq(t.iov[3].iov_base, buf);
    cr_assert_eq(t.iov[3].iov_len, PG / 2);
    cr_assert_eq(t.iov[0].iov_len + t.iov[1].iov_len + t.iov[2].iov_len + t.iov[3].iov_len, t.io.len);
    free(buf);
    free(t.list);
}

static int refuse_upper_half(void *ctx, uint64_t prp, uint64_t len, void **host) {
    uint64_t split = (uint64_t)(uintptr_t)ctx;
    if (prp + len > split) return -1;
    *host = (void *)(uintptr_t)prp;
    return 0;
}

/* The two findings of fuzz_uring_prp (issue 42), refused with a status
 * instead of a crash: PRP2 in the last page of the address space made the
 * "list in the pair's list pages" test wrap (PRP2 + the list's 16 bytes is
 * 0) and the walk read the list at PRP2 itself - SEGV; a data page at the
 * top of the address space, no translator, overflowed a pointer joining
 * iovecs (UBSan). Both are now untranslatable, nothing read. */
Test(uring_translate, addresses_at_the_top_of_memory_are_refused) {
    xlate_rig t;
    xlate_rig_init(&t); /* t.untr starts at 0 */
    /* 24 blocks of 512 B from PG: 3 pages, so PRP2 is a list pointer */
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 24, PG, 0xFFFFFFFFFFFFFFF0ull);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 1, "a list pointer the forwarder cannot read is untranslatable");
    /* one page, the last of the address space; then two, the second the last */
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 8, 0ull - PG, 0);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 1, "a segment ending at 2^64");
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 16, 0ull - 2 * PG, 0ull - PG);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 1, "the second segment ends at 2^64");
    cr_assert_eq(t.st.bad_prp, 0, "well-formed PRPs: not counted as bad");
    free(t.list);
}

Test(uring_translate, refusals_carry_a_status) {
    unsigned char *buf = aligned_alloc(PG, 16 * PG), *other = aligned_alloc(PG, PG);
    xlate_rig t;
    uint64_t prp1, prp2;
    xlate_rig_init(&t);
    /* a PRP list outside the pair's pages, no translator: never read */
    cr_assert_eq(gpumem_nvme_prp_setup((uint64_t)(uintptr_t)buf, 8 * PG, (uint64_t *)other,
                                       (uint64_t)(uintptr_t)other, 512, &prp1, &prp2), GPUMEM_OK);
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 64, prp1, prp2);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 1);
    /* a list that would run off its page (the walk would follow a chain) */
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 64, (uint64_t)(uintptr_t)buf,
                       (uint64_t)(uintptr_t)t.list + PG - 16);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 0);
    cr_assert_eq(t.st.bad_prp, 1);
    /* a misaligned PRP1 */
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 1, (uint64_t)(uintptr_t)buf + 2, 0);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.st.bad_prp, 2);
    /* a data page the translator refuses */
    t.x.translate = refuse_upper_half;
    t.x.translate_ctx = (void *)(uintptr_t)((uint64_t)(uintptr_t)buf + 8 * PG);
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 8, (uint64_t)(uintptr_t)buf + 7 * PG, 0);
    cr_assert_eq(translate(&t), 0, "inside: accepted");
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, 0, 16, (uint64_t)(uintptr_t)buf + 7 * PG,
                       (uint64_t)(uintptr_t)buf + 8 * PG);
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x13));
    cr_assert_eq(t.untr, 1);
    /* the core's checks: opcode, range, namespace; and a Flush */
    t.cmd.cdw0 = 0x09;
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x01));
    gpumem_nvme_cmd_rw(&t.cmd, GPUMEM_NVME_OP_READ, &t.ns, N_BLOCKS - 1, 1, (uint64_t)(uintptr_t)buf, 0);
    t.cmd.cdw12 = 1; /* two blocks: past the end */
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x80));
    t.cmd.nsid = 2;
    cr_assert_eq(translate(&t), GPUMEM_NVME_STATUS(0, 0x0B));
    gpumem_nvme_cmd_flush(&t.cmd, &t.ns);
    cr_assert_eq(translate(&t), 0);
    cr_assert_eq(t.io.len, 0);
    cr_assert_eq(t.io.n_iov, 0);
    free(buf);
    free(t.list);
    free(other);
}

Test(uring_translate, kernel_values_to_status) {
    int imp;
    cr_assert_eq(gpumem__uring_kernel_status(0, 1, 0, &imp), 0);
    cr_assert_eq(imp, 0);
    /* the target's status, DNR and all, passed on */
    cr_assert_eq(gpumem__uring_kernel_status(0x4281, 1, 0, &imp), 0x4281);
    cr_assert_eq(gpumem__uring_kernel_status(0x370, 1, 0, &imp), GPUMEM_NVME_STATUS(3, 0x70));
    /* values the kernel never gives: never success */
    cr_assert_eq(gpumem__uring_kernel_status(0x8000, 1, 0, &imp), GPUMEM_NVME_STATUS(0, 0x06));
    cr_assert_eq(imp, 1);
    cr_assert_eq(gpumem__uring_kernel_status(0x4000, 1, 0, &imp), GPUMEM_NVME_STATUS(0, 0x06), "DNR alone");
    cr_assert_eq(imp, 1);
    cr_assert_eq(gpumem__uring_kernel_status(-100000, 1, 0, &imp), GPUMEM_NVME_STATUS(0, 0x06));
    cr_assert_eq(imp, 1);
    /* errnos */
    cr_assert_eq(gpumem__uring_kernel_status(-EINTR, 1, 0, &imp), GPUMEM_NVME_STATUS(3, 0x71));
    cr_assert_eq(imp, 0);
    cr_assert_eq(gpumem__uring_kernel_status(-EINVAL, 1, 0, &imp), GPUMEM_NVME_STATUS(3, 0x70));
    cr_assert_eq(gpumem__uring_kernel_status(-ENOLINK, 1, 0, &imp), GPUMEM_NVME_STATUS(3, 0x70));
    cr_assert_eq(gpumem__uring_kernel_status(-EFAULT, 1, 0, &imp), GPUMEM_NVME_STATUS(0, 0x04));
    cr_assert_eq(gpumem__uring_kernel_status(-EACCES, 1, 0, &imp), GPUMEM_NVME_STATUS(2, 0x86));
    cr_assert_eq(gpumem__uring_kernel_status(-ENOMEM, 1, 0, &imp), GPUMEM_NVME_STATUS(0, 0x06));
    /* files: all bytes, or an error */
    cr_assert_eq(gpumem__uring_kernel_status(4096, 0, 4096, &imp), 0);
    cr_assert_eq(gpumem__uring_kernel_status(512, 0, 4096, &imp), GPUMEM_NVME_STATUS(0, 0x04));
    cr_assert_eq(gpumem__uring_kernel_status(8192, 0, 4096, &imp), GPUMEM_NVME_STATUS(0, 0x06));
    cr_assert_eq(imp, 1);
}

/* What the kernel returns while a remote namespace's path is gone reads
 * clearly: in-flight commands end -EINTR (aborted by host), new ones on the
 * multipath head -EINVAL, and with nvme_core.multipath=N the status 0x370
 * (both: host pathing error), as the NVMe base specification names them. */
Test(uring_translate, outage_statuses_read_clearly) {
    int imp;
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem__uring_kernel_status(-EINTR, 1, 0, &imp)),
                     "command aborted by host");
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem__uring_kernel_status(-EINVAL, 1, 0, &imp)),
                     "host pathing error");
    cr_assert_str_eq(gpumem_nvme_status_str(gpumem__uring_kernel_status(0x370, 1, 0, &imp)), "host pathing error");
    cr_assert_str_eq(gpumem_nvme_status_str(0x360), "controller pathing error");
    cr_assert_str_eq(gpumem_nvme_status_str(0x302), "asymmetric access inaccessible");
}

/* ---- the forwarder on a regular file ---------------------------------------------- */

static char file_path[64];

static int make_file(void) {
    int fd;
    uint32_t b;
    unsigned char blk[LBA];
    strcpy(file_path, "/tmp/gpumem_uring_XXXXXX");
    fd = mkstemp(file_path);
    cr_assert(fd >= 0);
    for (b = 0; b < N_BLOCKS; b++) {
        fill_block(blk, b, 0);
        cr_assert_eq(pwrite(fd, blk, LBA, (off_t)b * LBA), (ssize_t)LBA);
    }
    return fd;
}

/* A forwarder on the test file as cfg says, or the test skipped where
 * io_uring is off. */
static gpumem_uringctl *open_file_ctl_with(gpumem_uringctl_config cfg) {
    return uring_open_or_skip(cfg, file_path);
}

static gpumem_uringctl *open_file_ctl(uint32_t n_threads, uint32_t ring_entries) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    cfg.n_threads = n_threads;
    cfg.ring_entries = ring_entries;
    return open_file_ctl_with(cfg);
}

#define CLIENTS 4u
#define OPS 1500u
#define REGION (N_BLOCKS / 2 / CLIENTS) /* each client writes its own blocks in the upper half */
#define CLIENT_BYTES (40 * PG)

typedef struct client {
    gpumem_nvme_qp **pairs;
    uint32_t n_pairs, id;
    uint32_t *gen; /* N_BLOCKS generations, own region written by this client alone */
    unsigned char *buf; /* CLIENT_BYTES of data memory; NULL: its own aligned_alloc */
    uint64_t reads, writes, flushes, bad, errors;
    pthread_t th;
} client;

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *client_main(void *arg) {
    client *c = (client *)arg;
    unsigned char *buf = c->buf ? c->buf : aligned_alloc(PG, CLIENT_BYTES);
    uint64_t s = 0x9E3779B97F4A7C15ull * (c->id + 1);
    uint32_t op;
    for (op = 0; op < OPS; op++) {
        gpumem_nvme_qp *qp = c->pairs[(op + c->id) % c->n_pairs];
        uint32_t kind = (uint32_t)(rng(&s) % 10), nlb = 1 + (uint32_t)(rng(&s) % 64), k;
        size_t off = (size_t)(rng(&s) % 8) * 512; /* PRP lists from odd offsets */
        gpumem_nvme_cpl cpl;
        gpumem_status st;
        if (kind == 0) {
            st = gpumem_nvme_qp_flush(qp, &cpl);
            c->flushes += st == GPUMEM_OK;
            c->errors += st != GPUMEM_OK;
            continue;
        }
        if (kind <= 3) {
            uint64_t lba = N_BLOCKS / 2 + (uint64_t)c->id * REGION + rng(&s) % (REGION - nlb + 1);
            uint32_t g = c->gen[lba] + 1;
            for (k = 0; k < nlb; k++) fill_block(buf + off + (size_t)k * LBA, lba + k, g);
            st = gpumem_nvme_qp_write_buf(qp, lba, nlb, buf + off, &cpl);
            if (st == GPUMEM_OK) {
                for (k = 0; k < nlb; k++) c->gen[lba + k] = g;
                c->writes++;
            } else {
                c->errors++;
            }
            continue;
        }
        {
            uint64_t lba = rng(&s) % 2 ? rng(&s) % (N_BLOCKS / 2 - nlb + 1)
                                       : N_BLOCKS / 2 + (uint64_t)c->id * REGION + rng(&s) % (REGION - nlb + 1);
            memset(buf + off, 0xEE, (size_t)nlb * LBA);
            st = gpumem_nvme_qp_read_buf(qp, lba, nlb, buf + off, &cpl);
            if (st != GPUMEM_OK) {
                c->errors++;
                continue;
            }
            c->reads++;
            for (k = 0; k < nlb; k++)
                if (!block_ok(buf + off + (size_t)k * LBA, lba + k, c->gen[lba + k])) c->bad++;
        }
    }
    if (!c->buf) free(buf);
    return NULL;
}

/* CLIENTS threads on three pairs served by the forwarder that cfg
 * describes (2 threads, 256 entries unless it says otherwise); the first
 * n_in_region clients take their data memory from `region` (CLIENT_BYTES
 * each), the others from their own. Every read checked by content, the
 * file checked at the end; the forwarder's counts in *out. */
static void clients_on_file(gpumem_uringctl_config cfg, unsigned char *region, uint32_t n_in_region,
                            gpumem_uringctl_stats *out) {
    int fd = make_file();
    gpumem_uringctl *ctl = open_file_ctl_with(cfg);
    gpumem_nvme_qp *pairs[3];
    const uint32_t depths[3] = {2, 16, 256};
    uint32_t *gen = calloc(N_BLOCKS, sizeof *gen);
    client cs[CLIENTS];
    gpumem_uringctl_stats s;
    uint64_t ops = 0, flushes = 0;
    uint32_t i, b;
    unsigned char blk[LBA];
    cr_assert_eq(gpumem_uringctl_ns(ctl).n_blocks, N_BLOCKS);
    for (i = 0; i < 3; i++) cr_assert_eq(gpumem_uringctl_add_qp(ctl, depths[i], &pairs[i]), GPUMEM_OK);
    cr_assert_eq(gpumem_uringctl_start(ctl), GPUMEM_OK);
    for (i = 0; i < CLIENTS; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].pairs = pairs;
        cs[i].n_pairs = 3;
        cs[i].id = i;
        cs[i].gen = gen;
        cs[i].buf = i < n_in_region ? region + (size_t)i * CLIENT_BYTES : NULL;
        pthread_create(&cs[i].th, NULL, client_main, &cs[i]);
    }
    for (i = 0; i < CLIENTS; i++) {
        pthread_join(cs[i].th, NULL);
        cr_expect_eq(cs[i].bad, 0, "client %u: %llu blocks read wrong", i, (unsigned long long)cs[i].bad);
        cr_expect_eq(cs[i].errors, 0, "client %u: %llu commands failed", i, (unsigned long long)cs[i].errors);
        ops += cs[i].reads + cs[i].writes + cs[i].flushes;
        flushes += cs[i].flushes;
    }
    cr_assert_eq(ops, (uint64_t)CLIENTS * OPS);
    cr_assert_eq(gpumem_uringctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_uringctl_get_stats(ctl, &s), GPUMEM_OK);
    cr_assert_eq(s.sw.commands, ops, "posted %llu of %llu", (unsigned long long)s.sw.commands,
                 (unsigned long long)ops);
    cr_assert_eq(s.submitted, ops);
    cr_assert_eq(s.sw.flushes, flushes);
    cr_assert_eq(s.sw.violations, 0);
    cr_assert_eq(s.kernel_errors + s.bad_kernel_cqes + s.untranslatable, 0);
    cr_assert(s.enter_calls > 0 && s.enter_calls <= s.submitted);
    for (i = 0; i < 3; i++) cr_assert_eq(gpumem_nvme_qp_faults(pairs[i]), 0, "pair %u saw a bad completion", i);
    /* after the stop, the pairs refuse */
    {
        gpumem_nvme_cpl cpl;
        cr_assert_eq(gpumem_nvme_qp_read_buf(pairs[0], 0, 1, blk, &cpl), GPUMEM_ENODEV);
    }
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_OK);
    /* the file holds every write */
    for (b = 0; b < N_BLOCKS; b++) {
        cr_assert_eq(pread(fd, blk, LBA, (off_t)b * LBA), (ssize_t)LBA);
        cr_assert(block_ok(blk, b, gen[b]), "block %u in the file is not generation %u", b, gen[b]);
    }
    close(fd);
    unlink(file_path);
    free(gen);
    *out = s;
}

Test(uring_file, threads_on_pairs_through_io_uring) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl_stats s;
    cfg.n_threads = 2;
    clients_on_file(cfg, NULL, 0, &s);
    cr_assert_eq(s.fixed, 0, "no registered buffer, yet %llu fixed commands", (unsigned long long)s.fixed);
}

/* The registered buffer (issue 46): commands whose data lies in it go as
 * READ_FIXED / WRITE_FIXED (on an NVMe device: IORING_URING_CMD_FIXED),
 * the others as before, with the same content; two clients inside the
 * region, two outside. */
Test(uring_file, registered_buffer_carries_the_commands_inside_it) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl_stats s;
    size_t bytes = 2 * CLIENT_BYTES;
    unsigned char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(region != MAP_FAILED);
    cfg.n_threads = 2;
    cfg.fixed_base = region;
    cfg.fixed_bytes = bytes;
    clients_on_file(cfg, region, 2, &s);
    /* about half the reads and writes (flushes carry no data) */
    cr_assert(s.fixed > s.submitted / 4 && s.fixed < s.submitted, "%llu of %llu commands fixed",
              (unsigned long long)s.fixed, (unsigned long long)s.submitted);
    munmap(region, bytes);
}

/* SQPOLL (issue 46): the kernel's thread takes the submissions; the same
 * workload, with the registered buffer too, comes out the same. */
Test(uring_file, sqpoll_serves_the_same_workload) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl_stats s;
    size_t bytes = CLIENTS * CLIENT_BYTES;
    unsigned char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(region != MAP_FAILED);
    cfg.n_threads = 1;
    cfg.sqpoll_idle_ms = 5; /* it sleeps between the clients' bursts: the wake-up path runs too */
    cfg.fixed_base = region;
    cfg.fixed_bytes = bytes;
    clients_on_file(cfg, region, CLIENTS, &s);
    cr_assert(s.fixed > s.submitted / 2, "%llu of %llu commands fixed", (unsigned long long)s.fixed,
              (unsigned long long)s.submitted);
    munmap(region, bytes);
}

/* A registered buffer half given, too large, or wrapping: refused with a
 * message, before anything is opened. */
Test(uring_file, bad_registered_buffer_is_refused) {
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl *ctl = NULL;
    char why[256] = "";
    static unsigned char some[4096];
    cfg.path = "/nonexistent/gpumem";
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    cfg.fixed_base = some;
    cr_assert_eq(gpumem_uringctl_open(&cfg, &ctl), GPUMEM_EINVAL);
    cr_assert(strstr(why, "fixed_bytes"), "%s", why);
    cfg.fixed_bytes = (1ull << 30) + 4096;
    cr_assert_eq(gpumem_uringctl_open(&cfg, &ctl), GPUMEM_EINVAL);
    cfg.fixed_base = (void *)(UINTPTR_MAX - 4095);
    cfg.fixed_bytes = 8192;
    cr_assert_eq(gpumem_uringctl_open(&cfg, &ctl), GPUMEM_EINVAL);
    cfg.fixed_base = NULL;
    cr_assert_eq(gpumem_uringctl_open(&cfg, &ctl), GPUMEM_EINVAL);
    cr_assert_null(ctl);
}

/* One round of the forwarder by hand: fetch, submit, reap, post. */
static void serve_once(gpumem_uringctl *ctl) {
    int k;
    for (k = 0; k < 1000; k++) {
        gpumem__uring_round(ctl, &ctl->threads[0], 1);
        if (ctl->threads[0].in_kernel == 0) return;
        gpumem__uring_wait_cqe(&ctl->threads[0], 1000000);
    }
}

Test(uring_file, depth_busy_and_bad_completions) {
    int fd = make_file();
    gpumem_uringctl *ctl = open_file_ctl(1, 8);
    gpumem_nvme_qp *qp, *deep;
    gpumem_nvme_req req;
    gpumem__uring_thread *t;
    gpumem__uring_ring real, fake;
    unsigned char *buf = aligned_alloc(PG, 4 * PG), *cq;
    uint32_t fake_head = 0, fake_tail = 0, fake_mask = 7, s;
    uint64_t ud;
    int32_t res;
    /* deeper than the kernel ring: refused */
    cr_assert_eq(gpumem_uringctl_add_qp(ctl, 16, &deep), GPUMEM_EINVAL);
    /* why, in the forwarder's own buffer: open's (a local of open_file_ctl,
     * gone by now) is not kept (make asan saw it written after its scope) */
    cr_assert(strstr(gpumem_uringctl_error(ctl), "raise ring_entries"), "%s", gpumem_uringctl_error(ctl));
    cr_assert_eq(gpumem_uringctl_add_qp(ctl, 8, &qp), GPUMEM_OK);
    /* served by hand (not started): the pair is marked stopped; let it submit */
    gpumem_nvme_qp_signals_set_stopped(gpumem_target_pairs_queue(ctl->set, 0)->signals, 0);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 7, 8, buf, &req), GPUMEM_OK);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_EBUSY, "a request holds a command ID");
    serve_once(ctl);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_OK);
    cr_assert(block_ok(buf, 7, 0) && block_ok(buf + 7 * LBA, 14, 0));

    /* A fake CQ ring in place of the kernel's: completions that name no
     * command, an impossible value, a broken tail. */
    t = &ctl->threads[0];
    real = t->ring;
    cq = calloc(8, 32);
    fake = real;
    fake.cq_head = &fake_head;
    fake.cq_tail = &fake_tail;
    fake.cq_mask = &fake_mask;
    fake.cqes = cq;
    fake.cq_entries = 8;
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 0, 1, buf, &req), GPUMEM_OK);
    /* fetch and prepare on the real SQ without submitting: take the command by hand */
    gpumem_target_take_sq_doorbell(gpumem_target_pairs_queue(ctl->set, 0), &t->st.sw);
    gpumem__uring_fetch(ctl, t, 0);
    cr_assert_eq(t->in_kernel, 1);
    for (s = 0; s < t->n_slots && t->slots[s].state != GPUMEM__SLOT_KERNEL; s++) {}
    cr_assert(s < t->n_slots);
    t->ring = fake;
    /* 1: the right slot, the wrong generation; 2: no such slot; 3: the right one with 0x8000 */
    ud = ((uint64_t)(t->slots[s].gen + 1) << 32) | s;
    res = 512;
    memcpy(cq, &ud, 8), memcpy(cq + 8, &res, 4);
    ud = 1000;
    memcpy(cq + 32, &ud, 8), memcpy(cq + 40, &res, 4);
    fake_tail = 2;
    gpumem__uring_reap(ctl, t);
    cr_assert_eq(t->st.bad_kernel_cqes, 2);
    cr_assert_eq(t->in_kernel, 1, "nothing completed");
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_EAGAIN);
    fake_tail = 2 + 100; /* past the ring: none of it trusted */
    gpumem__uring_reap(ctl, t);
    cr_assert_eq(t->st.bad_kernel_cqes, 3);
    cr_assert_eq(t->in_kernel, 1);
    fake_tail = 2;
    ud = ((uint64_t)t->slots[s].gen << 32) | s;
    res = 4096; /* a file read of 512 bytes cannot move 4096 */
    memcpy(cq + 64, &ud, 8), memcpy(cq + 72, &res, 4);
    fake_tail = 3;
    gpumem__uring_reap(ctl, t);
    cr_assert_eq(t->in_kernel, 0);
    cr_assert_eq(t->st.bad_kernel_cqes, 4);
    gpumem__uring_post(ctl, t, 0);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_EIO);
    cr_assert_eq(gpumem_nvme_cpl_status(&req.cpl), GPUMEM_NVME_STATUS(0, 0x06), "status 0x%x",
                 gpumem_nvme_cpl_status(&req.cpl));
    /* the real SQE prepared above is still in the real ring: let the kernel
     * run it and drop its completion, so that the ring is clean */
    t->ring = real;
    gpumem__uring_submit(t);
    gpumem__uring_wait_cqe(t, 100000000);
    __atomic_store_n(real.cq_head, __atomic_load_n(real.cq_tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    cr_assert_eq(gpumem_nvme_qp_faults(qp), 0);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_OK);
    free(cq);
    free(buf);
    close(fd);
    unlink(file_path);
}

/* Complete one command on qp with the kernel value `res`, through a fake CQ
 * ring (as a passthrough forwarder: is_file off while reaping), and return
 * what its caller sees; the status posted in *sf. */
static gpumem_status complete_with(gpumem_uringctl *ctl, gpumem_nvme_qp *qp, int32_t res, uint16_t *sf) {
    gpumem__uring_thread *t = &ctl->threads[0];
    gpumem__uring_ring real = t->ring, fake = real;
    unsigned char cq[32], *buf = aligned_alloc(PG, PG);
    uint32_t head = 0, tail = 0, mask = 0, s;
    gpumem_nvme_req req;
    gpumem_status st;
    uint64_t ud;
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_WRITE, 3, 1, buf, &req), GPUMEM_OK);
    gpumem_target_take_sq_doorbell(gpumem_target_pairs_queue(ctl->set, 0), &t->st.sw);
    gpumem__uring_fetch(ctl, t, 0);
    cr_assert_eq(t->in_kernel, 1);
    for (s = 0; s < t->n_slots && t->slots[s].state != GPUMEM__SLOT_KERNEL; s++) {}
    ud = ((uint64_t)t->slots[s].gen << 32) | s;
    memcpy(cq, &ud, 8), memcpy(cq + 8, &res, 4);
    fake.cq_head = &head, fake.cq_tail = &tail, fake.cq_mask = &mask, fake.cqes = cq, fake.cq_entries = 1;
    t->ring = fake;
    tail = 1;
    ctl->is_file = 0;
    gpumem__uring_reap(ctl, t);
    ctl->is_file = 1;
    t->ring = real;
    cr_assert_eq(t->in_kernel, 0);
    gpumem__uring_post(ctl, t, 0);
    st = gpumem_nvme_qp_poll(qp, &req);
    *sf = gpumem_nvme_cpl_status(&req.cpl);
    /* the real SQE (a write of what the block held) runs; its completion is dropped */
    gpumem__uring_submit(t);
    gpumem__uring_wait_cqe(t, 100000000);
    __atomic_store_n(real.cq_head, __atomic_load_n(real.cq_tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    free(buf);
    return st;
}

/* The same three values end a caller's command with GPUMEM_EIO and the
 * status in its completion (never success, never a hang). */
Test(uring_file, outage_values_reach_the_caller) {
    int fd = make_file();
    gpumem_uringctl *ctl = open_file_ctl(1, 8);
    gpumem_nvme_qp *qp;
    uint16_t sf;
    cr_assert_eq(gpumem_uringctl_add_qp(ctl, 8, &qp), GPUMEM_OK);
    gpumem_nvme_qp_signals_set_stopped(gpumem_target_pairs_queue(ctl->set, 0)->signals, 0);
    cr_assert_eq(complete_with(ctl, qp, -EINTR, &sf), GPUMEM_EIO);
    cr_assert_eq(sf, GPUMEM_NVME_STATUS(3, 0x71), "-EINTR posted as 0x%x", sf);
    cr_assert_eq(complete_with(ctl, qp, -EINVAL, &sf), GPUMEM_EIO);
    cr_assert_eq(sf, GPUMEM_NVME_STATUS(3, 0x70), "-EINVAL posted as 0x%x", sf);
    cr_assert_eq(complete_with(ctl, qp, 0x370, &sf), GPUMEM_EIO);
    cr_assert_eq(sf, GPUMEM_NVME_STATUS(3, 0x70), "0x370 posted as 0x%x", sf);
    cr_assert_eq(complete_with(ctl, qp, 0, &sf), GPUMEM_OK);
    cr_assert_eq(ctl->threads[0].st.kernel_errors, 3);
    cr_assert_eq(gpumem_nvme_qp_faults(qp), 0);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_OK);
    close(fd);
    unlink(file_path);
}

/* Point the forwarder thread's registered file 0 at fd (a pipe: a read
 * waits in the kernel until bytes come, as a command a lost path holds). */
static void register_as_file0(gpumem_uringctl *ctl, int fd) {
    struct io_uring_files_update up;
    memset(&up, 0, sizeof up);
    up.offset = 0;
    up.fds = (uint64_t)(uintptr_t)&fd;
    cr_assert_eq(syscall(__NR_io_uring_register, ctl->threads[0].ring.fd, IORING_REGISTER_FILES_UPDATE, &up, 1), 1,
                 "IORING_REGISTER_FILES_UPDATE: %s", strerror(errno));
}

/* The kernel holds commands past the pairs' cmd_timeout_ms (reads of an
 * empty pipe): the callers get GPUMEM_ETIMEDOUT; when the kernel ends them
 * the data arrives and the late completions free their IDs; stop returns
 * without waiting for a command past its deadline, destroy refuses while the
 * kernel holds one, a start reaps it, and new commands work. Without the
 * forwarder's deadline, stop waits for the kernel forever (the test's
 * timeout fails it). */
Test(uring_file, kernel_holds_commands_past_the_deadline, .timeout = 60) {
    int fd = make_file(), pipefd[2];
    gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
    gpumem_uringctl *ctl = NULL;
    gpumem_nvme_qp *qp;
    gpumem_nvme_req req, req3;
    gpumem_nvme_cpl cpl;
    gpumem_uringctl_stats s;
    gpumem_nvme_qp_stats qc;
    unsigned char *a = aligned_alloc(PG, PG), *b = aligned_alloc(PG, PG), *c = aligned_alloc(PG, PG);
    unsigned char *d = aligned_alloc(PG, PG), data[2 * LBA];
    char why[256] = "";
    int k;
    cfg.path = file_path;
    cfg.ring_entries = 8;
    cfg.cmd_timeout_ms = 50;
    cfg.error = why;
    cfg.error_bytes = sizeof why;
    if (gpumem_uringctl_open(&cfg, &ctl) == GPUMEM_ESYS && strstr(why, "io_uring")) {
        unlink(file_path);
        cr_skip_test("io_uring is not available here: %s", why);
    }
    cr_assert(ctl, "open: %s", why);
    cr_assert_eq(pipe(pipefd), 0);
    cr_assert_eq(gpumem_uringctl_add_qp(ctl, 8, &qp), GPUMEM_OK);
    register_as_file0(ctl, pipefd[0]);
    cr_assert_eq(gpumem_uringctl_start(ctl), GPUMEM_OK);
    /* 1. blocking and asynchronous: both end, timed out, IDs reserved */
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 0, 1, a, &cpl), GPUMEM_ETIMEDOUT);
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 0, 1, b, &req), GPUMEM_OK);
    while (gpumem_nvme_qp_poll(qp, &req) == GPUMEM_EAGAIN) usleep(1000);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req), GPUMEM_ETIMEDOUT);
    cr_assert(gpumem_nvme_req_busy(qp, &req), "the kernel may still write b");
    /* the kernel ends both (bytes in the pipe); a caller's flush harvests the
     * late completions (fsync of a pipe fails at once: EIO) */
    memset(data, 0x5A, sizeof data);
    cr_assert_eq(write(pipefd[1], data, sizeof data), (ssize_t)sizeof data);
    for (k = 0; k < 10000 && gpumem_nvme_req_busy(qp, &req); k++) {
        gpumem_nvme_cpl none;
        cr_assert_eq(gpumem_nvme_qp_flush(qp, &none), GPUMEM_EIO);
        usleep(1000);
    }
    cr_assert(!gpumem_nvme_req_busy(qp, &req), "the late completion freed the ID");
    cr_assert(b[0] == 0x5A && b[LBA - 1] == 0x5A && a[0] == 0x5A, "the late reads moved their data");
    /* 2. one more held by the kernel when the forwarder stops */
    cr_assert_eq(gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, 0, 1, c, &req3), GPUMEM_OK);
    while (gpumem_nvme_qp_poll(qp, &req3) == GPUMEM_EAGAIN) usleep(1000);
    cr_assert_eq(gpumem_nvme_qp_poll(qp, &req3), GPUMEM_ETIMEDOUT);
    cr_assert_eq(gpumem_uringctl_stop(ctl), GPUMEM_OK); /* returns: the command is past its deadline */
    cr_assert_eq(gpumem_uringctl_get_stats(ctl, &s), GPUMEM_OK);
    cr_assert(s.overdue >= 1 && s.overdue <= 3, "overdue %llu", (unsigned long long)s.overdue); /* the callers time out first: the forwarder may not have looked yet */
    cr_assert_eq(s.left_in_kernel, 1);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_EBUSY, "the kernel holds a command");
    /* the kernel ends it while the forwarder is stopped (its submitter
     * thread has exited: the read ends with the data, or -ECANCELED where
     * Linux cancels it; either is a completion); a start reaps it and posts
     * it late */
    cr_assert_eq(write(pipefd[1], data, LBA), (ssize_t)LBA);
    register_as_file0(ctl, fd);
    cr_assert_eq(gpumem_uringctl_start(ctl), GPUMEM_OK);
    for (k = 0; k < 10000 && gpumem_nvme_req_busy(qp, &req3); k++) {
        cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 1, 1, d, &cpl), GPUMEM_OK); /* harvests */
        usleep(1000);
    }
    cr_assert(!gpumem_nvme_req_busy(qp, &req3), "the late completion freed the ID");
    /* new commands work */
    cr_assert_eq(gpumem_nvme_qp_read_buf(qp, 9, 1, d, &cpl), GPUMEM_OK);
    cr_assert(block_ok(d, 9, 0));
    cr_assert_eq(gpumem_uringctl_stop(ctl), GPUMEM_OK);
    cr_assert_eq(gpumem_uringctl_get_stats(ctl, &s), GPUMEM_OK);
    cr_assert_eq(s.late, s.overdue, "every overdue command ended late");
    cr_assert_eq(s.left_in_kernel, 0);
    cr_assert_eq(gpumem_nvme_qp_get_stats(qp, &qc), GPUMEM_OK);
    cr_assert_eq(qc.late, 3, "the pair counted %u late completions", qc.late);
    cr_assert_eq(qc.timed_out, 3);
    cr_assert_eq(gpumem_nvme_qp_faults(qp) & ~GPUMEM_NVME_FAULT_TIMEOUT, 0);
    cr_assert_eq(gpumem_uringctl_destroy(ctl), GPUMEM_OK);
    close(pipefd[0]);
    close(pipefd[1]);
    free(a), free(b), free(c), free(d);
    close(fd);
    unlink(file_path);
}
