/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_uring.h - a third kind of controller for gpumem's queue pairs: host
 * threads that forward each pair's commands to an NVMe namespace the Linux
 * kernel keeps owning, through io_uring NVMe passthrough
 * (IORING_OP_URING_CMD, NVME_URING_CMD_IO on the generic device /dev/ngXnY).
 * The namespace may be a local SSD (no vfio-pci, no IOMMU setup, a
 * filesystem may sit on its other namespaces) or a remote one that the
 * kernel's NVMe-oF initiator (nvme-tcp, nvme-rdma) made local. Linux only,
 * optional: programs that do not include it need nothing of it.
 *
 * USAGE (host threads; the device's namespace stays with the kernel's nvme
 * driver; read+write access to /dev/ngXnY, and root on kernels before 6.2)
 *
 *   #define _GNU_SOURCE                     // or _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION           // in exactly one .c file
 *   #include <stdio.h>
 *   #include "gpumem_uring.h"               // includes gpumem_target.h, gpumem_nvme.h
 *
 *   // given: uint64_t slba, uint32_t *buf
 *   gpumem_uringctl_config cfg = gpumem_uringctl_config_default();
 *   cfg.path = "/dev/ng0n1";                // or a remote namespace nvme-tcp connected
 *   cfg.n_threads = 1;                      // forwarder threads; pairs spread over them
 *   cfg.cmd_timeout_ms = 5000;              // the pairs' command timeout (0: 30 s)
 *   char why[256];
 *   cfg.error = why;
 *   cfg.error_bytes = sizeof why;
 *   gpumem_uringctl *ctl;
 *   gpumem_status st = gpumem_uringctl_open(&cfg, &ctl);  // Identify: LBA size, capacity, MDTS
 *   if (st != GPUMEM_OK) return puts(why), st;
 *   gpumem_nvme_ns ns = gpumem_uringctl_ns(ctl);
 *   gpumem_nvme_qp *qp;
 *   gpumem_uringctl_add_qp(ctl, 256, &qp);  // depth - 1 <= cfg.ring_entries
 *   gpumem_uringctl_start(ctl);
 *
 *   // any number of threads use qp as any pair (USAGE in gpumem_nvme.h);
 *   // buf is an address of this process: malloc'd or mmap'd memory, pinned
 *   // host memory (cudaHostAlloc), mapped pinned memory GPU threads use.
 *   // GPU memory (cudaMalloc) has no CPU mapping: "data transfer error".
 *   gpumem_nvme_cpl cpl;
 *   st = gpumem_nvme_qp_read_buf(qp, slba, 8, buf, &cpl);
 *   if (st == GPUMEM_EIO) puts(gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)));
 *   // GPUMEM_ETIMEDOUT: the kernel held it past cmd_timeout_ms (its ID
 *   // and buf stay reserved until the kernel ends it: gpumem_nvme_req_busy)
 *
 *   gpumem_uringctl_stop(ctl);              // waiters get GPUMEM_ENODEV
 *   gpumem_uringctl_stats s;
 *   gpumem_uringctl_get_stats(ctl, &s);
 *   st = gpumem_uringctl_destroy(ctl);      // GPUMEM_EBUSY while a command is out
 *
 * cfg.path may also name a regular file: the same forwarder then reads and
 * writes it with IORING_OP_READV/WRITEV/FSYNC (cfg.lba_bytes, capacity from
 * the file size). That is how the test suite runs it without an NVMe device.
 *
 * HOW IT WORKS
 *
 * The pairs and their memory are a host pair set of gpumem_target.h, as
 * the software controller's are, so rings, doorbells, signals, PRP-list
 * pages and the idle check are the same code; what the forwarder knows of a
 * pair (its PRP-list pages, its command timeout) it asks the set, never the
 * pair's client memory. Each forwarder thread serves pairs i with
 * i % n_threads == its index, through the controller core of
 * gpumem_target.h (gpumem_target_*): take the
 * doorbells (bad values counted, never followed), fetch in order, check
 * opcode, namespace, LBA range and MDTS, track command IDs. A checked
 * command's PRPs are walked (gpumem_target_prp_walk) and translated into the
 * user addresses the kernel maps (cfg.translate; by default a PRP is an
 * address of this process, which is what the pair builds from a buffer
 * pointer), adjacent segments joined into iovecs: one iovec goes as
 * NVME_URING_CMD_IO, several as NVME_URING_CMD_IO_VEC. A PRP list must lie
 * in the pair's own PRP-list pages (or be accepted by cfg.translate) and fit
 * one page: the forwarder reads it, and reads nothing a client could point
 * elsewhere. Commands go to the kernel in batches, one io_uring_enter per
 * round, on a registered file. Each kernel completion is checked (it must
 * name a command in flight, by slot and generation; its value must be an
 * NVMe status or an errno) and posted to the pair's CQ by the core
 * (gpumem_target_post: status, command ID, SQ head, SQ ID, phase), never
 * into a full CQ: completions wait in the forwarder until the CQ has room.
 *
 * Idle: the idle step of gpumem_target.h, as gpumem_swctl's: after
 * idle_spin_ns without work, a thread with commands in the kernel waits in
 * io_uring_enter for a completion at most park_ns; one with none parks on
 * the pairs' doorbell event at most park_ns. A doorbell nobody notifies (GPU
 * threads) is therefore seen within park_ns; GPUMEM_TARGET_NEVER_PARK or a
 * polled pair makes it poll always.
 *
 * Status of kernel failures. res > 0 is the NVMe status field the target
 * returned (passed on; one that reads as success, or has bits above the
 * field, becomes "internal error"). Errors from the kernel itself:
 *   -EINTR, -ECANCELED (the path went away with the command out: nvme-tcp
 *   ends in-flight commands so, a few ms after the target's port goes)
 *                          -> SCT 3 / SC 0x71, command aborted by host
 *   -EINVAL (a new command on the multipath head node while no path is
 *   live: Debian's default, CONFIG_NVME_MULTIPATH=y), -ENOLINK, -ENODEV,
 *   -ENXIO, -ETIMEDOUT, -EHOSTDOWN, -ECONNRESET, -EAGAIN
 *                          -> SCT 3 / SC 0x70, host pathing error
 *   (with nvme_core.multipath=N the kernel itself completes new commands
 *   with the NVMe status 0x370, host pathing error: passed on as it is)
 *   -EFAULT (a buffer the kernel cannot map)  -> 0 / 0x04, data transfer error
 *   -EACCES, -EPERM        -> 2 / 0x86, access denied (logged once, below)
 *   anything else          -> 0 / 0x06, internal error
 * (SCT 3 codes as the NVMe 2.0 base specification and Linux number them.)
 *
 * Permissions. I/O needs read+write access to /dev/ngXnY. Kernels before
 * 6.2 also require CAP_SYS_ADMIN for every passthrough command (6.1 gives
 * uid 1000 with the device at 0666 -EACCES); from 6.2 on, write access is
 * enough for I/O. The Identify at open is an admin command: kernels that
 * refuse it unprivileged make open fail, saying CAP_SYS_ADMIN. Run as root
 * on 6.1 (Debian 12).
 *
 * Deadline (cmd_timeout_ms, the pairs' command timeout). The kernel ends
 * every command in its own time, and 6.1 cannot cancel one; a
 * passthrough's own timeout_ms fires late on nvme-tcp and resets the whole
 * controller, so none is set. The caller of a command the kernel holds
 * longer gets GPUMEM_ETIMEDOUT from the pair; its ID stays reserved until
 * the kernel ends it, and that late completion is posted (the pair frees
 * the ID, counts it late). The forwarder counts such commands overdue, and
 * its stop waits for the kernel no longer than each command's deadline.
 *
 * Registered buffer and SQPOLL (cfg.fixed_base, cfg.sqpoll_idle_ms): both
 * optional, off by default; what they gave in QEMU is in docs/uring.md.
 *
 * Not done (see docs/uring.md): queue reset (gpumem_swctl_reset_*), GPU
 * client memory.
 *
 * Needs POSIX threads (-pthread) and <linux/io_uring.h>, <linux/nvme_ioctl.h>
 * from kernel headers 5.19 or later (SQE128/CQE32); no liburing.
 */
#ifndef GPUMEM_URING_H
#define GPUMEM_URING_H

/* The controller core (doorbells, fetch, checks, PRP walk, posting), the
 * pair set that holds the pairs, the idle step; includes gpumem_nvme.h. */
#include "gpumem_target.h"

#if !defined(GPUMEM_NO_HOST_SHIM)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumem_uringctl gpumem_uringctl;

/* Zero means default in every field but path (docs/headers.md);
 * gpumem_uringctl_config_resolved shows the values a config stands for. */
typedef struct gpumem_uringctl_config {
    const char *path;       /* /dev/ngXnY, or a regular file (io_uring reads and writes) */
    uint32_t n_threads;     /* forwarder threads, 1..64; pair i served by thread i % n_threads; default 1 */
    uint32_t ring_entries;  /* per thread: commands held in the kernel at once, power of two 8..4096;
                               default 256. A pair deeper than ring_entries + 1 is refused. */
    uint32_t max_blocks;    /* largest command in blocks (default 256), lowered to the kernel's MDTS */
    uint32_t lba_bytes;     /* regular file only: 512 (default) .. 65536, a power of two */
    uint64_t idle_spin_ns;  /* poll this long after work (gpumem_target_idle; 0: 50 us; GPUMEM_TARGET_NEVER_PARK:
                               always; GPUMEM_TARGET_NO_SPIN: never) ... */
    uint64_t park_ns;       /* ... then wait at most this long at a time (1 us .. 1 s; 0: 1 ms) */
    /* The pairs' command timeout, and the forwarder's own deadline: 0 the
     * default (30 s, as Linux), GPUMEM_NVME_CMD_TIMEOUT_NEVER none. A caller
     * whose command the kernel holds longer gets GPUMEM_ETIMEDOUT (the
     * pair's rule); the forwarder counts it overdue, and stop waits for the
     * kernel no longer than this past a command's submission. */
    uint32_t cmd_timeout_ms;
    /* PRP to host address: 0 and *host set, or -1 for memory this process
     * cannot hand to the kernel (the command completes "PRP offset invalid",
     * counted in untranslatable). Called for each data segment and for PRP
     * list pages outside the pair's own. NULL: a PRP is an address of this
     * process, and PRP lists must be the pair's own pages. */
    int (*translate)(void *ctx, uint64_t prp, uint64_t len, void **host);
    void *translate_ctx;
    /* Registered buffer (IORING_REGISTER_BUFFERS): the clients' data
     * memory as one region, [fixed_base, fixed_base + fixed_bytes), which
     * the kernel pins and maps once at open instead of at every command. A
     * command whose data is one segment inside it goes as a fixed-buffer
     * command (IORING_URING_CMD_FIXED; READ_FIXED/WRITE_FIXED on a file),
     * others as before (counted in stats.fixed). NULL: none. At most 1 GiB
     * (the kernel's limit); it counts against RLIMIT_MEMLOCK without
     * CAP_IPC_LOCK. The memory must stay mapped until destroy. */
    void *fixed_base;
    size_t fixed_bytes;
    /* SQPOLL: a kernel thread per forwarder thread takes each round's
     * submissions from the ring, so that a round needs no io_uring_enter
     * while that thread is awake; it sleeps after sqpoll_idle_ms without
     * work (then one io_uring_enter wakes it). 0: off. It is one more
     * busy thread: on a machine with few cores it costs more than it saves
     * (docs/uring.md, Benchmark). */
    uint32_t sqpoll_idle_ms;
    char *error;            /* if set: why open failed, in words (not kept past open: later
                               failures, add_qp's, are in gpumem_uringctl_error) */
    size_t error_bytes;
} gpumem_uringctl_config;

typedef struct gpumem_uringctl_stats {
    gpumem_target_stats sw;  /* the core's counts: commands posted, reads, writes, flushes, violations */
    uint64_t submitted;       /* commands handed to the kernel */
    uint64_t enter_calls;     /* io_uring_enter calls that submitted or woke the SQPOLL thread */
    uint64_t fixed;           /* commands sent with the registered buffer (cfg.fixed_base) */
    uint64_t kernel_errors;   /* commands the kernel (or the target) failed */
    uint64_t untranslatable;  /* commands whose PRPs named memory the forwarder cannot hand over */
    uint64_t bad_kernel_cqes; /* completions naming no command in flight, or a broken CQ ring */
    uint64_t overdue;         /* commands the kernel held past cmd_timeout_ms (their callers timed out) */
    uint64_t late;            /* overdue commands the kernel ended later (posted: the pair frees the ID) */
    uint64_t left_in_kernel;  /* at the last stop: overdue commands still in the kernel (reaped after a start) */
} gpumem_uringctl_stats;

/* A zeroed config resolved (path NULL: set it). */
gpumem_uringctl_config gpumem_uringctl_config_default(void);
/* The config with its defaults filled in: what gpumem_uringctl_open uses (NULL: the zeroed config). */
gpumem_uringctl_config gpumem_uringctl_config_resolved(const gpumem_uringctl_config *in);
/* Open the namespace and set up one io_uring per thread (SQE128, CQE32).
 * GPUMEM_ENODEV: path absent, or neither an NVMe generic device nor a
 * regular file, or a namespace it cannot serve; GPUMEM_ESYS: a system call
 * refused (no access, io_uring missing or disabled, kernel too old);
 * GPUMEM_EIO: Identify failed. Why, in words: cfg.error and GPUMEM_LOG. */
gpumem_status gpumem_uringctl_open(const gpumem_uringctl_config *cfg, gpumem_uringctl **out);
/* The namespace the pairs address (nsid 1 for the pairs; forwarded under
 * the kernel's namespace ID). All zero for ctl NULL. */
gpumem_nvme_ns gpumem_uringctl_ns(const gpumem_uringctl *ctl);
/* The kernel's namespace ID of the device (1 for a file). */
uint32_t gpumem_uringctl_kernel_nsid(const gpumem_uringctl *ctl);
/* The last failure after open (add_qp's), in words; "" if none or ctl NULL. */
const char *gpumem_uringctl_error(const gpumem_uringctl *ctl);
/* Add a pair (only while stopped): depth 2..ring_entries+1, max(depth, 1024) command IDs. */
gpumem_status gpumem_uringctl_add_qp(gpumem_uringctl *ctl, uint32_t depth, gpumem_nvme_qp **out);
/* A pair whose clients cannot wake the forwarder (GPU threads): never park. */
gpumem_status gpumem_uringctl_set_polled(gpumem_uringctl *ctl, const gpumem_nvme_qp *qp, int polled);
gpumem_status gpumem_uringctl_start(gpumem_uringctl *ctl);
/* Stop: no new command is fetched; commands the kernel holds are waited for
 * until each one's deadline (submission + cmd_timeout_ms) at most, whatever
 * the kernel does; the finished ones are posted where their CQ has room, the
 * rest after a restart; then every waiter in a pair returns GPUMEM_ENODEV,
 * as do new calls, until the next start. A command still in the kernel keeps
 * its ID and its forwarder slot; a later start reaps and posts it (late). */
gpumem_status gpumem_uringctl_stop(gpumem_uringctl *ctl);
/* Stop if running and free everything. GPUMEM_EBUSY, changing nothing,
 * while a thread waits in one of its pairs or a request holds a command ID;
 * GPUMEM_EBUSY too, left stopped, while the kernel still holds a command
 * whose caller timed out (it may still move that buffer's data): start
 * again to reap it, then destroy. */
gpumem_status gpumem_uringctl_destroy(gpumem_uringctl *ctl);
/* The counts, all threads summed; only while stopped (GPUMEM_ESTATE else). */
gpumem_status gpumem_uringctl_get_stats(gpumem_uringctl *ctl, gpumem_uringctl_stats *out);
/* Completions posted so far, any thread, any time (a watchdog's progress). */
uint64_t gpumem_uringctl_progress(gpumem_uringctl *ctl);

#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE && defined(__linux__)

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/nvme_ioctl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if !defined(IORING_SETUP_SQE128) || !defined(NVME_URING_CMD_IO_VEC)
#error "gpumem_uring.h: needs kernel headers 5.19 or later (IORING_SETUP_SQE128, NVME_URING_CMD_IO_VEC)"
#endif

/* ---- translation of one command (no kernel involved: unit-tested) -------- */

/* What a forwarder needs to turn a pair's command into a transfer: the
 * namespace the pairs address, the pair's PRP-list pages, the translator. */
typedef struct gpumem__uring_xlate {
    gpumem_nvme_ns ns;
    uint64_t list_lo, list_hi; /* the pair's PRP-list pages: [lo, hi) */
    int (*translate)(void *ctx, uint64_t prp, uint64_t len, void **host);
    void *translate_ctx;
} gpumem__uring_xlate;

/* A command ready for the kernel. */
typedef struct gpumem__uring_io {
    uint8_t opcode;          /* GPUMEM_NVME_OP_READ, _WRITE, _FLUSH */
    uint64_t off, len;       /* bytes on the namespace (len 0: Flush) */
    uint32_t n_iov;
} gpumem__uring_io;

static int gpumem__uring_host(const gpumem__uring_xlate *x, uint64_t prp, uint64_t len, void **host) {
    if (x->translate) return x->translate(x->translate_ctx, prp, len, host);
    *host = (void *)(uintptr_t)prp;
    return 0;
}

/* Check a fetched command (gpumem_target_check: opcode, namespace, range,
 * MDTS; counted in st) and translate its PRPs into at most max_iov iovecs,
 * adjacent segments joined. Returns 0, or the status to complete it with
 * (*untranslatable set when the PRPs named memory that cannot be handed
 * to the kernel). */
static uint16_t gpumem__uring_translate(const gpumem__uring_xlate *x, gpumem_target_stats *st,
                                        const gpumem_nvme_cmd *cmd, gpumem__uring_io *io, struct iovec *iov,
                                        uint32_t max_iov, int *untranslatable) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES;
    gpumem_target_prp_walk w;
    uint64_t addr, seg;
    uint16_t status;
    int r;
    *untranslatable = 0;
    io->n_iov = 0;
    io->opcode = (uint8_t)(cmd->cdw0 & 0xFFu);
    if ((status = gpumem_target_check(st, &x->ns, cmd, &io->off, &io->len)) != 0) return status;
    if (io->len == 0) return 0; /* Flush */
    if (gpumem_target_prp_walk_start(&w, cmd, io->len) != 0) goto bad_prp;
    if (w.n_pages > 2) {
        /* The walk reads the list: it must be memory the forwarder may read,
         * and fit one page, so that the walk never follows a chain pointer
         * (which a client could aim anywhere). */
        uint64_t list_bytes = (w.n_pages - 1) * 8;
        void *host;
        if ((cmd->prp2 & (pg - 1)) + list_bytes > pg) goto bad_prp;
        /* In the list pages, written so that nothing wraps: PRP2 in the last
         * page of the address space made prp2 + list_bytes 0, "inside", and
         * the walk read the list at PRP2 itself (fuzz_uring_prp). */
        if (!(cmd->prp2 >= x->list_lo && cmd->prp2 < x->list_hi && list_bytes <= x->list_hi - cmd->prp2)) {
            if (!x->translate || gpumem__uring_host(x, cmd->prp2, list_bytes, &host) != 0) goto untranslatable;
            w.list = (const uint64_t *)host;
        }
    }
    while ((r = gpumem_target_prp_walk_next(&w, &addr, &seg)) == 1) {
        void *host;
        if (gpumem__uring_host(x, addr, seg, &host) != 0 || !host) goto untranslatable;
        /* A segment whose host range would run past the end of the address
         * space is no memory the kernel can take (and joining it would
         * overflow a pointer: fuzz_uring_prp). Joined as integers. */
        if ((uintptr_t)host > UINTPTR_MAX - (uintptr_t)seg) goto untranslatable;
        if (io->n_iov &&
            (uintptr_t)iov[io->n_iov - 1].iov_base + iov[io->n_iov - 1].iov_len == (uintptr_t)host) {
            iov[io->n_iov - 1].iov_len += (size_t)seg;
            continue;
        }
        if (io->n_iov == max_iov) goto bad_prp; /* cannot happen: max_iov is the most pages */
        iov[io->n_iov].iov_base = host;
        iov[io->n_iov].iov_len = (size_t)seg;
        io->n_iov++;
    }
    if (r == 0) return 0;
bad_prp:
    st->bad_prp++;
    return GPUMEM_NVME_STATUS(0, 0x13);
untranslatable:
    *untranslatable = 1;
    return GPUMEM_NVME_STATUS(0, 0x13);
}

/* Linux's errno for a passthrough command, as an NVMe status (table in the
 * top comment). */
static uint16_t gpumem__uring_errno_status(int err) {
    switch (err) {
    case EINTR:
    case ECANCELED: return GPUMEM_NVME_STATUS(3, 0x71);
    case ENOLINK:
    case EINVAL:
    case ENODEV:
    case ENXIO:
    case ETIMEDOUT:
    case EHOSTDOWN:
    case ECONNRESET:
    case EAGAIN: return GPUMEM_NVME_STATUS(3, 0x70);
    case EFAULT: return GPUMEM_NVME_STATUS(0, 0x04);
    case EACCES:
    case EPERM: return GPUMEM_NVME_STATUS(2, 0x86);
    default: return GPUMEM_NVME_STATUS(0, 0x06);
    }
}

/* The status to post for a kernel completion value `res`: for passthrough
 * (expect_bytes unused) 0, an NVMe status field, or -errno; for a file
 * read/write the bytes moved (all of expect_bytes, else an error) or
 * -errno. Anything else is not a value the kernel gives: internal error,
 * and *impossible set. */
static uint16_t gpumem__uring_kernel_status(int32_t res, int passthrough, uint64_t expect_bytes, int *impossible) {
    *impossible = 0;
    if (res < 0) return res < -4095 ? (*impossible = 1, GPUMEM_NVME_STATUS(0, 0x06)) : gpumem__uring_errno_status(-res);
    if (!passthrough) {
        if ((uint64_t)res == expect_bytes) return 0;
        /* short: past the end of a file that shrank, or a write that ran out of space */
        return (uint64_t)res < expect_bytes ? GPUMEM_NVME_STATUS(0, 0x04) : (*impossible = 1, GPUMEM_NVME_STATUS(0, 0x06));
    }
    if (res == 0) return 0;
    /* A status field is 15 bits (SC, SCT, CRD, More, DNR); one that reads as
     * success, or wider, is no failure the target could have meant: never
     * report success for it. */
    if (res > 0x7FFF || gpumem_nvme_status_ok((uint16_t)res)) {
        *impossible = 1;
        return GPUMEM_NVME_STATUS(0, 0x06);
    }
    return (uint16_t)res;
}

/* ---- the forwarder --------------------------------------------------------- */

#define GPUMEM__URING_NONE 0xFFFFFFFFu

enum { GPUMEM__SLOT_FREE, GPUMEM__SLOT_KERNEL, GPUMEM__SLOT_DONE };

typedef struct gpumem__uring_slot {
    gpumem_nvme_cmd cmd;
    uint32_t pair;   /* index of the pair it came from */
    uint32_t next;   /* free list or the pair's done list */
    uint32_t gen;    /* bumped at each use; a completion names slot and generation */
    uint16_t status; /* to post */
    uint8_t state;
    uint8_t overdue; /* held by the kernel past its deadline (counted once) */
    uint64_t expect; /* bytes a file read/write must move */
    uint64_t deadline_ns; /* submission + the pair's command timeout (GPUMEM_NO_TIMEOUT: none) */
    struct iovec *iov;
} gpumem__uring_slot;

/* One io_uring, set up with raw system calls (SQE128, CQE32). */
typedef struct gpumem__uring_ring {
    int fd;
    void *sq_map, *cq_map, *sqe_map;
    size_t sq_map_bytes, cq_map_bytes, sqe_map_bytes;
    uint32_t *sq_head, *sq_tail, *sq_mask, *sq_array, *sq_flags;
    uint32_t *cq_head, *cq_tail, *cq_mask;
    unsigned char *cqes, *sqes;
    uint32_t sq_entries, cq_entries;
    uint32_t features;
    int sqpoll;
} gpumem__uring_ring;

typedef struct gpumem__uring_thread {
    struct gpumem_uringctl *ctl;
    uint32_t index;
    pthread_t thread;
    gpumem__uring_ring ring;
    gpumem__uring_slot *slots;
    struct iovec *iov_mem;
    uint32_t n_slots, free_head, in_kernel;
    uint64_t next_deadline; /* earliest deadline of a command in the kernel not yet overdue */
    gpumem_uringctl_stats st;
    int warned_access, warned_impossible, warned_overdue;
} gpumem__uring_thread;

/* Per pair: completions back from the kernel, in order, waiting for CQ room
 * (slot indices of the serving thread). */
typedef struct gpumem__uring_pair {
    uint32_t done_head, done_tail;
    gpumem__uring_xlate x; /* how its commands are translated */
} gpumem__uring_pair;

struct gpumem_uringctl {
    gpumem_uringctl_config cfg;
    int fd;             /* the device or file */
    int is_file;
    uint32_t kernel_nsid;
    gpumem_nvme_ns ns;  /* as the pairs see it: nsid 1 */
    gpumem_target_pairs *set; /* the pairs and their memory */
    gpumem__uring_pair *pairs;
    uint32_t n_pairs_alloc;
    gpumem__uring_thread *threads;
    uint32_t max_iov;
    uint32_t running;   /* atomic: the threads serve while nonzero */
    int threads_alive;
    uint64_t progress;  /* atomic */
    char error_[320];   /* the last failure after open (gpumem_uringctl_error) */
};

static gpumem_status gpumem__uring_fail(const gpumem_uringctl_config *cfg, gpumem_status st, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    GPUMEM_LOG("uring forwarder: %s (%s)", msg, gpumem_status_str(st));
    if (cfg && cfg->error && cfg->error_bytes) snprintf(cfg->error, cfg->error_bytes, "%s", msg);
    return st;
}

static int gpumem__uring_setup(uint32_t entries, struct io_uring_params *p) {
    return (int)syscall(__NR_io_uring_setup, entries, p);
}
static int gpumem__uring_enter(int fd, uint32_t to_submit, uint32_t min_complete, uint32_t flags, void *arg,
                               size_t argsz) {
    return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, arg, argsz);
}

static void gpumem__uring_ring_close(gpumem__uring_ring *r) {
    if (r->sqe_map) munmap(r->sqe_map, r->sqe_map_bytes);
    if (r->cq_map && r->cq_map != r->sq_map) munmap(r->cq_map, r->cq_map_bytes);
    if (r->sq_map) munmap(r->sq_map, r->sq_map_bytes);
    if (r->fd >= 0) close(r->fd);
    memset(r, 0, sizeof *r);
    r->fd = -1;
}

/* A ring of `entries` 128-byte SQEs and 32-byte CQEs, with `file` registered
 * as fixed file 0, cfg's region (if any) as registered buffer 0, and an
 * SQPOLL thread if cfg asks. Returns 0 or -errno (what failed in *what). */
static int gpumem__uring_ring_open(gpumem__uring_ring *r, const gpumem_uringctl_config *cfg, int file,
                                   const char **what) {
    uint32_t entries = cfg->ring_entries;
    struct io_uring_params p;
    unsigned char *sq, *cq;
    uint32_t i;
    int e;
    memset(r, 0, sizeof *r);
    memset(&p, 0, sizeof p);
    r->fd = -1;
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32;
    if (cfg->sqpoll_idle_ms) {
        p.flags |= IORING_SETUP_SQPOLL;
        p.sq_thread_idle = cfg->sqpoll_idle_ms;
        r->sqpoll = 1;
    }
    *what = cfg->sqpoll_idle_ms ? "io_uring_setup with SQPOLL" : "io_uring_setup";
    if ((r->fd = gpumem__uring_setup(entries, &p)) < 0) return r->fd = -1, -errno;
    r->sq_entries = p.sq_entries;
    r->cq_entries = p.cq_entries;
    r->features = p.features;
    r->sq_map_bytes = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
    r->cq_map_bytes = p.cq_off.cqes + (size_t)p.cq_entries * 32;
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_map_bytes > r->sq_map_bytes) r->sq_map_bytes = r->cq_map_bytes;
        r->cq_map_bytes = r->sq_map_bytes;
    }
    *what = "mmap of the io_uring";
    r->sq_map = mmap(NULL, r->sq_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd,
                     IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) goto fail_nomap;
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        r->cq_map = r->sq_map;
    } else {
        r->cq_map = mmap(NULL, r->cq_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd,
                         IORING_OFF_CQ_RING);
        if (r->cq_map == MAP_FAILED) { r->cq_map = NULL; goto fail; }
    }
    r->sqe_map_bytes = (size_t)p.sq_entries * 128;
    r->sqe_map = mmap(NULL, r->sqe_map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd,
                      IORING_OFF_SQES);
    if (r->sqe_map == MAP_FAILED) { r->sqe_map = NULL; goto fail; }
    sq = (unsigned char *)r->sq_map;
    cq = (unsigned char *)r->cq_map;
    r->sq_head = (uint32_t *)(sq + p.sq_off.head);
    r->sq_tail = (uint32_t *)(sq + p.sq_off.tail);
    r->sq_mask = (uint32_t *)(sq + p.sq_off.ring_mask);
    r->sq_array = (uint32_t *)(sq + p.sq_off.array);
    r->sq_flags = (uint32_t *)(sq + p.sq_off.flags);
    r->cq_head = (uint32_t *)(cq + p.cq_off.head);
    r->cq_tail = (uint32_t *)(cq + p.cq_off.tail);
    r->cq_mask = (uint32_t *)(cq + p.cq_off.ring_mask);
    r->cqes = cq + p.cq_off.cqes;
    r->sqes = (unsigned char *)r->sqe_map;
    /* SQ position i always carries SQE i: the array is set once. */
    for (i = 0; i < p.sq_entries; i++) r->sq_array[i] = i;
    *what = "IORING_REGISTER_FILES";
    if (syscall(__NR_io_uring_register, r->fd, IORING_REGISTER_FILES, &file, 1) != 0) goto fail;
    if (cfg->fixed_base) {
        struct iovec region;
        region.iov_base = cfg->fixed_base;
        region.iov_len = cfg->fixed_bytes;
        *what = "IORING_REGISTER_BUFFERS";
        if (syscall(__NR_io_uring_register, r->fd, IORING_REGISTER_BUFFERS, &region, 1) != 0) goto fail;
    }
    return 0;
fail:
    e = -errno;
    gpumem__uring_ring_close(r);
    return e;
fail_nomap:
    r->sq_map = NULL;
    goto fail;
}

/* The next free SQE, cleared (the caller has made sure one is free: no more
 * are taken than slots, and the ring has as many SQEs as slots). */
static struct io_uring_sqe *gpumem__uring_sqe(gpumem__uring_ring *r) {
    uint32_t tail = *r->sq_tail; /* ours alone: plain */
    struct io_uring_sqe *sqe = (struct io_uring_sqe *)(r->sqes + (size_t)(tail & *r->sq_mask) * 128);
    memset(sqe, 0, 128);
    return sqe;
}
/* Publish the SQE gpumem__uring_sqe gave. Release: the SQE's bytes before
 * the tail that hands it to the kernel. */
static void gpumem__uring_sqe_push(gpumem__uring_ring *r) {
    gpumem_atomic_store_u32(r->sq_tail, *r->sq_tail + 1, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
}
/* SQEs published and not yet consumed by the kernel. Acquire on the
 * kernel's head: pairs with its release after reading them. */
static uint32_t gpumem__uring_unsubmitted(gpumem__uring_ring *r) {
    return *r->sq_tail - gpumem_atomic_load_u32(r->sq_head, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
}

/* Whether a data segment lies inside the registered buffer. */
static int gpumem__uring_in_fixed(const gpumem_uringctl_config *cfg, const struct iovec *v) {
    uintptr_t lo = (uintptr_t)cfg->fixed_base, at = (uintptr_t)v->iov_base;
    return cfg->fixed_base && at >= lo && v->iov_len <= cfg->fixed_bytes && at - lo <= cfg->fixed_bytes - v->iov_len;
}

/* Fill a passthrough (or, for a file, a read/write/fsync) SQE for slot s. */
static void gpumem__uring_prep(gpumem_uringctl *c, gpumem__uring_thread *t, uint32_t s, const gpumem__uring_io *io) {
    gpumem__uring_slot *sl = &t->slots[s];
    struct io_uring_sqe *sqe = gpumem__uring_sqe(&t->ring);
    int fixed;
    sqe->fd = 0; /* registered file 0 */
    sqe->flags = IOSQE_FIXED_FILE;
    sqe->user_data = ((uint64_t)sl->gen << 32) | s;
    sl->expect = io->len;
    fixed = io->n_iov == 1 && gpumem__uring_in_fixed(&c->cfg, &sl->iov[0]);
    if (fixed) t->st.fixed++;
    if (c->is_file) {
        if (io->len == 0) {
            sqe->opcode = IORING_OP_FSYNC;
        } else if (fixed) {
            sqe->opcode = io->opcode == GPUMEM_NVME_OP_READ ? IORING_OP_READ_FIXED : IORING_OP_WRITE_FIXED;
            sqe->addr = (uint64_t)(uintptr_t)sl->iov[0].iov_base;
            sqe->len = (uint32_t)sl->iov[0].iov_len;
            sqe->off = io->off;
            sqe->buf_index = 0;
        } else {
            sqe->opcode = io->opcode == GPUMEM_NVME_OP_READ ? IORING_OP_READV : IORING_OP_WRITEV;
            sqe->addr = (uint64_t)(uintptr_t)sl->iov;
            sqe->len = io->n_iov;
            sqe->off = io->off;
        }
    } else {
        struct nvme_uring_cmd pt;
        memset(&pt, 0, sizeof pt);
        pt.opcode = io->opcode;
        pt.nsid = c->kernel_nsid;
        pt.cdw10 = sl->cmd.cdw10;
        pt.cdw11 = sl->cmd.cdw11;
        pt.cdw12 = sl->cmd.cdw12;
        pt.cdw13 = sl->cmd.cdw13;
        pt.cdw14 = sl->cmd.cdw14;
        pt.cdw15 = sl->cmd.cdw15;
        if (io->n_iov == 1) {
            pt.addr = (uint64_t)(uintptr_t)sl->iov[0].iov_base;
            pt.data_len = (uint32_t)sl->iov[0].iov_len;
        } else if (io->n_iov > 1) {
            pt.addr = (uint64_t)(uintptr_t)sl->iov;
            pt.data_len = io->n_iov;
        }
        sqe->opcode = IORING_OP_URING_CMD;
        sqe->cmd_op = io->n_iov > 1 ? NVME_URING_CMD_IO_VEC : NVME_URING_CMD_IO;
        if (fixed) { /* the data address stays the process's; the kernel finds it in buffer 0 */
            sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
            sqe->buf_index = 0;
        }
        memcpy(sqe->cmd, &pt, sizeof pt); /* 72 of the 80 command bytes of a 128-byte SQE */
    }
    gpumem__uring_sqe_push(&t->ring);
    /* The pair's own timeout, as the pair set keeps it (never read from
     * the pair's client memory). */
    sl->deadline_ns = gpumem_deadline_ns(gpumem_target_pairs_timeout_ns(c->set, sl->pair));
    sl->overdue = 0;
    if (sl->deadline_ns < t->next_deadline) t->next_deadline = sl->deadline_ns;
    sl->state = GPUMEM__SLOT_KERNEL;
    t->in_kernel++;
    t->st.submitted++;
}

static void gpumem__uring_done_push(gpumem_uringctl *c, gpumem__uring_thread *t, uint32_t s, uint16_t status) {
    gpumem__uring_slot *sl = &t->slots[s];
    gpumem__uring_pair *p = &c->pairs[sl->pair];
    sl->status = status;
    sl->state = GPUMEM__SLOT_DONE;
    sl->next = GPUMEM__URING_NONE;
    if (p->done_tail == GPUMEM__URING_NONE) p->done_head = s;
    else t->slots[p->done_tail].next = s;
    p->done_tail = s;
}

/* Fetch pair i's new commands while slots are free: each goes to the kernel,
 * or (failed checks, an ID conflict) straight to the pair's done list. */
static uint32_t gpumem__uring_fetch(gpumem_uringctl *c, gpumem__uring_thread *t, uint32_t i) {
    gpumem_target_queue *q = gpumem_target_pairs_queue(c->set, i);
    const gpumem__uring_xlate *x = &c->pairs[i].x;
    uint32_t n = 0;
    while (t->free_head != GPUMEM__URING_NONE) {
        uint32_t s = t->free_head;
        gpumem__uring_slot *sl = &t->slots[s];
        gpumem__uring_io io;
        uint16_t status;
        int untranslatable;
        if (!gpumem_target_fetch(q, &t->st.sw, &sl->cmd)) break;
        t->free_head = sl->next;
        sl->pair = i;
        sl->gen++;
        n++;
        if (sl->cmd.cdw0 & GPUMEM_TARGET_CID_CONFLICT) { /* posted as "command ID conflict" */
            gpumem__uring_done_push(c, t, s, 0);
            continue;
        }
        status = gpumem__uring_translate(x, &t->st.sw, &sl->cmd, &io, sl->iov, c->max_iov, &untranslatable);
        if (status) {
            t->st.sw.errors_other++;
            if (untranslatable) t->st.untranslatable++;
            gpumem__uring_done_push(c, t, s, status);
            continue;
        }
        gpumem__uring_prep(c, t, s, &io);
    }
    return n;
}

/* Hand what was prepared to the kernel: one io_uring_enter for the batch.
 * Interrupted or short of resources: the SQEs stay and go next round. */
static void gpumem__uring_submit(gpumem__uring_thread *t) {
    uint32_t n = gpumem__uring_unsubmitted(&t->ring);
    int rc;
    if (!n) return;
    if (t->ring.sqpoll) {
        /* The SQPOLL thread takes the SQEs; it needs a wake-up only once it
         * slept. Full fence: the tail store before the flags load (else the
         * thread may have gone to sleep without seeing the new tail). */
        gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
        if (!(gpumem_atomic_load_u32(t->ring.sq_flags, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) &
              IORING_SQ_NEED_WAKEUP))
            return;
        rc = gpumem__uring_enter(t->ring.fd, 0, 0, IORING_ENTER_SQ_WAKEUP, NULL, 0);
        if (rc >= 0) t->st.enter_calls++;
        return;
    }
    rc = gpumem__uring_enter(t->ring.fd, n, 0, 0, NULL, 0);
    if (rc > 0) t->st.enter_calls++;
    else if (rc < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY && !t->warned_impossible++)
        GPUMEM_LOG("uring forwarder thread %u: io_uring_enter: %s (retried every round)", t->index, strerror(errno));
}

/* Take the kernel's completions, check each, and queue it on its pair. */
static uint32_t gpumem__uring_reap(gpumem_uringctl *c, gpumem__uring_thread *t) {
    gpumem__uring_ring *r = &t->ring;
    uint32_t head = *r->cq_head, tail, n = 0;
    /* Acquire: pairs with the kernel's release of the tail after writing
     * the CQEs before it. */
    tail = gpumem_atomic_load_u32(r->cq_tail, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
    if (tail - head > r->cq_entries) { /* the kernel never does this: trust none of it */
        t->st.bad_kernel_cqes++;
        if (!t->warned_impossible++)
            GPUMEM_LOG("uring forwarder thread %u: CQ ring tail %u is %u entries past head %u (ring of %u)",
                       t->index, tail, tail - head, head, r->cq_entries);
        return 0;
    }
    for (; head != tail; head++) {
        const unsigned char *e = r->cqes + (size_t)(head & *r->cq_mask) * 32;
        uint64_t user_data;
        int32_t res;
        uint32_t s, gen;
        int impossible;
        uint16_t status;
        memcpy(&user_data, e, 8);
        memcpy(&res, e + 8, 4);
        s = (uint32_t)user_data;
        gen = (uint32_t)(user_data >> 32);
        n++;
        if (s >= t->n_slots || t->slots[s].state != GPUMEM__SLOT_KERNEL || t->slots[s].gen != gen) {
            t->st.bad_kernel_cqes++;
            if (!t->warned_impossible++)
                GPUMEM_LOG("uring forwarder thread %u: a completion (user_data 0x%llx, res %d) names no command in "
                           "flight; ignored", t->index, (unsigned long long)user_data, res);
            continue;
        }
        status = gpumem__uring_kernel_status(res, !c->is_file, t->slots[s].expect, &impossible);
        if (impossible) {
            t->st.bad_kernel_cqes++;
            if (!t->warned_impossible++)
                GPUMEM_LOG("uring forwarder thread %u: the kernel completed a command with %d, no value it gives; "
                           "posted as internal error", t->index, res);
        }
        if (status) {
            t->st.kernel_errors++;
            t->st.sw.errors_other++;
            if ((res == -EACCES || res == -EPERM) && !t->warned_access++)
                GPUMEM_LOG("uring forwarder: the kernel refused passthrough I/O on %s (%s): kernels before 6.2 need "
                           "CAP_SYS_ADMIN (run as root), later ones write access to the device",
                           c->cfg.path, strerror(-res));
        }
        if (t->slots[s].overdue) t->st.late++;
        t->in_kernel--;
        gpumem__uring_done_push(c, t, s, status);
    }
    /* Release: we are done reading the entries before the kernel reuses them. */
    gpumem_atomic_store_u32(r->cq_head, tail, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    return n;
}

/* Post pair i's finished commands while its CQ has room (it holds depth - 1). */
static uint32_t gpumem__uring_post(gpumem_uringctl *c, gpumem__uring_thread *t, uint32_t i) {
    gpumem_target_queue *q = gpumem_target_pairs_queue(c->set, i);
    gpumem__uring_pair *p = &c->pairs[i];
    uint32_t n = 0;
    gpumem_target_take_cq_doorbell(q, &t->st.sw);
    while (p->done_head != GPUMEM__URING_NONE && q->cq_posted < q->depth - 1) {
        uint32_t s = p->done_head;
        gpumem__uring_slot *sl = &t->slots[s];
        p->done_head = sl->next;
        if (p->done_head == GPUMEM__URING_NONE) p->done_tail = GPUMEM__URING_NONE;
        gpumem_target_post(q, &t->st.sw, &sl->cmd, sl->status);
        sl->state = GPUMEM__SLOT_FREE;
        sl->next = t->free_head;
        t->free_head = s;
        n++;
    }
    if (n) {
        /* Relaxed: a count for watchdogs, nothing is published through it. */
        gpumem_atomic_fetch_add_u64(&c->progress, (uint64_t)n, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
        gpumem_nvme_qp_signals_interrupt(q->signals); /* wake one parked host waiter, which harvests */
    }
    return n;
}

/* One round over the thread's pairs. Returns the things done (0: idle). */
static uint32_t gpumem__uring_round(gpumem_uringctl *c, gpumem__uring_thread *t, int fetch) {
    uint32_t i, work = 0, n_threads = c->cfg.n_threads, n = gpumem_target_pairs_count(c->set);
    for (i = t->index; i < n; i += n_threads) {
        gpumem_target_queue *q = gpumem_target_pairs_queue(c->set, i);
        work += gpumem_target_take_cq_doorbell(q, &t->st.sw) + gpumem_target_take_sq_doorbell(q, &t->st.sw);
        if (fetch) work += gpumem__uring_fetch(c, t, i);
    }
    gpumem__uring_submit(t);
    work += gpumem__uring_reap(c, t);
    for (i = t->index; i < n; i += n_threads) work += gpumem__uring_post(c, t, i);
    return work;
}

/* Wait for a kernel completion at most timeout_ns. */
static void gpumem__uring_wait_cqe(gpumem__uring_thread *t, uint64_t timeout_ns) {
    struct __kernel_timespec ts;
    struct io_uring_getevents_arg arg;
    ts.tv_sec = (long long)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long long)(timeout_ns % 1000000000ull);
    memset(&arg, 0, sizeof arg);
    arg.ts = (uint64_t)(uintptr_t)&ts;
    if (t->ring.features & IORING_FEAT_EXT_ARG)
        gpumem__uring_enter(t->ring.fd, 0, 1, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof arg);
    else
        sched_yield(); /* before 5.11: no bounded wait; poll */
}

/* The forwarder's own deadline. 6.1 cannot cancel a uring_cmd, and a
 * passthrough command's own timeout_ms fires late on nvme-tcp (about 1.5 s
 * for 500 ms) and resets the whole controller, so none is set: the kernel
 * keeps a command as long as it likes. What must not wait for it: the
 * caller, who gets GPUMEM_ETIMEDOUT from the pair after cmd_timeout_ms
 * (its ID stays reserved, ORPHAN, until the kernel's completion is posted
 * late), and the forwarder's stop. A command past its deadline is marked
 * overdue, counted and logged once; it keeps its slot (the kernel may still
 * move its data) until the kernel ends it. Returns the commands in the
 * kernel not yet overdue, and sets next_deadline to the earliest of theirs. */
static uint32_t gpumem__uring_check_deadlines(gpumem_uringctl *c, gpumem__uring_thread *t, uint64_t now) {
    uint32_t s, pending = 0;
    uint64_t next = GPUMEM_NO_TIMEOUT;
    for (s = 0; s < t->n_slots; s++) {
        gpumem__uring_slot *sl = &t->slots[s];
        if (sl->state != GPUMEM__SLOT_KERNEL || sl->overdue) continue;
        if (now >= sl->deadline_ns) {
            sl->overdue = 1;
            t->st.overdue++;
            if (!t->warned_overdue++)
                GPUMEM_LOG("uring forwarder thread %u: the kernel holds a command on %s past the pair's command "
                           "timeout (%llu ms); its caller gets GPUMEM_ETIMEDOUT, its ID stays reserved until the "
                           "kernel ends it", t->index, c->cfg.path,
                           (unsigned long long)(gpumem_target_pairs_timeout_ns(c->set, sl->pair) / 1000000ull));
            continue;
        }
        pending++;
        if (sl->deadline_ns < next) next = sl->deadline_ns;
    }
    t->next_deadline = next;
    return pending;
}

/* Wait for a kernel completion at most park_ns, and not past the next deadline. */
static void gpumem__uring_wait_bounded(gpumem_uringctl *c, gpumem__uring_thread *t, uint64_t now) {
    uint64_t wait = c->cfg.park_ns;
    if (t->next_deadline != GPUMEM_NO_TIMEOUT && t->next_deadline > now && t->next_deadline - now < wait)
        wait = t->next_deadline - now;
    gpumem__uring_wait_cqe(t, wait);
}

/* A forwarder thread: rounds while there is work; when idle, the idle
 * step of gpumem_target.h (poll idle_spin_ns, then wait at most park_ns at
 * a time: for a kernel completion if any is due, else parked on the
 * doorbell event). At stop, it waits for the commands the kernel holds
 * until their deadlines at most, and posts what fits. */
static void *gpumem__uring_main(void *arg) {
    gpumem__uring_thread *t = (gpumem__uring_thread *)arg;
    gpumem_uringctl *c = t->ctl;
    gpumem_target_idle idle = gpumem_target_idle_start(c->cfg.idle_spin_ns, c->cfg.park_ns);
    uint64_t now;
    uint32_t i, n;
    sigset_t pipe_signal;
    /* The kernel may send a command over TCP (nvme-tcp, the NVMe-oF path)
     * inline, in this thread's io_uring_enter. Once the connection is gone
     * its socket send raises SIGPIPE on the sending thread (nvme-tcp sends
     * without MSG_NOSIGNAL), and SIGPIPE's default action ends the whole
     * process: a guest_test run died so (exit 141) right after its fault
     * test removed the port. The command fails with a status, which is what
     * the forwarder reports; the signal is for nobody, so this thread blocks
     * it (the application's own disposition of SIGPIPE is untouched). */
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, NULL);
    /* Commands a previous stop left in the kernel are overdue already. */
    t->next_deadline = GPUMEM_NO_TIMEOUT;
    gpumem__uring_check_deadlines(c, t, idle.last_work_ns);
    /* Acquire: pairs with the release store of start and stop; the threads
     * read the pair set, which the owner changes only while they are
     * stopped (pthread_create and pthread_join order those changes too). */
    while (gpumem_atomic_load_u32(&c->running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)) {
        uint32_t work = gpumem__uring_round(c, t, 1);
        now = gpumem_clock_ns();
        if (now >= t->next_deadline) gpumem__uring_check_deadlines(c, t, now);
        if (gpumem_target_idle_step(&idle, c->set, work, now) == 0) continue;
        /* Past the spin. With commands in the kernel, wait for one of them
         * (at most park_ns: a doorbell is seen after it); with none, park
         * on the doorbell event until a doorbell of this thread's pairs,
         * or the stop. */
        if (t->in_kernel) gpumem__uring_wait_bounded(c, t, now);
        else gpumem_target_pairs_park(c->set, t->index, c->cfg.n_threads, c->cfg.park_ns, &c->running);
    }
    /* The kernel ends every command in its own time (6.1 cannot cancel one):
     * wait for those within their deadlines, leave the overdue ones. */
    for (;;) {
        gpumem__uring_round(c, t, 0);
        now = gpumem_clock_ns();
        if (!t->in_kernel || gpumem__uring_check_deadlines(c, t, now) == 0) break;
        gpumem__uring_wait_bounded(c, t, now);
    }
    t->st.left_in_kernel = t->in_kernel;
    n = gpumem_target_pairs_count(c->set);
    for (i = t->index; i < n; i += c->cfg.n_threads) gpumem__uring_post(c, t, i);
    return NULL;
}

/* ---- namespace ------------------------------------------------------------- */

/* One admin command (Identify), synchronously: NVME_IOCTL_ADMIN_CMD on the
 * namespace's generic device (6.1 takes admin commands through io_uring only
 * on the controller's device, /dev/nvmeX). Returns 0, the NVMe status, or
 * -errno. */
static int gpumem__uring_admin(int fd, const struct nvme_uring_cmd *pt) {
    struct nvme_passthru_cmd a;
    int rc;
    memset(&a, 0, sizeof a);
    a.opcode = pt->opcode;
    a.nsid = pt->nsid;
    a.addr = pt->addr;
    a.data_len = pt->data_len;
    a.cdw10 = pt->cdw10;
    rc = ioctl(fd, NVME_IOCTL_ADMIN_CMD, &a);
    return rc < 0 ? -errno : rc;
}

/* LBA size, capacity and MDTS of the device's namespace: Identify
 * Namespace and Identify Controller through admin passthrough (ioctl). */
static gpumem_status gpumem__uring_identify(gpumem_uringctl *c) {
    struct nvme_uring_cmd pt;
    unsigned char *id = (unsigned char *)aligned_alloc(4096, 4096);
    uint64_t nsze, max_bytes;
    uint32_t lbaf, lbads, ms, mdts, nlbaf;
    int res;
    gpumem_status st = GPUMEM_OK;
    if (!id) return GPUMEM_ENOMEM;
    memset(id, 0, 4096);
    memset(&pt, 0, sizeof pt);
    pt.opcode = 0x06; /* Identify */
    pt.nsid = c->kernel_nsid;
    pt.addr = (uint64_t)(uintptr_t)id;
    pt.data_len = 4096;
    pt.cdw10 = 0; /* CNS 0: the namespace */
    if ((res = gpumem__uring_admin(c->fd, &pt)) != 0) {
        st = gpumem__uring_fail(&c->cfg, res == -EACCES || res == -EPERM ? GPUMEM_ESYS : GPUMEM_EIO,
                                "Identify Namespace %u on %s: %s%s", c->kernel_nsid, c->cfg.path,
                                res < 0 ? strerror(-res) : gpumem_nvme_status_str((uint16_t)res),
                                res == -EACCES || res == -EPERM ? " (admin passthrough needs CAP_SYS_ADMIN: run as root)"
                                                                 : "");
        goto out;
    }
    memcpy(&nsze, id, 8);
    nlbaf = id[25];
    lbaf = id[26] & 0x0Fu;
    if (nlbaf > 15) nlbaf = 15;
    memcpy(&lbads, id + 128 + 4 * lbaf, 4);
    ms = lbads & 0xFFFFu;
    lbads = (lbads >> 16) & 0xFFu;
    if (nsze == 0 || lbaf > nlbaf || lbads < 9 || lbads > 16 || ms != 0 || nsze > (UINT64_MAX >> lbads)) {
        st = gpumem__uring_fail(&c->cfg, GPUMEM_ENODEV, "namespace %u on %s: capacity %llu blocks, LBA format %u "
                                "of %u (2^%u bytes, %u metadata bytes): expected a nonzero capacity, 512..65536-byte "
                                "blocks and no metadata", c->kernel_nsid, c->cfg.path, (unsigned long long)nsze, lbaf,
                                nlbaf + 1, lbads, ms);
        goto out;
    }
    memset(id, 0, 4096);
    pt.nsid = 0;
    pt.cdw10 = 1; /* CNS 1: the controller */
    if ((res = gpumem__uring_admin(c->fd, &pt)) != 0) {
        st = gpumem__uring_fail(&c->cfg, GPUMEM_EIO, "Identify Controller on %s: %s", c->cfg.path,
                                res < 0 ? strerror(-res) : gpumem_nvme_status_str((uint16_t)res));
        goto out;
    }
    mdts = id[77]; /* in units of the minimum page size; 4 KiB assumed (CAP is not reachable here) */
    max_bytes = mdts && mdts < 20 ? (4096ull << mdts) : UINT64_MAX;
    c->ns.lba_shift = lbads;
    c->ns.n_blocks = nsze;
    if ((max_bytes >> lbads) < c->ns.max_blocks) c->ns.max_blocks = (uint32_t)(max_bytes >> lbads);
out:
    free(id);
    return st;
}

/* ---- public ----------------------------------------------------------------- */

gpumem_uringctl_config gpumem_uringctl_config_resolved(const gpumem_uringctl_config *in) {
    gpumem_uringctl_config c;
    if (in) c = *in;
    else memset(&c, 0, sizeof c);
    if (!c.n_threads) c.n_threads = 1;
    if (!c.ring_entries) c.ring_entries = 256;
    if (!c.max_blocks) c.max_blocks = 256;
    if (!c.lba_bytes) c.lba_bytes = 512;
    c.idle_spin_ns = gpumem_target_spin_resolved(c.idle_spin_ns);
    if (!c.park_ns) c.park_ns = GPUMEM_TARGET_DEFAULT_PARK_NS;
    return c;
}

gpumem_uringctl_config gpumem_uringctl_config_default(void) { return gpumem_uringctl_config_resolved(NULL); }

static void gpumem__uring_free(gpumem_uringctl *c) {
    uint32_t i;
    if (c->threads)
        for (i = 0; i < c->cfg.n_threads; i++) {
            gpumem__uring_ring_close(&c->threads[i].ring);
            GPUMEM_FREE(c->threads[i].slots);
            GPUMEM_FREE(c->threads[i].iov_mem);
        }
    GPUMEM_FREE(c->threads);
    GPUMEM_FREE(c->pairs);
    gpumem_target_pairs_destroy(c->set);
    if (c->fd >= 0) close(c->fd);
    GPUMEM_FREE(c);
}

gpumem_status gpumem_uringctl_open(const gpumem_uringctl_config *in, gpumem_uringctl **out) {
    gpumem_uringctl *c;
    struct stat sb;
    gpumem_status st;
    uint32_t i, k;
    gpumem_uringctl_config resolved;
    const gpumem_uringctl_config *cfg = &resolved;
    if (!in || !out || !in->path) return GPUMEM_ENULL;
    *out = NULL;
    resolved = gpumem_uringctl_config_resolved(in);
    if (cfg->n_threads > 64 || cfg->ring_entries < 8 || cfg->ring_entries > 4096 ||
        !gpumem_is_pow2_u64(cfg->ring_entries) || cfg->max_blocks > 65536 || cfg->park_ns < 1000 ||
        cfg->park_ns > 1000000000ull)
        return gpumem__uring_fail(cfg, GPUMEM_EINVAL, "n_threads (1..64), ring_entries (a power of two 8..4096), "
                                  "max_blocks (1..65536) or park_ns (1 us .. 1 s) out of range");
    if ((cfg->fixed_base != NULL) != (cfg->fixed_bytes != 0) || cfg->fixed_bytes > (1ull << 30) ||
        (uintptr_t)cfg->fixed_base > UINTPTR_MAX - cfg->fixed_bytes)
        return gpumem__uring_fail(cfg, GPUMEM_EINVAL, "fixed_base %p, fixed_bytes %zu: expected both set or both "
                                  "zero, at most 1 GiB, not past the end of the address space", cfg->fixed_base,
                                  cfg->fixed_bytes);
    c = (gpumem_uringctl *)GPUMEM_MALLOC(sizeof *c);
    if (!c) return GPUMEM_ENOMEM;
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->fd = open(cfg->path, O_RDWR | O_CLOEXEC);
    if (c->fd < 0) {
        int e = errno;
        GPUMEM_FREE(c);
        return gpumem__uring_fail(cfg, e == ENOENT ? GPUMEM_ENODEV : GPUMEM_ESYS, "open %s read+write: %s%s",
                                  cfg->path, strerror(e), e == EACCES ? " (the forwarder needs write access)" : "");
    }
    if (fstat(c->fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISREG(sb.st_mode))) {
        st = gpumem__uring_fail(cfg, GPUMEM_ENODEV, "%s is neither an NVMe generic device (/dev/ngXnY) nor a regular "
                                "file", cfg->path);
        goto fail;
    }
    c->is_file = S_ISREG(sb.st_mode);
    c->ns.nsid = 1;
    c->ns.max_blocks = cfg->max_blocks;
    if (c->is_file) {
        if (cfg->lba_bytes < 512 || cfg->lba_bytes > 65536 || !gpumem_is_pow2_u64(cfg->lba_bytes) ||
            (uint64_t)sb.st_size < cfg->lba_bytes) {
            st = gpumem__uring_fail(cfg, GPUMEM_EINVAL, "%s: %lld bytes; expected at least one block of lba_bytes %u "
                                    "(a power of two 512..65536)", cfg->path, (long long)sb.st_size, cfg->lba_bytes);
            goto fail;
        }
        c->kernel_nsid = 1;
        c->ns.lba_shift = gpumem_log2_u64(cfg->lba_bytes);
        c->ns.n_blocks = (uint64_t)sb.st_size >> c->ns.lba_shift;
    } else {
        int id = ioctl(c->fd, NVME_IOCTL_ID);
        if (id <= 0) {
            st = gpumem__uring_fail(cfg, GPUMEM_ENODEV, "%s: NVME_IOCTL_ID: %s: not an NVMe namespace's generic "
                                    "device (/dev/ngXnY)", cfg->path, id < 0 ? strerror(errno) : "namespace ID 0");
            goto fail;
        }
        c->kernel_nsid = (uint32_t)id;
    }
    /* A PRP list must fit one page (the walk never chains): at most 512
     * entries, so at most 2 MiB less a page per command. */
    if (((uint64_t)c->ns.max_blocks << c->ns.lba_shift) > 511ull * 4096)
        c->ns.max_blocks = (uint32_t)((511ull * 4096) >> c->ns.lba_shift);
    c->threads = (gpumem__uring_thread *)GPUMEM_MALLOC(cfg->n_threads * sizeof *c->threads);
    if (!c->threads) { st = GPUMEM_ENOMEM; goto fail; }
    memset(c->threads, 0, cfg->n_threads * sizeof *c->threads);
    for (i = 0; i < cfg->n_threads; i++) c->threads[i].ring.fd = -1;
    for (i = 0; i < cfg->n_threads; i++) {
        gpumem__uring_thread *t = &c->threads[i];
        const char *what;
        int rc = gpumem__uring_ring_open(&t->ring, cfg, c->fd, &what);
        if (rc < 0) {
            int buffers = !strcmp(what, "IORING_REGISTER_BUFFERS");
            st = gpumem__uring_fail(cfg, GPUMEM_ESYS, "%s: %s%s", what, strerror(-rc),
                                    buffers && rc == -ENOMEM ? " (the registered buffer counts against RLIMIT_MEMLOCK: "
                                    "raise it, or CAP_IPC_LOCK)"
                                    : buffers ? " (fixed_base must be ordinary memory of this process, e.g. "
                                    "malloc or anonymous mmap)"
                                    : rc == -ENOSYS || rc == -EPERM ? " (io_uring is missing or disabled: "
                                    "/proc/sys/kernel/io_uring_disabled, or a seccomp filter)"
                                    : rc == -EINVAL ? " (SQE128/CQE32 need Linux 5.19 or later)" : "");
            goto fail;
        }
        if (i == 0 && !c->is_file && (st = gpumem__uring_identify(c)) != GPUMEM_OK) goto fail;
    }
    c->max_iov = (uint32_t)(((uint64_t)c->ns.max_blocks << c->ns.lba_shift) / GPUMEM_NVME_PAGE_BYTES + 2);
    for (i = 0; i < cfg->n_threads; i++) {
        gpumem__uring_thread *t = &c->threads[i];
        t->ctl = c;
        t->index = i;
        t->n_slots = cfg->ring_entries;
        t->slots = (gpumem__uring_slot *)GPUMEM_MALLOC(t->n_slots * sizeof *t->slots);
        t->iov_mem = (struct iovec *)GPUMEM_MALLOC((size_t)t->n_slots * c->max_iov * sizeof(struct iovec));
        if (!t->slots || !t->iov_mem) { st = GPUMEM_ENOMEM; goto fail; }
        memset(t->slots, 0, t->n_slots * sizeof *t->slots);
        for (k = 0; k < t->n_slots; k++) {
            t->slots[k].iov = t->iov_mem + (size_t)k * c->max_iov;
            t->slots[k].next = k + 1 < t->n_slots ? k + 1 : GPUMEM__URING_NONE;
        }
        t->free_head = 0;
    }
    /* The pairs' memory: host memory from GPUMEM_MALLOC, for this
     * process's threads (no GPU client memory: docs/uring.md). */
    if ((st = gpumem_target_pairs_create(&c->ns, NULL, &c->set)) != GPUMEM_OK) goto fail;
    /* The caller's error buffer was for open: it is not kept (it may be a
     * local of the caller's); later failures go to the forwarder's own. */
    c->cfg.error = c->error_;
    c->cfg.error_bytes = sizeof c->error_;
    *out = c;
    return GPUMEM_OK;
fail:
    gpumem__uring_free(c);
    return st;
}

gpumem_nvme_ns gpumem_uringctl_ns(const gpumem_uringctl *ctl) {
    gpumem_nvme_ns none;
    if (ctl) return ctl->ns;
    memset(&none, 0, sizeof none);
    return none;
}

uint32_t gpumem_uringctl_kernel_nsid(const gpumem_uringctl *ctl) { return ctl ? ctl->kernel_nsid : 0; }

const char *gpumem_uringctl_error(const gpumem_uringctl *ctl) { return ctl ? ctl->error_ : ""; }

gpumem_status gpumem_uringctl_add_qp(gpumem_uringctl *ctl, uint32_t depth, gpumem_nvme_qp **out) {
    gpumem__uring_pair *grown, *p;
    gpumem_status st;
    uint32_t n;
    if (!ctl || !out) return GPUMEM_ENULL;
    *out = NULL;
    if (ctl->threads_alive) return GPUMEM_ESTATE;
    if (depth > ctl->cfg.ring_entries + 1)
        return gpumem__uring_fail(&ctl->cfg, GPUMEM_EINVAL, "a pair of depth %u holds %u commands, more than the "
                                  "forwarder keeps in the kernel (ring_entries %u): raise ring_entries", depth,
                                  depth - 1, ctl->cfg.ring_entries);
    n = gpumem_target_pairs_count(ctl->set);
    grown = (gpumem__uring_pair *)GPUMEM_MALLOC((n + 1) * sizeof *grown);
    if (!grown) return GPUMEM_ENOMEM;
    /* The pair's memory and layout are the pair set's; its command timeout
     * the forwarder's (the pair applies it to its callers, the forwarder
     * reads the set's copy for its own deadline). */
    if ((st = gpumem_target_pairs_add(ctl->set, depth,
                                      depth > GPUMEM_TARGET_DEFAULT_CIDS ? depth : GPUMEM_TARGET_DEFAULT_CIDS, 0,
                                      ctl->cfg.cmd_timeout_ms, out)) != GPUMEM_OK) {
        GPUMEM_FREE(grown);
        return st;
    }
    if (ctl->pairs) memcpy(grown, ctl->pairs, n * sizeof *grown);
    p = &grown[n];
    memset(p, 0, sizeof *p);
    p->done_head = p->done_tail = GPUMEM__URING_NONE;
    p->x.ns = ctl->ns;
    /* The pair's own PRP-list pages: a list there is read without a translation. */
    gpumem_target_pairs_prp_range(ctl->set, n, &p->x.list_lo, &p->x.list_hi);
    p->x.translate = ctl->cfg.translate;
    p->x.translate_ctx = ctl->cfg.translate_ctx;
    GPUMEM_FREE(ctl->pairs);
    ctl->pairs = grown;
    /* stopped until start, as a controller that does not run */
    gpumem_nvme_qp_signals_set_stopped(gpumem_target_pairs_queue(ctl->set, n)->signals, 1);
    return GPUMEM_OK;
}

gpumem_status gpumem_uringctl_set_polled(gpumem_uringctl *ctl, const gpumem_nvme_qp *qp, int polled) {
    if (!ctl) return GPUMEM_ENULL;
    return gpumem_target_pairs_set_polled(ctl->set, qp, polled);
}

/* The threads' running word: release, so that what the owner did before
 * (pairs added, counts read) is ordered before the threads' acquire loads;
 * a stop then notifies the doorbell event, so that no thread waits out a
 * park (the park looks at running after registering). */
static void gpumem__uring_set_running(gpumem_uringctl *ctl, uint32_t running) {
    gpumem_atomic_store_u32(&ctl->running, running, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
    if (!running) gpumem_event_notify(gpumem_target_pairs_event(ctl->set));
}

gpumem_status gpumem_uringctl_start(gpumem_uringctl *ctl) {
    uint32_t i;
    int rc;
    if (!ctl) return GPUMEM_ENULL;
    if (ctl->threads_alive) return GPUMEM_ESTATE;
    if (gpumem_target_pairs_count(ctl->set) == 0)
        return gpumem__uring_fail(&ctl->cfg, GPUMEM_ESTATE, "start with no queue pairs");
    gpumem_target_pairs_set_stopped(ctl->set, 0);
    gpumem__uring_set_running(ctl, 1);
    for (i = 0; i < ctl->cfg.n_threads; i++) {
        if ((rc = pthread_create(&ctl->threads[i].thread, NULL, gpumem__uring_main, &ctl->threads[i])) != 0) {
            uint32_t k;
            gpumem__uring_set_running(ctl, 0);
            for (k = 0; k < i; k++) pthread_join(ctl->threads[k].thread, NULL);
            gpumem_target_pairs_set_stopped(ctl->set, 1);
            return gpumem__uring_fail(&ctl->cfg, GPUMEM_ESYS, "pthread_create: %s", strerror(rc));
        }
    }
    ctl->threads_alive = 1;
    return GPUMEM_OK;
}

gpumem_status gpumem_uringctl_stop(gpumem_uringctl *ctl) {
    uint32_t i;
    if (!ctl) return GPUMEM_ENULL;
    if (!ctl->threads_alive) return GPUMEM_ESTATE;
    gpumem__uring_set_running(ctl, 0);
    for (i = 0; i < ctl->cfg.n_threads; i++) pthread_join(ctl->threads[i].thread, NULL);
    ctl->threads_alive = 0;
    /* After the threads have ended, so that no completion follows the mark. */
    gpumem_target_pairs_set_stopped(ctl->set, 1);
    return GPUMEM_OK;
}

gpumem_status gpumem_uringctl_get_stats(gpumem_uringctl *ctl, gpumem_uringctl_stats *out) {
    uint32_t i;
    if (!ctl || !out) return GPUMEM_ENULL;
    if (ctl->threads_alive) return GPUMEM_ESTATE;
    memset(out, 0, sizeof *out);
    for (i = 0; i < ctl->cfg.n_threads; i++) {
        const gpumem_uringctl_stats *s = &ctl->threads[i].st;
        gpumem_target_stats_add(&out->sw, &s->sw);
        out->submitted += s->submitted;
        out->enter_calls += s->enter_calls;
        out->fixed += s->fixed;
        out->kernel_errors += s->kernel_errors;
        out->untranslatable += s->untranslatable;
        out->bad_kernel_cqes += s->bad_kernel_cqes;
        out->overdue += s->overdue;
        out->late += s->late;
        out->left_in_kernel += s->left_in_kernel;
    }
    return GPUMEM_OK;
}

uint64_t gpumem_uringctl_progress(gpumem_uringctl *ctl) {
    /* Relaxed: a count for watchdogs, nothing is read through it. */
    return ctl ? gpumem_atomic_load_u64(&ctl->progress, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) : 0;
}

gpumem_status gpumem_uringctl_destroy(gpumem_uringctl *ctl) {
    uint32_t i;
    if (!ctl) return GPUMEM_ENULL;
    if (gpumem_target_pairs_check_idle(ctl->set) != GPUMEM_OK) return GPUMEM_EBUSY;
    if (ctl->threads_alive) gpumem_uringctl_stop(ctl);
    /* Stopped: the threads' counts are ours to read. A command the kernel
     * holds may still move data into its caller's buffer. */
    for (i = 0; i < ctl->cfg.n_threads; i++)
        if (ctl->threads[i].in_kernel) return GPUMEM_EBUSY;
    gpumem__uring_free(ctl);
    return GPUMEM_OK;
}

#endif /* GPUMEM_IMPLEMENTATION && __linux__ */
#endif /* !GPUMEM_NO_HOST_SHIM */

#endif /* GPUMEM_URING_H */
