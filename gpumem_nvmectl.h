/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_nvmectl.h - the thin host shim for a real NVMe controller (host,
 * Linux, optional): brings up a PCIe controller from user space and hands
 * out gpumem_nvme_qp queue pairs (gpumem_nvme.h) that it serves. Everything
 * here is host code: sysfs, VFIO ioctls, uio, DMA memory, the admin queue.
 * The pairs themselves, and all I/O on them, are the protocol's.
 *
 * USAGE (host threads against a real NVMe controller; the device bound to
 * vfio-pci, with /dev/vfio/N owned by the user and a memlock limit that
 * covers the mapped memory, no root; or to uio_pci_generic without an
 * IOMMU, as root; see docs/ssd.md)
 *
 *   #define _POSIX_C_SOURCE 200809L      // POSIX threads and clocks
 *   #define GPUMEM_IMPLEMENTATION         // in exactly one .c file
 *   #include <stdio.h>
 *   #include "gpumem_nvmectl.h"           // includes gpumem_nvme.h
 *
 *   // given: uint64_t slba
 *   gpumem_nvmectl_config cfg = gpumem_nvmectl_config_default();
 *   cfg.pci_addr = "0000:00:04.0";          // as under /sys/bus/pci/devices
 *   cfg.nsid = 1;
 *   cfg.max_pairs = 4;                      // Set Features, Number of Queues
 *   gpumem_nvmectl *ctl;
 *   gpumem_status st = gpumem_nvmectl_open(&cfg, &ctl);  // reset, admin queue, Identify
 *   if (st != GPUMEM_OK) return st;         // ENODEV, ESYS, ENOMEM, ...: why in cfg.error if given
 *   const gpumem_nvmectl_info *in = gpumem_nvmectl_get_info(ctl);   // in->ns: LBA size, capacity
 *   gpumem_nvme_qp *qp;
 *   gpumem_nvmectl_add_qp(ctl, 1024, &qp);   // Create I/O CQ + SQ; queue IDs 1, 2, ...
 *
 *   gpumem_nvmectl_dma buf;                  // mapped for the controller (VFIO: IOVAs)
 *   gpumem_nvmectl_dma_alloc(ctl, 1 << 20, 0, &buf);
 *   gpumem_nvme_iomap at = gpumem_nvme_iomap_sub(&buf.map, 512);   // any dword offset
 *   gpumem_nvme_req req = {0};               // PRPs and the list built from the map
 *   gpumem_nvme_qp_submit_map(qp, GPUMEM_NVME_OP_READ, slba, 65536 >> in->ns.lba_shift, &at, &req);
 *   st = gpumem_nvmectl_wait(ctl, qp, &req, 5000);   // bounded, watches CSTS.CFS
 *   if (st != GPUMEM_OK) puts(gpumem_nvmectl_error(ctl));
 *
 *   gpumem_nvmectl_close(ctl);               // delete queues, CC.SHN shutdown, disable
 *   gpumem_nvmectl_dma_free(&buf);
 *   // gpumem_nvme_qp_read/write/flush work too, but wait without a time limit
 *
 * GPUMEM_NO_HOST_SHIM leaves it all out; on other systems it is empty.
 */
#ifndef GPUMEM_NVMECTL_H
#define GPUMEM_NVMECTL_H

#include "gpumem_nvme.h"

/*
 * Brings up a PCIe NVMe controller that is bound to vfio-pci (the default
 * and the way with an IOMMU) or to uio_pci_generic (machines without an
 * IOMMU) and hands out gpumem_nvme_qp queue pairs that the controller
 * serves: the same pairs, and the same submission and completion code, as
 * with the software controllers (gpumem_swctl.h). See USAGE above.
 *
 *   open   sysfs: the device exists and is bound to a user-space driver;
 *          vfio-pci: the IOMMU group /dev/vfio/N joins a type1 container,
 *          BAR0 and config space are regions of the VFIO device fd;
 *          uio_pci_generic: BAR0 through its sysfs resource file, config
 *          space through sysfs, refused when the device's IOMMU domain
 *          translates (iommu_group/type is not "identity");
 *          PCI command register: memory space and bus mastering on;
 *          disable (CC.EN = 0, wait CSTS.RDY = 0), admin queues (AQA, ASQ,
 *          ACQ), enable (wait CSTS.RDY = 1, at most CAP.TO), Identify
 *          Controller, Identify Namespace, Set Features Number of Queues.
 *   add_qp Create I/O Completion Queue, then Create I/O Submission Queue,
 *          rings contiguous in I/O space (CAP.CQR), interrupts off: the
 *          library's threads poll the CQ.
 *   close  Delete the I/O queues, shut down (CC.SHN = normal, wait
 *          CSTS.SHST = complete), disable, bus mastering off, unmap.
 *
 * DMA memory with VFIO (the IOMMU translates): gpumem_nvmectl_dma_alloc
 * memory and caller buffers registered with gpumem_nvmectl_dma_register are
 * mapped into the container with VFIO_IOMMU_MAP_DMA, each at its own range
 * of I/O virtual addresses (IOVAs), contiguous however large, with an
 * unmapped guard page after it. The controller reaches nothing else: a PRP
 * that points anywhere else ends the command with an error status. An
 * unregistered buffer has no IOVA and no way into a command (the PRP
 * functions take a gpumem_nvmectl_dma); gpumem_nvmectl_iova answers
 * GPUMEM_ERANGE for it. Mapped pages are pinned by the kernel and counted
 * against RLIMIT_MEMLOCK (ulimit -l); when it is too small, the error says
 * the limit and the size needed. No root: only read-write access to
 * /dev/vfio/N and the memlock limit (docs/ssd.md).
 * Mappings go away on gpumem_nvmectl_dma_free (also for registered buffers)
 * and all at once on gpumem_nvmectl_close.
 *
 * DMA memory without an IOMMU (uio_pci_generic, or vfio-pci in no-IOMMU
 * mode): locked anonymous memory whose physical addresses come from
 * /proc/self/pagemap (root only). The physical address is the bus address.
 * Queue rings must be physically contiguous, so rings larger than one
 * 4 KiB page need huge pages (reserve them with /proc/sys/vm/nr_hugepages).
 * Data buffers may be ordinary pages: the PRP builder looks up every page.
 * Locked ordinary pages can still be migrated by memory compaction; set
 * /proc/sys/vm/compact_unevictable_allowed to 0 (huge pages do not move).
 *
 * Every wait has a timeout, and every wait also watches CSTS: a controller
 * that reports fatal status (CFS) or stops answering (registers read all
 * ones) ends the wait with GPUMEM_ENODEV, never with a completion status
 * (GPUMEM_EIO means the controller completed the command with an error).
 * Each failure returns a gpumem_status, logs a message through GPUMEM_LOG
 * and keeps it for gpumem_nvmectl_error(); a failed open, which leaves no
 * controller to ask, copies it to the config's error buffer.
 *
 * Not thread-safe against itself except where noted: open, add_qp and close
 * from one thread; admin commands are serialised by a lock; the queue pairs
 * are for any number of threads, as always.
 */
#if !defined(GPUMEM_NO_HOST_SHIM) && defined(__linux__)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpumem_nvmectl gpumem_nvmectl;

/* Zero means default in every field but pci_addr (docs/headers.md);
 * gpumem_nvmectl_config_resolved shows the values a config stands for. */
typedef struct gpumem_nvmectl_config {
    const char *pci_addr;  /* "0000:00:04.0", as under /sys/bus/pci/devices */
    uint32_t nsid;         /* namespace the queue pairs address; default 1 */
    uint32_t max_pairs;    /* I/O queue pairs to ask for (1..65535); default 16 */
    uint32_t admin_depth;  /* admin queue entries, a power of two 2..64; default 32 */
    uint32_t timeout_ms;   /* longest wait for one admin command; default 10000 */
    int small_pages;       /* 0 (default): rings in 2 MiB huge pages where there are any (no IOMMU only);
                              1: ordinary pages always (0.4's huge_pages = 0) */
    char *error;           /* optional: open copies the reason of a failure here, NUL terminated */
    size_t error_bytes;    /* size of `error` (320 holds every message) */
} gpumem_nvmectl_config;

/* What Identify and the capability register said. */
typedef struct gpumem_nvmectl_info {
    uint16_t vid, ssvid;        /* PCI vendor and subsystem vendor */
    char serial[21], model[41], firmware[9];
    uint32_t version;           /* VS: major << 16 | minor << 8 | tertiary */
    uint32_t max_queue_entries; /* CAP.MQES + 1 */
    uint32_t doorbell_stride;   /* bytes between doorbells: 4 << CAP.DSTRD */
    uint32_t ready_timeout_ms;  /* CAP.TO * 500 */
    uint64_t max_transfer_bytes;/* from MDTS; 0 = no limit reported */
    uint32_t n_namespaces;      /* NN */
    uint32_t pairs_granted;     /* I/O queue pairs allocated (Set Features), at most max_pairs */
    gpumem_nvme_ns ns;          /* the opened namespace: LBA size, capacity, blocks per command */
} gpumem_nvmectl_info;

/* DMA memory: host virtual address and where the controller sees it. */
typedef struct gpumem_nvmectl_dma {
    void *va;
    size_t bytes;
    gpumem_nvme_iomap map; /* VFIO: contiguous IOVAs; otherwise the physical address of every 4 KiB page */
    int huge;              /* backed by huge pages */
    int registered;        /* the caller's memory (gpumem_nvmectl_dma_register), not freed here */
    size_t mapped_bytes_;
    uint64_t *pages_;
    void *iommu_;          /* VFIO: the container the range is mapped in */
    uintptr_t map_va_;     /* VFIO: the page-aligned range that is mapped, and its IOVA */
    uint64_t map_iova_;
} gpumem_nvmectl_dma;

enum {
    GPUMEM_NVMECTL_DMA_CONTIGUOUS = 1, /* one range in I/O space (rings): needs huge pages above 4 KiB */
    GPUMEM_NVMECTL_DMA_SMALL_PAGES = 2 /* ordinary 4 KiB pages even where huge pages exist */
};

/* A zeroed config resolved (pci_addr NULL: set it). */
gpumem_nvmectl_config gpumem_nvmectl_config_default(void);
/* The config with its defaults filled in: what gpumem_nvmectl_open uses (NULL: the zeroed config). */
gpumem_nvmectl_config gpumem_nvmectl_config_resolved(const gpumem_nvmectl_config *in);
/* Open and bring up the controller. On failure *out is NULL, the status says
 * what kind of failure, and the message went to GPUMEM_LOG and to
 * cfg->error if the caller gave one: GPUMEM_ENODEV (no device, wrong or no
 * driver, uio under a translating IOMMU, VFIO group not viable, controller
 * fatal status), GPUMEM_ESYS (no permission on /dev/vfio/N, ...),
 * GPUMEM_ENOMEM (RLIMIT_MEMLOCK too small; the message names the size),
 * GPUMEM_ETIMEDOUT, GPUMEM_EIO (the controller refused an admin command). */
gpumem_status gpumem_nvmectl_open(const gpumem_nvmectl_config *cfg, gpumem_nvmectl **out);
const gpumem_nvmectl_info *gpumem_nvmectl_get_info(const gpumem_nvmectl *ctl);
/* The last failure of this controller in words ("" if none). */
const char *gpumem_nvmectl_error(const gpumem_nvmectl *ctl);
/* Create the next I/O queue pair (qid 1, 2, ...) of `depth` entries (a power
 * of two, at most max_queue_entries). The pair belongs to the controller. */
gpumem_status gpumem_nvmectl_add_qp(gpumem_nvmectl *ctl, uint32_t depth, gpumem_nvme_qp **out);
/* Reset pair qp (issue 19) in two steps around its users (gpumem_nvme.h,
 * "Reset"). reset_begin: Delete I/O SQ, then Delete I/O CQ (once the first
 * has completed the controller moves no more data for the queue's
 * commands), then every wait on the pair and every poll of a request
 * without its result ends with GPUMEM_EABORTED; safe under load. reset_end,
 * once no thread is inside a call on the pair: the pair is reinitialised
 * (requests still submitted end "aborted"; results that came before are
 * kept) and Create I/O CQ, Create I/O SQ make the queues again. GPUMEM_EBUSY
 * from reset_end while a thread is still inside a call on the pair (it
 * leaves soon: call again). From reset_begin on, a call that enters the
 * pair gets GPUMEM_EABORTED (gpumem_nvme.h, "Gate"). */
gpumem_status gpumem_nvmectl_reset_begin(gpumem_nvmectl *ctl, gpumem_nvme_qp *qp);
gpumem_status gpumem_nvmectl_reset_end(gpumem_nvmectl *ctl, gpumem_nvme_qp *qp);
/* One admin command, waited for with the configured timeout (thread-safe).
 * GPUMEM_EIO with the completion in *cpl when the controller refuses it. */
gpumem_status gpumem_nvmectl_admin(gpumem_nvmectl *ctl, const gpumem_nvme_cmd *cmd, gpumem_nvme_cpl *cpl);
/* Wait for an asynchronous request on one of this controller's pairs, at most
 * timeout_ms, watching the controller's health (thread-safe). */
gpumem_status gpumem_nvmectl_wait(gpumem_nvmectl *ctl, gpumem_nvme_qp *qp, gpumem_nvme_req *req,
                                  uint32_t timeout_ms);
/* GPUMEM_OK while the controller is ready; otherwise why not (thread-safe). */
gpumem_status gpumem_nvmectl_check(gpumem_nvmectl *ctl);
/* Delete the queues (no I/O may be outstanding), shut down, release. Returns
 * the first failure on the way, but always releases everything. */
gpumem_status gpumem_nvmectl_close(gpumem_nvmectl *ctl);

/* DMA memory, zeroed, pinned, and mapped for the controller (VFIO: at a
 * contiguous IOVA range of its own). ctl may be NULL only without an IOMMU
 * (then the memory is located by physical address and errors are only
 * logged). It may be freed before or after gpumem_nvmectl_close. */
gpumem_status gpumem_nvmectl_dma_alloc(gpumem_nvmectl *ctl, size_t bytes, uint32_t flags, gpumem_nvmectl_dma *out);
/* Frees dma_alloc memory; for a registered buffer, unmaps it (the memory
 * stays the caller's). */
void gpumem_nvmectl_dma_free(gpumem_nvmectl_dma *dma);
/* Register the caller's buffer (as spdk_mem_register): mapped once for the
 * controller, so *out works with gpumem_nvmectl_prp and the pair's PRP
 * builder (out->map) like dma_alloc memory. Any address and length; the
 * whole pages around it are mapped. The memory must stay allocated until
 * gpumem_nvmectl_dma_unregister. With VFIO the pages are pinned (counted
 * against RLIMIT_MEMLOCK); without an IOMMU they are locked (mlock) and
 * located through /proc/self/pagemap. Buffers never registered are refused:
 * they have no I/O address (gpumem_nvmectl_iova says GPUMEM_ERANGE). */
gpumem_status gpumem_nvmectl_dma_register(gpumem_nvmectl *ctl, void *va, size_t bytes, gpumem_nvmectl_dma *out);
void gpumem_nvmectl_dma_unregister(gpumem_nvmectl_dma *dma);
/* The I/O address of `len` bytes at `va` if they lie inside one live VFIO
 * mapping of this controller (dma_alloc or registered), GPUMEM_ERANGE if not
 * (the controller could not reach them), GPUMEM_ESTATE without VFIO. */
gpumem_status gpumem_nvmectl_iova(gpumem_nvmectl *ctl, const void *va, size_t len, uint64_t *iova);
/* 1 if the controller was opened through VFIO (its DMA goes through the IOMMU). */
int gpumem_nvmectl_uses_vfio(const gpumem_nvmectl *ctl);
/* PRP1/PRP2 for `len` bytes at byte `off` of `dma`; transfers over two pages
 * put their PRP list at byte `list_off` (page aligned) of `list`, which may be
 * NULL for short ones. */
gpumem_status gpumem_nvmectl_prp(const gpumem_nvmectl_dma *dma, size_t off, uint64_t len,
                                 const gpumem_nvmectl_dma *list, size_t list_off, uint64_t *prp1, uint64_t *prp2);

#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/vfio.h>

/* Linux values that strict C11 hides behind _DEFAULT_SOURCE. */
#ifdef MAP_ANONYMOUS
#define GPUMEM__MAP_ANONYMOUS MAP_ANONYMOUS
#else
#define GPUMEM__MAP_ANONYMOUS 0x20
#endif
#ifdef MAP_HUGETLB
#define GPUMEM__MAP_HUGETLB MAP_HUGETLB
#else
#define GPUMEM__MAP_HUGETLB 0x40000
#endif

#ifdef MAP_LOCKED
#define GPUMEM__MAP_LOCKED MAP_LOCKED
#else
#define GPUMEM__MAP_LOCKED 0x2000
#endif
#ifdef MADV_NOHUGEPAGE
#define GPUMEM__MADV_NOHUGEPAGE MADV_NOHUGEPAGE
#else
#define GPUMEM__MADV_NOHUGEPAGE 15 /* strict C11 hides it, and madvise() */
#endif
#if !defined(__cplusplus) && defined(__STRICT_ANSI__) && !defined(_DEFAULT_SOURCE) && !defined(_GNU_SOURCE)
int madvise(void *addr, size_t length, int advice);
#endif

#define GPUMEM__HUGE_PAGE_BYTES (2u << 20)

/* Controller registers (NVMe base specification, "Controller Registers"). */
enum {
    GPUMEM__REG_CAP = 0x00,  /* 64-bit capabilities */
    GPUMEM__REG_VS = 0x08,
    GPUMEM__REG_CC = 0x14,   /* configuration */
    GPUMEM__REG_CSTS = 0x1C, /* status */
    GPUMEM__REG_AQA = 0x24,  /* admin queue sizes */
    GPUMEM__REG_ASQ = 0x28,  /* 64-bit admin SQ base */
    GPUMEM__REG_ACQ = 0x30,  /* 64-bit admin CQ base */
    GPUMEM__REG_DOORBELLS = 0x1000
};
#define GPUMEM__CC_EN 1u
#define GPUMEM__CC_SHN_NORMAL (1u << 14)
#define GPUMEM__CC_SHN_MASK (3u << 14)
#define GPUMEM__CC_IOSQES(log2) ((uint32_t)(log2) << 16)
#define GPUMEM__CC_IOCQES(log2) ((uint32_t)(log2) << 20)
#define GPUMEM__CSTS_RDY 1u
#define GPUMEM__CSTS_CFS 2u
#define GPUMEM__CSTS_SHST(csts) (((csts) >> 2) & 3u)
#define GPUMEM__CSTS_SHST_COMPLETE 2u

/* Admin opcodes and feature identifiers used here. */
enum {
    GPUMEM__ADMIN_DELETE_SQ = 0x00,
    GPUMEM__ADMIN_CREATE_SQ = 0x01,
    GPUMEM__ADMIN_DELETE_CQ = 0x04,
    GPUMEM__ADMIN_CREATE_CQ = 0x05,
    GPUMEM__ADMIN_IDENTIFY = 0x06,
    GPUMEM__ADMIN_SET_FEATURES = 0x09,
    GPUMEM__FEATURE_NUM_QUEUES = 0x07,
    GPUMEM__IDENTIFY_NAMESPACE = 0x00,
    GPUMEM__IDENTIFY_CONTROLLER = 0x01
};

typedef struct gpumem__nvmectl_pair {
    gpumem_nvme_qp qp; /* first: qp pointers are handed out */
    gpumem_nvmectl_dma sq_mem, cq_mem;
    gpumem_nvmectl_dma prp_mem; /* the command IDs' PRP-list pages (page by page) */
    /* Client state in ordinary memory (the controller never sees it), as
     * the signals block: a real controller writes no stop word and parks
     * nobody (no interrupts: the threads poll). */
    void *state;
    gpumem_nvme_qp_signals signals;
    int deleted; /* between reset_begin and reset_end: its queues do not exist */
} gpumem__nvmectl_pair;

/* A VFIO type1 container: the device's I/O address space. Shared by the
 * controller and every mapping in it, so that DMA memory may be freed after
 * gpumem_nvmectl_close (the last reference closes the container). */
typedef struct gpumem__nvmectl_range {
    uintptr_t va;
    size_t bytes;
    uint64_t iova;
} gpumem__nvmectl_range;

typedef struct gpumem__nvmectl_iommu {
    pthread_mutex_t lock;
    uint32_t refs;        /* the controller, and each live mapping */
    int container;        /* /dev/vfio/vfio */
    uint64_t next_iova;   /* bump allocator: the next free IOVA */
    uint64_t pinned;      /* bytes mapped (pinned and counted against RLIMIT_MEMLOCK) */
    gpumem__nvmectl_range *ranges; /* the live mappings, for gpumem_nvmectl_iova */
    uint32_t n_ranges, cap_ranges;
} gpumem__nvmectl_iommu;

struct gpumem_nvmectl {
    gpumem_nvmectl_config cfg;
    char pci_addr[64];
    char sysfs_dir[160];
    gpumem_nvmectl_info info;
    gpumem__nvmectl_iommu *iommu; /* VFIO; NULL for uio / no IOMMU */
    int vfio_group, vfio_device;  /* fds, -1 when not open */
    uint64_t config_off;          /* VFIO: the config-space region's offset in the device fd */
    uint32_t admin_done;          /* admin commands the controller completed (DMA fault hint) */
    unsigned char *bar; /* BAR0, uncached mapping (sysfs resource file or VFIO region) */
    size_t bar_bytes;
    uint64_t cap;
    int enabled;
    gpumem_nvmectl_dma admin_sq, admin_cq, scratch; /* scratch: one page for Identify data */
    void *admin_state;
    gpumem_nvme_qp_signals admin_signals;
    gpumem_nvme_qp admin; /* the admin queue is a gpumem queue pair too (qid 0) */
    pthread_mutex_t admin_lock;
    gpumem__nvmectl_pair **pairs;
    uint32_t n_pairs;
    char error[320];
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static gpumem_status gpumem__nvmectl_fail(gpumem_nvmectl *c, gpumem_status st, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    GPUMEM_LOG("nvme %s: %s (%s)", c ? c->pci_addr : "-", msg, gpumem_status_str(st));
    if (c) memcpy(c->error, msg, sizeof msg);
    return st;
}

/* ---- registers ----------------------------------------------------------- */

/* MMIO: volatile accesses of the register's own width to the uncached BAR
 * mapping; the CPU neither merges, splits, reorders nor caches them. On x86-64
 * an uncached store is also ordered after every earlier store to ordinary
 * memory, so ring contents written before a register write are visible to the
 * controller's DMA first (the doorbells rely on the same, see
 * gpumem__doorbell_write). 64-bit registers are accessed as two 32-bit
 * halves, low first, which the specification allows and every controller
 * supports. */
static uint32_t gpumem__reg_read32(const gpumem_nvmectl *c, uint32_t off) {
    return *(volatile const uint32_t *)(c->bar + off);
}
static void gpumem__reg_write32(gpumem_nvmectl *c, uint32_t off, uint32_t v) {
    *(volatile uint32_t *)(c->bar + off) = v;
}
static uint64_t gpumem__reg_read64(const gpumem_nvmectl *c, uint32_t off) {
    uint64_t lo = gpumem__reg_read32(c, off);
    return lo | ((uint64_t)gpumem__reg_read32(c, off + 4) << 32);
}
static void gpumem__reg_write64(gpumem_nvmectl *c, uint32_t off, uint64_t v) {
    gpumem__reg_write32(c, off, (uint32_t)v);
    gpumem__reg_write32(c, off + 4, (uint32_t)(v >> 32));
}

/* Doorbell of queue `qid` (completion queue if is_cq), honouring CAP.DSTRD. */
static uint32_t *gpumem__nvmectl_doorbell(gpumem_nvmectl *c, uint32_t qid, int is_cq) {
    return (uint32_t *)(c->bar + GPUMEM__REG_DOORBELLS + (2u * qid + (is_cq ? 1u : 0u)) * c->info.doorbell_stride);
}

gpumem_status gpumem_nvmectl_check(gpumem_nvmectl *c) {
    uint32_t csts;
    if (!c) return GPUMEM_ENULL;
    csts = gpumem__reg_read32(c, GPUMEM__REG_CSTS);
    if (csts == 0xFFFFFFFFu)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller does not answer (CSTS reads all ones: removed, "
                                                       "or memory decoding off)");
    /* ENODEV, not EIO: no command completed, and a caller must not read a
     * completion status that never came. A controller that fails before it
     * completed a single command most likely could not read the admin queue:
     * the usual cause is DMA the IOMMU does not translate. */
    if (csts & GPUMEM__CSTS_CFS)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller fatal status (CSTS.CFS)%s",
                                    gpumem_atomic_load_u32(&c->admin_done, GPUMEM_ORDER_RELAXED,
                                                           GPUMEM_SCOPE_SYSTEM) ? "" : " before it completed a command: likely a DMA fault, its "
                                    "memory not mapped in the IOMMU (bind the device to vfio-pci, docs/ssd.md)");
    if (c->enabled && !(csts & GPUMEM__CSTS_RDY))
        return gpumem__nvmectl_fail(c, GPUMEM_ESTATE, "controller is no longer ready (CSTS 0x%x)", csts);
    return GPUMEM_OK;
}

/* Wait until (CSTS & mask) == want, at most timeout_ms. A fatal status or an
 * absent controller ends the wait early (what = for the message). */
static gpumem_status gpumem__nvmectl_wait_csts(gpumem_nvmectl *c, uint32_t mask, uint32_t want,
                                               uint32_t timeout_ms, const char *what) {
    uint64_t deadline = gpumem_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        uint32_t csts = gpumem__reg_read32(c, GPUMEM__REG_CSTS);
        if (csts == 0xFFFFFFFFu)
            return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "%s: controller does not answer (CSTS all ones)", what);
        if ((csts & mask) == want) return GPUMEM_OK;
        if ((csts & GPUMEM__CSTS_CFS) && !(mask & GPUMEM__CSTS_CFS))
            return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "%s: controller fatal status (CSTS 0x%x)", what, csts);
        if (gpumem_clock_ns() > deadline)
            return gpumem__nvmectl_fail(c, GPUMEM_ETIMEDOUT, "%s: not done after %u ms (CSTS 0x%x)", what,
                                        timeout_ms, csts);
        gpumem__host_sleep_ns(1000000L);
    }
}

/* ---- DMA memory ------------------------------------------------------------ */

/* ---- VFIO: the container's I/O address space ------------------------------- */

static void gpumem__nvmectl_iommu_unref(gpumem__nvmectl_iommu *m) {
    int last;
    pthread_mutex_lock(&m->lock);
    last = --m->refs == 0;
    pthread_mutex_unlock(&m->lock);
    if (!last) return;
    close(m->container);
    pthread_mutex_destroy(&m->lock);
    GPUMEM_FREE(m->ranges);
    GPUMEM_FREE(m);
}

/* Map the pages around [va, va + bytes) at a fresh IOVA range of c's
 * container and describe them in *out (out->va and bytes are the caller's).
 * Each range is followed by an unmapped guard page, so a transfer that runs
 * past a buffer faults instead of reaching the next one. */
static gpumem_status gpumem__nvmectl_vfio_map(gpumem_nvmectl *c, void *va, size_t bytes, gpumem_nvmectl_dma *out) {
    gpumem__nvmectl_iommu *m = c->iommu;
    const uintptr_t pg = GPUMEM_NVME_PAGE_BYTES;
    uintptr_t start = (uintptr_t)va & ~(pg - 1), end = GPUMEM_ALIGN_UP((uintptr_t)va + bytes, pg);
    struct vfio_iommu_type1_dma_map dm;
    uint64_t pinned;
    int rc = -1, e = ENOMEM;
    memset(&dm, 0, sizeof dm);
    dm.argsz = sizeof dm;
    dm.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    dm.vaddr = start;
    dm.size = end - start;
    pthread_mutex_lock(&m->lock);
    if (m->n_ranges == m->cap_ranges) {
        uint32_t cap = m->cap_ranges ? 2 * m->cap_ranges : 16;
        gpumem__nvmectl_range *r = (gpumem__nvmectl_range *)GPUMEM_MALLOC(cap * sizeof *r);
        if (r) {
            if (m->n_ranges) memcpy(r, m->ranges, m->n_ranges * sizeof *r);
            GPUMEM_FREE(m->ranges);
            m->ranges = r;
            m->cap_ranges = cap;
        }
    }
    dm.iova = m->next_iova;
    if (m->n_ranges < m->cap_ranges) {
        /* The kernel pins the pages (faulting them in) and counts them
         * against RLIMIT_MEMLOCK: no mlock, no root. */
        rc = ioctl(m->container, VFIO_IOMMU_MAP_DMA, &dm);
        e = errno;
    }
    if (rc == 0) {
        m->ranges[m->n_ranges].va = start;
        m->ranges[m->n_ranges].bytes = dm.size;
        m->ranges[m->n_ranges].iova = dm.iova;
        m->n_ranges++;
        m->next_iova += dm.size + pg;
        m->pinned += dm.size;
        m->refs++;
    }
    pinned = m->pinned;
    pthread_mutex_unlock(&m->lock);
    if (rc != 0) {
        struct rlimit rl;
        if (e == ENOMEM && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            pinned + dm.size > (uint64_t)rl.rlim_cur)
            return gpumem__nvmectl_fail(c, GPUMEM_ENOMEM, "VFIO_IOMMU_MAP_DMA of %llu KiB refused: RLIMIT_MEMLOCK "
                                        "(ulimit -l) is %llu KiB and this controller needs at least %llu KiB pinned; "
                                        "raise the limit (docs/ssd.md)",
                                        (unsigned long long)dm.size >> 10, (unsigned long long)rl.rlim_cur >> 10,
                                        (unsigned long long)(pinned + dm.size + 1023) >> 10);
        return gpumem__nvmectl_fail(c, e == ENOMEM ? GPUMEM_ENOMEM : GPUMEM_ESYS, "VFIO_IOMMU_MAP_DMA of %llu "
                                    "bytes at IOVA 0x%llx: %s", (unsigned long long)dm.size,
                                    (unsigned long long)dm.iova, strerror(e));
    }
    out->iommu_ = m;
    out->map_va_ = start;
    out->map_iova_ = dm.iova;
    out->mapped_bytes_ = dm.size;
    out->map = gpumem_nvme_iomap_contiguous(dm.iova + ((uintptr_t)va - start));
    return GPUMEM_OK;
}

static void gpumem__nvmectl_vfio_unmap(gpumem_nvmectl_dma *d) {
    gpumem__nvmectl_iommu *m = (gpumem__nvmectl_iommu *)d->iommu_;
    struct vfio_iommu_type1_dma_unmap du;
    uint32_t i;
    memset(&du, 0, sizeof du);
    du.argsz = sizeof du;
    du.iova = d->map_iova_;
    du.size = d->mapped_bytes_;
    pthread_mutex_lock(&m->lock);
    /* After gpumem_nvmectl_close the container has no IOMMU left (the group
     * left it, and every mapping went with it), and this fails harmlessly. */
    (void)ioctl(m->container, VFIO_IOMMU_UNMAP_DMA, &du);
    for (i = 0; i < m->n_ranges; i++)
        if (m->ranges[i].iova == d->map_iova_) {
            m->ranges[i] = m->ranges[--m->n_ranges];
            break;
        }
    m->pinned -= d->mapped_bytes_;
    /* The newest range's IOVAs are reused; older ones are not (the space is
     * 2^39 bytes or more, and buffers are long-lived). */
    if (d->map_iova_ + d->mapped_bytes_ + GPUMEM_NVME_PAGE_BYTES == m->next_iova) m->next_iova = d->map_iova_;
    pthread_mutex_unlock(&m->lock);
    gpumem__nvmectl_iommu_unref(m);
}

gpumem_status gpumem_nvmectl_iova(gpumem_nvmectl *c, const void *va, size_t len, uint64_t *iova) {
    gpumem__nvmectl_iommu *m;
    gpumem_status st = GPUMEM_ERANGE;
    uintptr_t v = (uintptr_t)va;
    uint32_t i;
    if (!c || !va || !iova) return GPUMEM_ENULL;
    if (!(m = c->iommu)) return GPUMEM_ESTATE;
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->n_ranges; i++) {
        const gpumem__nvmectl_range *r = &m->ranges[i];
        if (v >= r->va && v - r->va <= r->bytes && len <= r->bytes - (v - r->va)) {
            *iova = r->iova + (v - r->va);
            st = GPUMEM_OK;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

int gpumem_nvmectl_uses_vfio(const gpumem_nvmectl *c) { return c && c->iommu; }

/* ---- DMA memory ------------------------------------------------------------ */

void gpumem_nvmectl_dma_free(gpumem_nvmectl_dma *d) {
    if (!d) return;
    if (d->iommu_) gpumem__nvmectl_vfio_unmap(d);
    else if (d->registered && d->map_va_) munlock((void *)d->map_va_, d->mapped_bytes_);
    if (d->va && !d->registered) munmap(d->va, d->mapped_bytes_);
    GPUMEM_FREE(d->pages_);
    memset(d, 0, sizeof *d);
}

void gpumem_nvmectl_dma_unregister(gpumem_nvmectl_dma *d) { gpumem_nvmectl_dma_free(d); }

/* No IOMMU: the physical address of each of the n_pages pages from `start`
 * (locked) into out->pages_ and out->map, from /proc/self/pagemap: one
 * 64-bit word per virtual page, bit 63 = present, bits 54:0 = page frame
 * number (0 unless CAP_SYS_ADMIN). */
static gpumem_status gpumem__nvmectl_locate(gpumem_nvmectl *ctl, gpumem_nvmectl_dma *out, uintptr_t start,
                                            size_t n_pages) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES;
    size_t i;
    int fd;
    out->pages_ = (uint64_t *)GPUMEM_MALLOC(n_pages * sizeof(uint64_t));
    if (!out->pages_) return gpumem__nvmectl_fail(ctl, GPUMEM_ENOMEM, "page table of %zu pages", n_pages);
    fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "open /proc/self/pagemap: %s", strerror(errno));
    for (i = 0; i < n_pages; i++) {
        uint64_t entry = 0, pfn;
        uintptr_t v = start + i * pg;
        if (pread(fd, &entry, 8, (off_t)((v / pg) * 8)) != 8) {
            int e = errno;
            close(fd);
            return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "read /proc/self/pagemap: %s", strerror(e));
        }
        pfn = entry & ((1ull << 55) - 1);
        if (!(entry >> 63) || pfn == 0) {
            close(fd);
            return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "no physical address in /proc/self/pagemap (needs root, "
                                                           "CAP_SYS_ADMIN; or use vfio-pci, docs/ssd.md)");
        }
        out->pages_[i] = pfn * pg;
    }
    close(fd);
    out->map.iova = 0;
    out->map.pages = out->pages_;
    out->map.offset = 0;
    return GPUMEM_OK;
}

gpumem_status gpumem_nvmectl_dma_alloc(gpumem_nvmectl *ctl, size_t bytes, uint32_t flags, gpumem_nvmectl_dma *out) {
    const size_t pg = GPUMEM_NVME_PAGE_BYTES;
    size_t n_pages, i;
    gpumem_status st;
    void *va = MAP_FAILED;
    int huge = 0;
    if (!out) return GPUMEM_ENULL;
    memset(out, 0, sizeof *out);
    if (bytes == 0) return GPUMEM_EINVAL;
    if (ctl && ctl->iommu) {
        /* Ordinary pages: the IOMMU makes any range contiguous in IOVA. */
        out->mapped_bytes_ = GPUMEM_ALIGN_UP(bytes, pg);
        va = mmap(NULL, out->mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | GPUMEM__MAP_ANONYMOUS, -1, 0);
        if (va == MAP_FAILED)
            return gpumem__nvmectl_fail(ctl, GPUMEM_ENOMEM, "mmap of %zu bytes: %s", bytes, strerror(errno));
        if ((st = gpumem__nvmectl_vfio_map(ctl, va, bytes, out)) != GPUMEM_OK) {
            munmap(va, GPUMEM_ALIGN_UP(bytes, pg));
            memset(out, 0, sizeof *out);
            return st;
        }
        out->va = va; /* zero: fresh anonymous pages */
        out->bytes = bytes;
        return GPUMEM_OK;
    }
    if ((flags & GPUMEM_NVMECTL_DMA_CONTIGUOUS) && bytes > GPUMEM__HUGE_PAGE_BYTES)
        return gpumem__nvmectl_fail(ctl, GPUMEM_EINVAL, "contiguous DMA memory of %zu bytes: at most one 2 MiB "
                                                         "huge page", bytes);
    if (!(flags & GPUMEM_NVMECTL_DMA_SMALL_PAGES) && (!ctl || !ctl->cfg.small_pages)) {
        /* Huge pages do not move and are physically contiguous. */
        out->mapped_bytes_ = GPUMEM_ALIGN_UP(bytes, GPUMEM__HUGE_PAGE_BYTES);
        va = mmap(NULL, out->mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | GPUMEM__MAP_ANONYMOUS |
                  GPUMEM__MAP_HUGETLB, -1, 0);
        huge = va != MAP_FAILED;
    }
    if (va == MAP_FAILED) {
        out->mapped_bytes_ = GPUMEM_ALIGN_UP(bytes, pg);
        va = mmap(NULL, out->mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | GPUMEM__MAP_ANONYMOUS |
                  GPUMEM__MAP_LOCKED, -1, 0);
        if (va == MAP_FAILED)
            return gpumem__nvmectl_fail(ctl, GPUMEM_ENOMEM, "mmap of %zu bytes: %s", bytes, strerror(errno));
        /* No transparent huge pages: khugepaged would copy these pages into
         * a huge page, locked or not, and the controller would go on using
         * the old physical addresses. Before the first touch, so no huge
         * page is put there at fault time either. */
        if (madvise(va, out->mapped_bytes_, GPUMEM__MADV_NOHUGEPAGE) != 0 && errno != EINVAL) {
            int e = errno;
            munmap(va, out->mapped_bytes_);
            return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "madvise(MADV_NOHUGEPAGE): %s", strerror(e));
        }
    }
    out->va = va;
    out->bytes = bytes;
    out->huge = huge;
    /* Touch every page (so each has a frame), then lock it in RAM: an
     * unlocked page may be swapped out and come back at another address
     * while the controller still writes to the old one. */
    memset(va, 0, out->mapped_bytes_);
    if (mlock(va, out->mapped_bytes_) != 0) {
        int e = errno;
        gpumem_nvmectl_dma_free(out);
        return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "mlock of %zu bytes: %s", bytes, strerror(e));
    }
    n_pages = (bytes + pg - 1) / pg;
    if ((st = gpumem__nvmectl_locate(ctl, out, (uintptr_t)va, n_pages)) != GPUMEM_OK) {
        gpumem_nvmectl_dma_free(out);
        return st;
    }
    if (flags & GPUMEM_NVMECTL_DMA_CONTIGUOUS) {
        for (i = 1; i < n_pages; i++) {
            if (out->pages_[i] != out->pages_[0] + i * pg) {
                gpumem_nvmectl_dma_free(out);
                return gpumem__nvmectl_fail(ctl, GPUMEM_ENOMEM, "%zu bytes of physically contiguous memory needed "
                                                                 "and no huge page available (reserve some: echo 64 "
                                                                 "> /proc/sys/vm/nr_hugepages)", bytes);
            }
        }
        out->map = gpumem_nvme_iomap_contiguous(out->pages_[0]);
    }
    return GPUMEM_OK;
}

gpumem_status gpumem_nvmectl_dma_register(gpumem_nvmectl *ctl, void *va, size_t bytes, gpumem_nvmectl_dma *out) {
    const uintptr_t pg = GPUMEM_NVME_PAGE_BYTES;
    uintptr_t start = (uintptr_t)va & ~(pg - 1);
    gpumem_status st;
    if (!ctl || !va || !out) return GPUMEM_ENULL;
    memset(out, 0, sizeof *out);
    if (bytes == 0) return GPUMEM_EINVAL;
    if (ctl->iommu) {
        if ((st = gpumem__nvmectl_vfio_map(ctl, va, bytes, out)) != GPUMEM_OK) {
            memset(out, 0, sizeof *out);
            return st;
        }
    } else {
        /* No IOMMU: locked, so the pages keep their frames, then located. */
        size_t mapped = GPUMEM_ALIGN_UP((uintptr_t)va + bytes, pg) - start;
        if (mlock((void *)start, mapped) != 0)
            return gpumem__nvmectl_fail(ctl, GPUMEM_ESYS, "mlock of %zu bytes: %s", mapped, strerror(errno));
        out->map_va_ = start;
        out->mapped_bytes_ = mapped;
        out->registered = 1;
        if ((st = gpumem__nvmectl_locate(ctl, out, start, mapped / pg)) != GPUMEM_OK) {
            gpumem_nvmectl_dma_free(out);
            return st;
        }
        out->map.offset = (uintptr_t)va - start;
    }
    out->va = va;
    out->bytes = bytes;
    out->registered = 1;
    return GPUMEM_OK;
}

gpumem_status gpumem_nvmectl_prp(const gpumem_nvmectl_dma *dma, size_t off, uint64_t len,
                                 const gpumem_nvmectl_dma *list, size_t list_off, uint64_t *prp1, uint64_t *prp2) {
    gpumem_nvme_iomap data, lmap;
    if (!dma) return GPUMEM_ENULL;
    if (off > dma->bytes || len > dma->bytes - off || (list && list_off >= list->bytes)) return GPUMEM_ERANGE;
    data = gpumem_nvme_iomap_sub(&dma->map, off);
    if (!list) return gpumem_nvme_prp_build(&data, len, NULL, NULL, 0, prp1, prp2);
    lmap = gpumem_nvme_iomap_sub(&list->map, list_off);
    return gpumem_nvme_prp_build(&data, len, (uint64_t *)((char *)list->va + list_off), &lmap,
                                 (uint32_t)((list->bytes - list_off) / 8), prp1, prp2);
}

/* ---- commands -------------------------------------------------------------- */

gpumem_status gpumem_nvmectl_wait(gpumem_nvmectl *c, gpumem_nvme_qp *qp, gpumem_nvme_req *req,
                                  uint32_t timeout_ms) {
    uint64_t start = gpumem_clock_ns(), last_check = start;
    gpumem_backoff b = gpumem_backoff_start();
    if (!c || !qp || !req) return GPUMEM_ENULL;
    for (;;) {
        gpumem_status st = gpumem_nvme_qp_poll(qp, req);
        uint64_t now;
        if (st != GPUMEM_EAGAIN) return st;
        if (gpumem_backoff_pause(&b)) continue;
        /* Nobody notifies a waiter when the controller writes a completion
         * by DMA, so sleep briefly rather than park. */
        gpumem__host_sleep_ns(20000L);
        now = gpumem_clock_ns();
        /* A register read costs a trip to the device (a VM exit under
         * emulation), so look at CSTS once a millisecond, not every round. */
        if (now - last_check > 1000000ull) {
            last_check = now;
            if ((st = gpumem_nvmectl_check(c)) != GPUMEM_OK) return st;
            if (now - start > (uint64_t)timeout_ms * 1000000ull)
                return gpumem__nvmectl_fail(c, GPUMEM_ETIMEDOUT, "queue %u: command %u not completed after %u ms",
                                            qp->qid, req->cid, timeout_ms);
        }
    }
}

gpumem_status gpumem_nvmectl_admin(gpumem_nvmectl *c, const gpumem_nvme_cmd *cmd, gpumem_nvme_cpl *cpl) {
    gpumem_nvme_req req;
    gpumem_status st;
    if (!c || !cmd) return GPUMEM_ENULL;
    memset(&req, 0, sizeof req); /* never submitted (issue 30: submit reads the request's state) */
    pthread_mutex_lock(&c->admin_lock);
    /* One command at a time under the lock, so a command ID is always free
     * (nobody blocks holding one: the whole budget may be used). */
    st = gpumem__qp_submit_within(&c->admin, cmd, (const gpumem_nvme_iomap *)0, &req, c->admin.cid_limit);
    if (st == GPUMEM_OK) st = gpumem_nvmectl_wait(c, &c->admin, &req, c->cfg.timeout_ms);
    if (st == GPUMEM_OK || st == GPUMEM_EIO) /* a completion arrived; gpumem_nvmectl_check reads it unlocked */
        gpumem_atomic_fetch_add_u32(&c->admin_done, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    if (st == GPUMEM_ETIMEDOUT || st == GPUMEM_ENODEV) gpumem__cid_orphan(&c->admin, req.cid); /* freed if it ever completes */
    pthread_mutex_unlock(&c->admin_lock);
    if (st == GPUMEM_EIO) {
        uint16_t sf = gpumem_nvme_cpl_status(&req.cpl);
        gpumem__nvmectl_fail(c, st, "admin opcode 0x%02x refused: %s (SCT %u SC 0x%02x)", cmd->cdw0 & 0xFFu,
                             gpumem_nvme_status_str(sf), GPUMEM_NVME_SCT(sf), GPUMEM_NVME_SC(sf));
    }
    if (cpl && (st == GPUMEM_OK || st == GPUMEM_EIO)) *cpl = req.cpl;
    return st;
}

/* An admin command with the fields these functions use. */
static gpumem_nvme_cmd gpumem__admin_cmd(uint8_t opcode, uint32_t nsid, uint64_t prp1, uint32_t cdw10,
                                         uint32_t cdw11) {
    gpumem_nvme_cmd c;
    gpumem__cmd_clear(&c);
    c.cdw0 = opcode;
    c.nsid = nsid;
    c.prp1 = prp1;
    c.cdw10 = cdw10;
    c.cdw11 = cdw11;
    return c;
}

/* Identify into the scratch page (4096 bytes, one page: PRP1 only). */
static gpumem_status gpumem__nvmectl_identify(gpumem_nvmectl *c, uint32_t cns, uint32_t nsid) {
    gpumem_nvme_cmd cmd = gpumem__admin_cmd(GPUMEM__ADMIN_IDENTIFY, nsid, gpumem_nvme_iomap_at(&c->scratch.map, 0),
                                            cns, 0);
    memset(c->scratch.va, 0, 4096);
    return gpumem_nvmectl_admin(c, &cmd, NULL);
}

static void gpumem__copy_id_string(char *dst, const unsigned char *src, size_t n) {
    memcpy(dst, src, n); /* space padded ASCII */
    dst[n] = 0;
    while (n > 0 && (dst[n - 1] == ' ' || dst[n - 1] == 0)) dst[--n] = 0;
}

static uint32_t gpumem__le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Identify Controller and Identify Namespace into c->info. */
static gpumem_status gpumem__nvmectl_read_identity(gpumem_nvmectl *c) {
    const unsigned char *id = (const unsigned char *)c->scratch.va;
    gpumem_nvmectl_info *in = &c->info;
    gpumem_status st;
    uint64_t nsze, max_blocks;
    uint32_t lbaf, lbads, ms, mdts;
    if ((st = gpumem__nvmectl_identify(c, GPUMEM__IDENTIFY_CONTROLLER, 0)) != GPUMEM_OK) return st;
    in->vid = (uint16_t)(id[0] | id[1] << 8);
    in->ssvid = (uint16_t)(id[2] | id[3] << 8);
    gpumem__copy_id_string(in->serial, id + 4, 20);
    gpumem__copy_id_string(in->model, id + 24, 40);
    gpumem__copy_id_string(in->firmware, id + 64, 8);
    mdts = id[77]; /* 2^MDTS minimum-size (4 KiB, CAP.MPSMIN = 0) pages; 0 = no limit */
    in->max_transfer_bytes = mdts ? (uint64_t)GPUMEM_NVME_PAGE_BYTES << mdts : 0;
    in->n_namespaces = gpumem__le32(id + 516);
    /* SQES/CQES: required (low nibble) and largest (high nibble) entry sizes. */
    if ((id[512] && ((id[512] & 0xFu) > 6 || (id[512] >> 4) < 6)) ||
        (id[513] && ((id[513] & 0xFu) > 4 || (id[513] >> 4) < 4)))
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller does not take 64-byte SQ / 16-byte CQ entries "
                                                       "(SQES 0x%02x CQES 0x%02x)", id[512], id[513]);

    if ((st = gpumem__nvmectl_identify(c, GPUMEM__IDENTIFY_NAMESPACE, c->cfg.nsid)) != GPUMEM_OK) return st;
    nsze = (uint64_t)gpumem__le32(id) | ((uint64_t)gpumem__le32(id + 4) << 32);
    if (nsze == 0) /* an inactive namespace ID identifies as all zeroes */
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "namespace %u is not active (Identify: size 0; the "
                                                       "controller has %u namespace IDs)", c->cfg.nsid,
                                    in->n_namespaces);
    lbaf = gpumem__le32(id + 128 + 4 * (id[26] & 0xFu)); /* the format FLBAS selects */
    ms = lbaf & 0xFFFFu;
    lbads = (lbaf >> 16) & 0xFFu;
    if (lbads < 9 || lbads > 16 || ms != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "namespace %u: LBA format of 2^%u bytes with %u metadata "
                                                       "bytes is not supported (512 B..64 KiB, no metadata)",
                                    c->cfg.nsid, lbads, ms);
    max_blocks = in->max_transfer_bytes ? in->max_transfer_bytes >> lbads : 65536u;
    if (max_blocks > 65536u) max_blocks = 65536u; /* the NLB field's limit */
    if (max_blocks == 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "MDTS of %llu bytes is less than one block",
                                    (unsigned long long)in->max_transfer_bytes);
    in->ns.nsid = c->cfg.nsid;
    in->ns.lba_shift = lbads;
    in->ns.n_blocks = nsze;
    in->ns.max_blocks = (uint32_t)max_blocks;
    return GPUMEM_OK;
}

/* Initialise a pair on controller memory. gpumem_nvme_qp_init zeroes the
 * doorbells it is given, but a controller must not see a doorbell write for
 * a queue it does not have yet (QEMU reports one as a guest error; a real
 * controller may raise an asynchronous error), and a new queue's doorbells
 * are zero anyway. So the pair is initialised on scratch words and then
 * pointed at the registers, before any thread uses it. */
static gpumem_status gpumem__nvmectl_qp_init(gpumem_nvmectl *c, gpumem_nvme_qp *qp, gpumem_nvme_qp_desc *d) {
    uint32_t scratch_doorbells[2];
    gpumem_status st;
    d->sq_doorbell = &scratch_doorbells[0];
    d->cq_doorbell = &scratch_doorbells[1];
    if ((st = gpumem_nvme_qp_init(qp, d)) != GPUMEM_OK)
        return gpumem__nvmectl_fail(c, st, "queue pair %u: init failed", d->qid);
    qp->sq_doorbell = gpumem__nvmectl_doorbell(c, d->qid, 0);
    qp->cq_doorbell = gpumem__nvmectl_doorbell(c, d->qid, 1);
    return GPUMEM_OK;
}

/* The two placements of a pair of `depth` entries (gpumem_nvme_qp_desc):
 * the rings in DMA memory (contiguous), the client state in ordinary memory
 * the controller never sees; the caller's signals block is ordinary memory
 * too. */
static gpumem_status gpumem__nvmectl_ring_alloc(gpumem_nvmectl *c, uint32_t depth, uint32_t n_cids,
                                                gpumem_nvmectl_dma *sq, gpumem_nvmectl_dma *cq, void **state,
                                                gpumem_nvme_qp_signals *signals, gpumem_nvme_qp_desc *d) {
    gpumem_status st;
    size_t state_bytes = gpumem_nvme_qp_state_bytes(depth, n_cids);
    if ((st = gpumem_nvmectl_dma_alloc(c, (size_t)depth * sizeof(gpumem_nvme_cmd), GPUMEM_NVMECTL_DMA_CONTIGUOUS,
                                       sq)) != GPUMEM_OK)
        return st;
    if ((st = gpumem_nvmectl_dma_alloc(c, (size_t)depth * sizeof(gpumem_nvme_cpl), GPUMEM_NVMECTL_DMA_CONTIGUOUS,
                                       cq)) != GPUMEM_OK)
        return st;
    *state = GPUMEM_MALLOC(state_bytes + 16);
    if (!*state) return gpumem__nvmectl_fail(c, GPUMEM_ENOMEM, "queue state of %zu bytes", state_bytes);
    memset(d, 0, sizeof *d);
    d->depth = depth;
    d->n_cids = n_cids;
    d->sq = (gpumem_nvme_cmd *)sq->va;
    d->cq = (gpumem_nvme_cpl *)cq->va;
    d->signals = signals;
    d->state = (void *)GPUMEM_ALIGN_UP((uintptr_t)*state, 16);
    d->state_bytes = state_bytes;
    return GPUMEM_OK;
}

/* PCI command register bits 1 (memory space) and 2 (bus master), through the
 * VFIO device's config region or the device's sysfs config file. */
static gpumem_status gpumem__nvmectl_pci_command(gpumem_nvmectl *c, uint16_t set, uint16_t clear) {
    char path[200];
    unsigned char cmd[2];
    uint16_t v;
    int fd = c->vfio_device;
    off_t at = (off_t)c->config_off + 4;
    snprintf(path, sizeof path, "%s/config", c->sysfs_dir);
    if (fd < 0 && (fd = open(path, O_RDWR)) < 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "open %s: %s", path, strerror(errno));
    if (pread(fd, cmd, 2, at) != 2) {
        if (fd != c->vfio_device) close(fd);
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "read PCI command register: %s", strerror(errno));
    }
    v = (uint16_t)(((cmd[0] | cmd[1] << 8) | set) & ~clear);
    cmd[0] = (unsigned char)v;
    cmd[1] = (unsigned char)(v >> 8);
    if (pwrite(fd, cmd, 2, at) != 2) {
        if (fd != c->vfio_device) close(fd);
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "write PCI command register: %s", strerror(errno));
    }
    if (fd != c->vfio_device) close(fd);
    return GPUMEM_OK;
}

/* The last path component of a sysfs link ("" if there is no link). */
static void gpumem__sysfs_link_name(const char *dir, const char *name, char *out, size_t out_bytes) {
    char path[200], link[200];
    ssize_t n;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    n = readlink(path, link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    const char *name_at = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
    size_t len = strlen(name_at) < out_bytes - 1 ? strlen(name_at) : out_bytes - 1;
    memcpy(out, name_at, len);
    out[len] = 0;
}

/* vfio-pci with an IOMMU: the group joins a new type1 container, and BAR0
 * and config space are regions of the device fd. Needs read-write access to
 * /dev/vfio/N (and /dev/vfio/vfio, which is world-accessible), nothing else.
 * While the device fd is open, vfio-pci keeps the device in D0. */
static gpumem_status gpumem__nvmectl_vfio_open(gpumem_nvmectl *c, const char *group) {
    struct vfio_group_status gs;
    struct vfio_region_info ri;
    char path[80];
    gpumem__nvmectl_iommu *m;
    int container = open("/dev/vfio/vfio", O_RDWR);
    if (container < 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "open /dev/vfio/vfio: %s (modprobe vfio-pci)", strerror(errno));
    if (ioctl(container, VFIO_GET_API_VERSION) != VFIO_API_VERSION ||
        ioctl(container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) <= 0) {
        close(container);
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "VFIO has no type1v2 IOMMU (modprobe vfio_iommu_type1)");
    }
    m = (gpumem__nvmectl_iommu *)GPUMEM_MALLOC(sizeof *m);
    if (!m) {
        close(container);
        return gpumem__nvmectl_fail(c, GPUMEM_ENOMEM, "VFIO container state");
    }
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->refs = 1;
    m->container = container;
    /* Above 4 GiB: clear of the x86 MSI window (0xFEE00000) and of low
     * reserved regions; every IOMMU translates at least 39 bits. */
    m->next_iova = 1ull << 32;
    c->iommu = m;
    snprintf(path, sizeof path, "/dev/vfio/%s", group);
    if ((c->vfio_group = open(path, O_RDWR)) < 0) {
        int e = errno;
        if (e == EACCES || e == EPERM)
            return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "open %s: %s: this user needs read-write access to it "
                                        "(chown USER %s, or a udev rule; docs/ssd.md)", path,
                                        strerror(e), path);
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "open %s: %s%s", path, strerror(e),
                                    e == EBUSY ? " (another process holds the group)" : "");
    }
    memset(&gs, 0, sizeof gs);
    gs.argsz = sizeof gs;
    if (ioctl(c->vfio_group, VFIO_GROUP_GET_STATUS, &gs) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO_GROUP_GET_STATUS: %s", strerror(errno));
    if (!(gs.flags & VFIO_GROUP_FLAGS_VIABLE))
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "IOMMU group %s is not viable: bind every device in "
                                    "/sys/kernel/iommu_groups/%s/devices to vfio-pci (or to no driver)", group, group);
    if (ioctl(c->vfio_group, VFIO_GROUP_SET_CONTAINER, &container) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO_GROUP_SET_CONTAINER: %s", strerror(errno));
    if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO_SET_IOMMU (type1v2): %s", strerror(errno));
    if ((c->vfio_device = ioctl(c->vfio_group, VFIO_GROUP_GET_DEVICE_FD, c->pci_addr)) < 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO_GROUP_GET_DEVICE_FD %s: %s", c->pci_addr,
                                    strerror(errno));
    memset(&ri, 0, sizeof ri);
    ri.argsz = sizeof ri;
    ri.index = VFIO_PCI_CONFIG_REGION_INDEX;
    if (ioctl(c->vfio_device, VFIO_DEVICE_GET_REGION_INFO, &ri) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO config region: %s", strerror(errno));
    c->config_off = ri.offset;
    memset(&ri, 0, sizeof ri);
    ri.argsz = sizeof ri;
    ri.index = VFIO_PCI_BAR0_REGION_INDEX;
    if (ioctl(c->vfio_device, VFIO_DEVICE_GET_REGION_INFO, &ri) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "VFIO BAR0 region: %s", strerror(errno));
    if (ri.size < 0x2000 || !(ri.flags & VFIO_REGION_INFO_FLAG_MMAP))
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "BAR0 (%llu bytes%s) is too small for an NVMe controller or "
                                    "cannot be mapped", (unsigned long long)ri.size,
                                    ri.flags & VFIO_REGION_INFO_FLAG_MMAP ? "" : ", no mmap");
    c->bar_bytes = (size_t)ri.size;
    c->bar = (unsigned char *)mmap(NULL, c->bar_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->vfio_device,
                                   (off_t)ri.offset);
    if (c->bar == (unsigned char *)MAP_FAILED) {
        c->bar = NULL;
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "mmap of VFIO BAR0: %s", strerror(errno));
    }
    return GPUMEM_OK;
}

/* The device exists, is bound to a user-space driver, and BAR0 is mapped:
 * through VFIO where the device is bound to vfio-pci and has an IOMMU group,
 * through sysfs otherwise. */
static gpumem_status gpumem__nvmectl_map(gpumem_nvmectl *c) {
    char path[200], driver[64], group[32], type[32] = "";
    struct stat sb;
    int fd;
    snprintf(c->sysfs_dir, sizeof c->sysfs_dir, "/sys/bus/pci/devices/%s", c->pci_addr);
    if (stat(c->sysfs_dir, &sb) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "no such PCI device (%s)", c->sysfs_dir);
    gpumem__sysfs_link_name(c->sysfs_dir, "driver", driver, sizeof driver);
    gpumem__sysfs_link_name(c->sysfs_dir, "iommu_group", group, sizeof group);
    if (strcmp(driver, "uio_pci_generic") != 0 && strcmp(driver, "vfio-pci") != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "not bound to vfio-pci or uio_pci_generic (driver: %s); "
                                                       "see docs/ssd.md",
                                    driver[0] ? driver : "none");
    if (group[0]) {
        FILE *f;
        snprintf(path, sizeof path, "%s/iommu_group/type", c->sysfs_dir);
        if ((f = fopen(path, "r")) != NULL) {
            if (!fgets(type, sizeof type, f)) type[0] = 0;
            type[strcspn(type, "\n")] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/dev/vfio/%s", group);
        /* vfio-pci in no-IOMMU mode names its groups noiommu-N: no container
         * maps anything there, so it takes the physical-address path. */
        if (strcmp(driver, "vfio-pci") == 0 && stat(path, &sb) == 0) return gpumem__nvmectl_vfio_open(c, group);
        /* An IOMMU domain that translates lets the device reach only memory
         * mapped in it, and uio maps none: the first DMA would fault. */
        if (strcmp(driver, "uio_pci_generic") == 0 && type[0] && strcmp(type, "identity") != 0)
            return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "bound to uio_pci_generic, but its IOMMU group %s "
                                        "translates DMA (type %s), so the controller could not reach its queues; "
                                        "bind the device to vfio-pci instead (docs/ssd.md)",
                                        group, type);
    }
    snprintf(path, sizeof path, "%s/resource0", c->sysfs_dir);
    fd = open(path, O_RDWR | O_SYNC);
    if (fd < 0) return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || sb.st_size < 0x2000) {
        close(fd);
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "BAR0 (%s) is too small for an NVMe controller", path);
    }
    c->bar_bytes = (size_t)sb.st_size;
    c->bar = (unsigned char *)mmap(NULL, c->bar_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping stays */
    if (c->bar == (unsigned char *)MAP_FAILED) {
        c->bar = NULL;
        return gpumem__nvmectl_fail(c, GPUMEM_ESYS, "mmap %s: %s", path, strerror(errno));
    }
    return GPUMEM_OK;
}

/* Reset, admin queues, enable. */
static gpumem_status gpumem__nvmectl_enable(gpumem_nvmectl *c) {
    gpumem_nvme_qp_desc d;
    gpumem_status st;
    uint32_t depth = c->cfg.admin_depth, cc;
    c->cap = gpumem__reg_read64(c, GPUMEM__REG_CAP);
    if (c->cap == ~0ull) return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller does not answer (CAP all ones)");
    c->info.version = gpumem__reg_read32(c, GPUMEM__REG_VS);
    c->info.max_queue_entries = (uint32_t)(c->cap & 0xFFFFu) + 1u;
    c->info.doorbell_stride = 4u << ((c->cap >> 32) & 0xFu);
    c->info.ready_timeout_ms = (uint32_t)((c->cap >> 24) & 0xFFu) * 500u;
    if (c->info.ready_timeout_ms == 0) c->info.ready_timeout_ms = 500;
    if (!((c->cap >> 37) & 1u))
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller lacks the NVM command set (CAP.CSS)");
    if (((c->cap >> 48) & 0xFu) != 0)
        return gpumem__nvmectl_fail(c, GPUMEM_ENODEV, "controller's smallest page is over 4 KiB (CAP.MPSMIN %u)",
                                    (unsigned)((c->cap >> 48) & 0xFu));
    if (depth > c->info.max_queue_entries) depth = c->info.max_queue_entries;

    /* Disable: clears every queue and any state a previous user left. */
    cc = gpumem__reg_read32(c, GPUMEM__REG_CC);
    if (cc & GPUMEM__CC_EN) gpumem__reg_write32(c, GPUMEM__REG_CC, cc & ~GPUMEM__CC_EN);
    if ((st = gpumem__nvmectl_wait_csts(c, GPUMEM__CSTS_RDY, 0, c->info.ready_timeout_ms, "reset")) != GPUMEM_OK)
        return st;

    if ((st = gpumem__nvmectl_ring_alloc(c, depth, depth, &c->admin_sq, &c->admin_cq, &c->admin_state,
                                         &c->admin_signals, &d)) != GPUMEM_OK)
        return st;
    d.qid = 0;
    d.ns.nsid = 0; /* admin commands carry their own; the pair only needs a valid shape */
    d.ns.lba_shift = 9;
    d.ns.n_blocks = 1;
    d.ns.max_blocks = 1;
    if ((st = gpumem__nvmectl_qp_init(c, &c->admin, &d)) != GPUMEM_OK) return st;
    if ((st = gpumem_nvmectl_dma_alloc(c, GPUMEM_NVME_PAGE_BYTES, GPUMEM_NVMECTL_DMA_SMALL_PAGES, &c->scratch)) !=
        GPUMEM_OK)
        return st;

    /* Admin queue registers are written only while disabled. */
    gpumem__reg_write32(c, GPUMEM__REG_AQA, ((depth - 1) << 16) | (depth - 1));
    gpumem__reg_write64(c, GPUMEM__REG_ASQ, gpumem_nvme_iomap_at(&c->admin_sq.map, 0));
    gpumem__reg_write64(c, GPUMEM__REG_ACQ, gpumem_nvme_iomap_at(&c->admin_cq.map, 0));
    /* NVM command set, 4 KiB pages (MPS 0), round-robin arbitration,
     * 64-byte SQ and 16-byte CQ entries. */
    gpumem__reg_write32(c, GPUMEM__REG_CC, GPUMEM__CC_IOSQES(6) | GPUMEM__CC_IOCQES(4) | GPUMEM__CC_EN);
    if ((st = gpumem__nvmectl_wait_csts(c, GPUMEM__CSTS_RDY, GPUMEM__CSTS_RDY, c->info.ready_timeout_ms,
                                        "enable")) != GPUMEM_OK)
        return st;
    c->enabled = 1;
    return GPUMEM_OK;
}

gpumem_nvmectl_config gpumem_nvmectl_config_default(void) { return gpumem_nvmectl_config_resolved(NULL); }

gpumem_nvmectl_config gpumem_nvmectl_config_resolved(const gpumem_nvmectl_config *in) {
    gpumem_nvmectl_config c;
    if (in) c = *in;
    else memset(&c, 0, sizeof c);
    if (!c.nsid) c.nsid = 1;
    if (!c.max_pairs) c.max_pairs = 16;
    if (!c.admin_depth) c.admin_depth = 32;
    if (!c.timeout_ms) c.timeout_ms = 10000;
    return c;
}

gpumem_status gpumem_nvmectl_open(const gpumem_nvmectl_config *cfg, gpumem_nvmectl **out) {
    gpumem_nvmectl *c;
    gpumem_nvme_cmd cmd;
    gpumem_nvme_cpl cpl;
    gpumem_status st;
    uint32_t nsqa, ncqa;
    size_t addr_len;
    if (!cfg || !out || !cfg->pci_addr) return GPUMEM_ENULL;
    *out = NULL;
    if (cfg->error && cfg->error_bytes) cfg->error[0] = 0;
    c = (gpumem_nvmectl *)GPUMEM_MALLOC(sizeof *c);
    if (!c) return GPUMEM_ENOMEM;
    memset(c, 0, sizeof *c);
    addr_len = strlen(cfg->pci_addr);
    c->cfg = gpumem_nvmectl_config_resolved(cfg);
    cfg = &c->cfg; /* from here on, the resolved values */
    snprintf(c->pci_addr, sizeof c->pci_addr, "%s", cfg->pci_addr);
    c->cfg.pci_addr = c->pci_addr;
    c->vfio_group = c->vfio_device = -1;
    pthread_mutex_init(&c->admin_lock, NULL);
    if (cfg->max_pairs > 65535 || !gpumem__valid_count(cfg->admin_depth, 64) ||
        addr_len >= sizeof c->pci_addr) {
        st = gpumem__nvmectl_fail(c, GPUMEM_EINVAL, "open: max_pairs (1..65535), admin_depth (power of two 2..64) "
                                  "or pci_addr (under 64 characters) out of range");
        goto fail;
    }
    if ((st = gpumem__nvmectl_map(c)) != GPUMEM_OK) goto fail;
    /* Memory space on (to reach BAR0), bus mastering on (for the controller's DMA). */
    if ((st = gpumem__nvmectl_pci_command(c, 0x6, 0)) != GPUMEM_OK) goto fail;
    if ((st = gpumem__nvmectl_enable(c)) != GPUMEM_OK) goto fail;
    if ((st = gpumem__nvmectl_read_identity(c)) != GPUMEM_OK) goto fail;
    /* Number of Queues, both counts zero based; the answer may differ either way. */
    cmd = gpumem__admin_cmd(GPUMEM__ADMIN_SET_FEATURES, 0, 0, GPUMEM__FEATURE_NUM_QUEUES,
                            ((cfg->max_pairs - 1) << 16) | (cfg->max_pairs - 1));
    if ((st = gpumem_nvmectl_admin(c, &cmd, &cpl)) != GPUMEM_OK) goto fail;
    nsqa = (cpl.dw0 & 0xFFFFu) + 1;
    ncqa = (cpl.dw0 >> 16) + 1;
    c->info.pairs_granted = nsqa < ncqa ? nsqa : ncqa;
    if (c->info.pairs_granted > cfg->max_pairs) c->info.pairs_granted = cfg->max_pairs;
    *out = c;
    return GPUMEM_OK;
fail:
    /* The handle goes away: the reason goes to the caller's buffer. */
    if (cfg->error && cfg->error_bytes) snprintf(cfg->error, cfg->error_bytes, "%s", c->error);
    gpumem_nvmectl_close(c);
    return st;
}

const gpumem_nvmectl_info *gpumem_nvmectl_get_info(const gpumem_nvmectl *c) { return c ? &c->info : NULL; }
const char *gpumem_nvmectl_error(const gpumem_nvmectl *c) { return c ? c->error : "no controller"; }

static void gpumem__nvmectl_pair_free(gpumem__nvmectl_pair *p) {
    gpumem_nvmectl_dma_free(&p->sq_mem);
    gpumem_nvmectl_dma_free(&p->cq_mem);
    gpumem_nvmectl_dma_free(&p->prp_mem);
    GPUMEM_FREE(p->state);
    GPUMEM_FREE(p);
}

/* Delete pair p's I/O SQ (is_cq 0) or CQ (1). */
static gpumem_status gpumem__nvmectl_delete_queue(gpumem_nvmectl *c, const gpumem__nvmectl_pair *p, int is_cq) {
    gpumem_nvme_cmd cmd = gpumem__admin_cmd(is_cq ? GPUMEM__ADMIN_DELETE_CQ : GPUMEM__ADMIN_DELETE_SQ, 0, 0,
                                            p->qp.qid, 0);
    return gpumem_nvmectl_admin(c, &cmd, NULL);
}

/* Create pair p's I/O CQ, then its SQ, on the pair's rings (physically
 * contiguous, interrupts off: the threads poll); a CQ whose SQ could not be
 * created is deleted again. */
static gpumem_status gpumem__nvmectl_create_queues(gpumem_nvmectl *c, const gpumem__nvmectl_pair *p) {
    const uint32_t qid = p->qp.qid, depth = p->qp.depth;
    gpumem_nvme_cmd cmd = gpumem__admin_cmd(GPUMEM__ADMIN_CREATE_CQ, 0, gpumem_nvme_iomap_at(&p->cq_mem.map, 0),
                                            ((depth - 1) << 16) | qid, 1u);
    gpumem_status st;
    if ((st = gpumem_nvmectl_admin(c, &cmd, NULL)) != GPUMEM_OK) return st;
    cmd = gpumem__admin_cmd(GPUMEM__ADMIN_CREATE_SQ, 0, gpumem_nvme_iomap_at(&p->sq_mem.map, 0),
                            ((depth - 1) << 16) | qid, (qid << 16) | 1u);
    if ((st = gpumem_nvmectl_admin(c, &cmd, NULL)) != GPUMEM_OK) gpumem__nvmectl_delete_queue(c, p, 1);
    return st;
}

/* The shim's record of pair qp, or NULL. */
static gpumem__nvmectl_pair *gpumem__nvmectl_find(gpumem_nvmectl *c, const gpumem_nvme_qp *qp) {
    uint32_t i;
    for (i = 0; i < c->n_pairs; i++)
        if (&c->pairs[i]->qp == qp) return c->pairs[i];
    return NULL;
}

gpumem_status gpumem_nvmectl_reset_begin(gpumem_nvmectl *c, gpumem_nvme_qp *qp) {
    gpumem__nvmectl_pair *p;
    gpumem_status st;
    if (!c || !qp) return GPUMEM_ENULL;
    if (!(p = gpumem__nvmectl_find(c, qp))) return gpumem__nvmectl_fail(c, GPUMEM_EINVAL, "reset: not a pair of this controller");
    if (p->deleted) return gpumem__nvmectl_fail(c, GPUMEM_ESTATE, "reset of queue pair %u: already begun", qp->qid);
    /* SQ first (the controller then moves no more data for its commands,
     * aborting those it holds), then the CQ it posted to. Once the SQ is
     * asked to go, the queues count as deleted whatever the answer: a
     * controller that refuses leaves reset_end to try again. */
    p->deleted = 1;
    /* New calls are refused from here (the gate closes: gpumem_nvme.h,
     * "Gate"); commands already out may still complete until the SQ is
     * gone, for the threads inside; no doorbell is rung any more. */
    (void)gpumem__gate_close(qp);
    gpumem__signals_set_state(qp->signals, GPUMEM__QP_RESETTING);
    gpumem__qp_hush(qp);
    if ((st = gpumem__nvmectl_delete_queue(c, p, 0)) == GPUMEM_OK) st = gpumem__nvmectl_delete_queue(c, p, 1);
    gpumem_nvme_qp_abort(qp);
    return st;
}

gpumem_status gpumem_nvmectl_reset_end(gpumem_nvmectl *c, gpumem_nvme_qp *qp) {
    uint32_t *sq_db, *cq_db, scratch[2] = {0, 0};
    gpumem__nvmectl_pair *p;
    gpumem_status st;
    if (!c || !qp) return GPUMEM_ENULL;
    if (!(p = gpumem__nvmectl_find(c, qp))) return gpumem__nvmectl_fail(c, GPUMEM_EINVAL, "reset: not a pair of this controller");
    if (!p->deleted) return gpumem__nvmectl_fail(c, GPUMEM_ESTATE, "reset of queue pair %u: not begun", qp->qid);
    /* Reinitialised on scratch doorbells, as at creation: the controller
     * must see no doorbell write for a queue it does not have. */
    sq_db = qp->sq_doorbell;
    cq_db = qp->cq_doorbell;
    qp->sq_doorbell = &scratch[0];
    qp->cq_doorbell = &scratch[1];
    st = gpumem__qp_reinit(qp, 0); /* closed and aborted: users stay out until the queues exist */
    qp->sq_doorbell = sq_db;
    qp->cq_doorbell = cq_db;
    if (st != GPUMEM_OK)
        return gpumem__nvmectl_fail(c, st, "reset of queue pair %u: a thread is still inside a call on it", qp->qid);
    if ((st = gpumem__nvmectl_create_queues(c, p)) != GPUMEM_OK) return st;
    p->deleted = 0;
    /* Running, then open (see gpumem__qp_reinit). */
    st = gpumem_nvme_qp_set_stopped(qp, 0);
    gpumem__gate_open(qp);
    return st;
}

gpumem_status gpumem_nvmectl_add_qp(gpumem_nvmectl *c, uint32_t depth, gpumem_nvme_qp **out) {
    gpumem__nvmectl_pair *p, **grown;
    gpumem_nvme_qp_desc d;
    gpumem_status st;
    uint32_t qid, n_cids;
    if (!c || !out) return GPUMEM_ENULL;
    *out = NULL;
    qid = c->n_pairs + 1;
    if (!gpumem__valid_count(depth, GPUMEM_NVME_MAX_DEPTH) || depth > c->info.max_queue_entries)
        return gpumem__nvmectl_fail(c, GPUMEM_EINVAL, "queue depth %u: must be a power of two, 2..%u (CAP.MQES)",
                                    depth, c->info.max_queue_entries);
    if (qid > c->info.pairs_granted)
        return gpumem__nvmectl_fail(c, GPUMEM_ERANGE, "queue pair %u: the controller granted %u", qid,
                                    c->info.pairs_granted);
    if (GPUMEM__REG_DOORBELLS + (2u * qid + 2u) * c->info.doorbell_stride > c->bar_bytes)
        return gpumem__nvmectl_fail(c, GPUMEM_ERANGE, "queue pair %u: its doorbells lie past BAR0", qid);
    p = (gpumem__nvmectl_pair *)GPUMEM_MALLOC(sizeof *p);
    grown = (gpumem__nvmectl_pair **)GPUMEM_MALLOC((c->n_pairs + 1) * sizeof *grown);
    if (!p || !grown) {
        GPUMEM_FREE(p);
        GPUMEM_FREE(grown);
        return gpumem__nvmectl_fail(c, GPUMEM_ENOMEM, "queue pair %u", qid);
    }
    memset(p, 0, sizeof *p);
    /* Four command IDs per entry: an ID is reusable only after the CQ head
     * has passed its completion, so a full queue never waits for IDs. */
    n_cids = depth * 4 < GPUMEM_NVME_MAX_CIDS ? depth * 4 : GPUMEM_NVME_MAX_CIDS;
    if ((st = gpumem__nvmectl_ring_alloc(c, depth, n_cids, &p->sq_mem, &p->cq_mem, &p->state, &p->signals, &d)) !=
        GPUMEM_OK)
        goto fail;
    d.qid = qid;
    d.ns = c->info.ns;
    if (gpumem_nvme_qp_prp_bytes(n_cids, &d.ns)) {
        /* Ordinary pages: each list page is looked up on its own. */
        if ((st = gpumem_nvmectl_dma_alloc(c, gpumem_nvme_qp_prp_bytes(n_cids, &d.ns), GPUMEM_NVMECTL_DMA_SMALL_PAGES,
                                           &p->prp_mem)) != GPUMEM_OK)
            goto fail;
        d.prp_lists = (uint64_t *)p->prp_mem.va;
        d.prp_lists_map = p->prp_mem.map;
    }
    if ((st = gpumem__nvmectl_qp_init(c, &p->qp, &d)) != GPUMEM_OK) goto fail;
    if ((st = gpumem__nvmectl_create_queues(c, p)) != GPUMEM_OK) goto fail;
    if (c->n_pairs) memcpy(grown, c->pairs, c->n_pairs * sizeof *grown);
    GPUMEM_FREE(c->pairs);
    c->pairs = grown;
    c->pairs[c->n_pairs++] = p;
    *out = &p->qp;
    return GPUMEM_OK;
fail:
    gpumem__nvmectl_pair_free(p);
    GPUMEM_FREE(grown);
    return st;
}

gpumem_status gpumem_nvmectl_close(gpumem_nvmectl *c) {
    gpumem_status first = GPUMEM_OK, st;
    uint32_t i;
    if (!c) return GPUMEM_ENULL;
    if (c->bar && c->enabled && gpumem_nvmectl_check(c) == GPUMEM_OK) {
        /* Submission queues first: a CQ may be deleted only once no SQ uses it. */
        for (i = c->n_pairs; i-- > 0 && first == GPUMEM_OK;)
            if (!c->pairs[i]->deleted) first = gpumem__nvmectl_delete_queue(c, c->pairs[i], 0);
        for (i = c->n_pairs; i-- > 0 && first == GPUMEM_OK;)
            if (!c->pairs[i]->deleted) first = gpumem__nvmectl_delete_queue(c, c->pairs[i], 1);
    } else if (c->bar && c->enabled) {
        first = gpumem_nvmectl_check(c);
    }
    if (c->bar && c->enabled) {
        uint32_t csts = gpumem__reg_read32(c, GPUMEM__REG_CSTS);
        /* Normal shutdown: the controller finishes its writes (a real SSD
         * flushes its cache) and reports SHST = complete. Skipped when the
         * controller is gone or has failed. */
        if (csts != 0xFFFFFFFFu && !(csts & GPUMEM__CSTS_CFS)) {
            uint32_t cc = gpumem__reg_read32(c, GPUMEM__REG_CC);
            gpumem__reg_write32(c, GPUMEM__REG_CC, (cc & ~GPUMEM__CC_SHN_MASK) | GPUMEM__CC_SHN_NORMAL);
            st = gpumem__nvmectl_wait_csts(c, 3u << 2, GPUMEM__CSTS_SHST_COMPLETE << 2, c->info.ready_timeout_ms,
                                           "shutdown");
            if (first == GPUMEM_OK) first = st;
        }
        c->enabled = 0;
        /* Disable, so that it fetches nothing more from memory we free below. */
        if (csts != 0xFFFFFFFFu) {
            gpumem__reg_write32(c, GPUMEM__REG_CC, gpumem__reg_read32(c, GPUMEM__REG_CC) & ~GPUMEM__CC_EN);
            st = gpumem__nvmectl_wait_csts(c, GPUMEM__CSTS_RDY, 0, c->info.ready_timeout_ms, "disable");
            if (first == GPUMEM_OK) first = st;
        }
    }
    if (c->bar) {
        st = gpumem__nvmectl_pci_command(c, 0, 0x4); /* bus mastering off */
        if (first == GPUMEM_OK) first = st;
        munmap(c->bar, c->bar_bytes);
    }
    for (i = 0; i < c->n_pairs; i++) gpumem__nvmectl_pair_free(c->pairs[i]);
    GPUMEM_FREE(c->pairs);
    gpumem_nvmectl_dma_free(&c->admin_sq);
    gpumem_nvmectl_dma_free(&c->admin_cq);
    gpumem_nvmectl_dma_free(&c->scratch);
    GPUMEM_FREE(c->admin_state);
    /* VFIO: the device fd first (it holds the group); closing the group takes
     * it out of the container, which drops every mapping still there (the
     * caller's buffers too). The container itself lives on while any of them
     * has not been freed. */
    if (c->vfio_device >= 0) close(c->vfio_device);
    if (c->vfio_group >= 0) close(c->vfio_group);
    if (c->iommu) gpumem__nvmectl_iommu_unref(c->iommu);
    pthread_mutex_destroy(&c->admin_lock);
    GPUMEM_FREE(c);
    return first;
}

#endif /* GPUMEM_IMPLEMENTATION */
#endif /* host shim, Linux */

#endif /* GPUMEM_NVMECTL_H */
