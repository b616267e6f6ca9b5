/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_nvme.h - NVMe queue pairs that thousands of threads share without a lock
 * on the fast path (BaM dissertation, Ch. 5): the protocol every controller
 * and client shares - wire format, command builders, the queue pair and its
 * diagnostics. Whoever serves the pairs has a header of its own, optional,
 * including this one: gpumem_swctl.h (software controllers: a host thread or
 * a persistent GPU block plays the SSD), gpumem_nvmectl.h (a real PCIe
 * controller from user space: VFIO or uio), gpumem_uring.h (a namespace the
 * kernel keeps, through io_uring passthrough, local or over NVMe-oF); the
 * software controllers and the forwarder build on gpumem_target.h, the
 * controller's side of this protocol. gpumem_watchdog.h bounds a run that
 * may hang, whoever serves it.
 *
 * USAGE (any number of threads on a pair; every USAGE block compiles as
 * written in `make test`: `given` names what it takes from its caller)
 *
 *   #include <stdio.h>
 *   #include "gpumem_nvme.h"   // gpumem_swctl.h or gpumem_nvmectl.h include it
 *
 *   // given: gpumem_nvme_qp *qp, uint64_t slba, uint32_t *buf
 *   // qp: a pair from gpumem_swctl_add_qp or gpumem_nvmectl_add_qp
 *
 *   // any number of threads, each with its own buffer: any dword-aligned
 *   // address (cudaMalloc's 512-byte aligned blocks included); the pair
 *   // builds PRP1, PRP2 and the PRP list in the command ID's own list page
 *   gpumem_nvme_cpl cpl;
 *   gpumem_status st = gpumem_nvme_qp_read_buf(qp, slba, 8, buf, &cpl);
 *   if (st == GPUMEM_EIO) puts(gpumem_nvme_status_str(gpumem_nvme_cpl_status(&cpl)));
 *   // GPUMEM_EALIGN: not dword aligned; GPUMEM_E2BIG: more than MDTS
 *
 *   // asynchronous: submit now, poll later (submit waits only for queue space)
 *   gpumem_nvme_req req = {0};
 *   while (gpumem_nvme_qp_submit_buf(qp, GPUMEM_NVME_OP_READ, slba, 8, buf, &req) == GPUMEM_EAGAIN) {
 *       // no budget for another asynchronous request: poll some of yours first
 *   }
 *   while ((st = gpumem_nvme_qp_poll(qp, &req)) == GPUMEM_EAGAIN) {
 *       // not done yet: do other work
 *   }
 *
 * The queue-pair functions are __host__ __device__: the same struct in GPU memory
 * is driven by GPU threads (pick a pair per SM with gpumem_nvme_qp_pick).
 *
 * SECTIONS: wire format; queue pair; diagnostics (a pair's state in words).
 *
 * DESIGN
 *
 * Submission (dissertation §5.1, §5.4). One fetch-add gives a ticket:
 * position = ticket mod depth, lap = ticket / depth. A position is taken
 * twice per lap - when its command is handed to the controller (the tail
 * mover's step) and when the controller is known to have consumed it (the
 * head mover's step, past a completion that proves it) - so a thread waits
 * for turn 2 * lap, writes its 64-byte command, sets its tail marker and
 * takes the tail lock if it is free. The holder moves the tail over every
 * consecutive ready entry (never filling the last slot) and rings the
 * doorbell once for the batch; a submitter that finds the lock held leaves,
 * and the holder looks again after unlocking (a store-then-load handshake,
 * gpumem__sq_push), so nobody waits for another once it has its turn.
 *
 * Wrap past 2^32. Tickets wrap and depth divides 2^32; the turn counter
 * grows by 2 a lap, so turns are compared modulo 2^(33 - log2 depth), which
 * divides both wraps (BaM compares them as plain 32-bit numbers and hangs).
 *
 * Completion (§5.2, §5.3). A thread looking for a completion scans the CQ
 * from the head, lock-free, for the expected phase, and harvests every entry
 * it finds: it claims the entry's head marker (compare-and-swap), validates
 * it, copies status and dword 0 into the command ID's mailbox and marks it
 * taken. The head-lock holder moves the head over taken entries, moves the
 * SQ head as far as they prove (stale-entry cleanup, §5.4), rings the CQ
 * doorbell and publishes the head; it re-checks the marker at the new head
 * after unlocking and a harvester checks the lock after marking (seq_cst
 * store-then-load), so no taken entry is stranded. An owner reads its result
 * with one load; an ID is handed out again only after the head has passed
 * its completion, so no scan mistakes the old completion for the new one.
 *
 * Departure from BaM: there only the owner consumes its completion, so one
 * thread waiting on a request while holding another's unconsumed completion
 * stops the head and stalls everyone. Here every waiting thread (for a
 * turn, the tail, an ID or a completion) harvests, and owners never wait on
 * the head. docs/queue.md gives the full account of each point below.
 *
 * Budget (issue 13). A command holds its ID until its owner collects the
 * result. One counter, `inflight`, bounds the IDs taken: blocking calls
 * while inflight < cid_limit = min(n_cids, depth - 1), asynchronous
 * submissions only below async_limit (a quarter less, at least one less;
 * GPUMEM_EAGAIN past it), so blocking calls always get IDs and end once the
 * controller answers: no mix of threads, depth and requests deadlocks. With
 * at most depth - 1 tickets past the known SQ head a turn waits only on
 * other threads, so a stopped controller strands nobody in the queue (depth
 * 2 allows two, and there a submitter may wait for the controller).
 *
 * Bounded waits. Every wait ends on a deadline (the *_timed forms and the
 * pair's cmd_timeout_ms, GPUMEM_ETIMEDOUT), when the signals block's
 * `stopped` word is set (GPUMEM_ENODEV), or in a reset (GPUMEM_EABORTED). A
 * command given up this way keeps its ID (ORPHAN) until its late completion
 * (counted `late`) or a reset, and may still move data until then:
 * gpumem_nvme_req_busy (a request) and gpumem_nvme_qp_orphans_settled
 * (blocking calls; an acquire) say when its buffer may be reused. A blocking
 * call's timeout counts from submission, a request's from its first poll
 * that finds it outstanding (so that no clock is read for a command done at
 * once); the clock is gpumem_clock_ns (%globaltimer on the GPU).
 *
 * Wakeups (host threads, issue 13). A waiter spins briefly, then parks, and
 * is woken only when its own condition may hold: a completion wakes its ID's
 * class (one of 32 futex bitset classes), an ID given back one waiter for an
 * ID, a tail move or turn release the submitters waiting for it, a host
 * controller's interrupt one parked waiter, which harvests for all. Nobody
 * wakes anyone while holding the tail or head lock or a claimed completion.
 *
 * Validation (issue 19): the controller is untrusted. gpumem__cpl_judge
 * checks every completion in the shared harvest path before it touches a
 * request: its CID names a command in flight with the generation it was
 * sent with (the bits above the ID count the ID's uses: at least 4 with up
 * to 4,096 IDs, none with 65,536), and its SQ head is a forward move within
 * what was handed over that has passed the command's own entry. A failing
 * completion is still consumed (the controller never stalls), then dropped,
 * counted by kind, logged once per kind and flagged (gpumem_nvme_qp_faults).
 * Only a compare-and-swap from the exact word judged delivers. The SQ head
 * is believed only as far as delivered completions prove (fetching is in
 * order), so no reported head gets an unread entry overwritten; nothing
 * asserts on a value the controller wrote.
 *
 * Reset (gpumem_nvme_qp_abort, _reinit; driven by the controllers'
 * reset_begin/end): the controller deletes the I/O SQ, then the CQ, the pair
 * is aborted (GPUMEM_EABORTED), reinitialised once its users are out, and
 * the queues are made again. Gate (issue 30): the budget word also carries
 * the count of threads inside a call and a "closed" bit (GPUMEM__GATE_*). A
 * call enters with one fetch-add (a submission's is the add that takes its
 * unit; acquire: it sees what a reinit wrote before opening the gate with a
 * release) and leaves with one fetch-sub (release: the reinit's acquire of a
 * count of 0 sees what it did). Abort sets the bit in the same word, so an
 * entrant is either counted (reinit returns GPUMEM_EBUSY until it leaves) or
 * sees the bit, undoes its add and returns GPUMEM_EABORTED. A poll whose
 * result is in its mailbox enters nothing (the reinit changes only ID words
 * without a result, by compare-and-swap).
 *
 * Memory, by who touches it (issue 12). Ring memory - the SQ and CQ, the
 * doorbells, the PRP-list pages and the signals block (the `stopped` word,
 * the host parking events) - is what the controller reads and writes:
 * system scope, placed where the controller reaches it. Client memory - the
 * gpumem_nvme_qp struct and its state area (turns, markers, ID words,
 * mailboxes) - only the pair's threads touch: device scope, in GPU memory
 * when GPU threads drive the pair, so no client atomic crosses PCIe.
 * gpumem_nvme_qp_desc places the two apart; a controller never touches
 * client memory (tests/test_xproc.c runs one in another process).
 * Byte order: NVMe structures are little-endian, as are x86-64, AArch64 and
 * NVIDIA GPUs; gpumem does not byte-swap.
 */
#ifndef GPUMEM_NVME_H
#define GPUMEM_NVME_H

#include "gpumem.h"

/* ======================================================================== */
/* Wire format                                                              */
/* ======================================================================== */

/* One submission-queue entry (NVMe base spec, Figure "Common Command Format"). */
typedef struct gpumem_nvme_cmd {
    uint32_t cdw0;  /* [7:0] opcode, [9:8] fused, [15:14] PSDT (0 = PRP), [31:16] command ID */
    uint32_t nsid;
    uint32_t cdw2;
    uint32_t cdw3;
    uint64_t mptr;
    uint64_t prp1;
    uint64_t prp2;
    uint32_t cdw10; /* Read/Write: starting LBA, low 32 bits */
    uint32_t cdw11; /* Read/Write: starting LBA, high 32 bits */
    uint32_t cdw12; /* Read/Write: [15:0] number of blocks - 1 */
    uint32_t cdw13;
    uint32_t cdw14;
    uint32_t cdw15;
} gpumem_nvme_cmd;

/* One completion-queue entry. dw3 is read and written as one 32-bit word so
 * that the command ID and the phase tag are always seen together. */
typedef struct gpumem_nvme_cpl {
    uint32_t dw0; /* command specific */
    uint32_t dw1; /* reserved */
    uint32_t dw2; /* [15:0] SQ head pointer, [31:16] SQ identifier */
    uint32_t dw3; /* [15:0] command ID, [16] phase tag, [31:17] status field */
} gpumem_nvme_cpl;

GPUMEM_STATIC_ASSERT(sizeof(gpumem_nvme_cmd) == 64, "NVMe command must be 64 bytes");
GPUMEM_STATIC_ASSERT(sizeof(gpumem_nvme_cpl) == 16, "NVMe completion must be 16 bytes");
GPUMEM_STATIC_ASSERT(offsetof(gpumem_nvme_cmd, prp1) == 24 && offsetof(gpumem_nvme_cmd, cdw10) == 40,
                     "NVMe command layout");

enum {
    GPUMEM_NVME_OP_FLUSH = 0x00,
    GPUMEM_NVME_OP_WRITE = 0x01,
    GPUMEM_NVME_OP_READ = 0x02
};

#define GPUMEM_NVME_PAGE_BYTES 4096u   /* memory page size the PRPs use (CC.MPS = 0) */
#define GPUMEM_NVME_MAX_DEPTH 65536u
#define GPUMEM_NVME_MAX_CIDS 65536u

/* The 15-bit status field of a completion (dw3 >> 17). */
#define GPUMEM_NVME_SC(sf) ((sf) & 0xFFu)          /* status code */
#define GPUMEM_NVME_SCT(sf) (((sf) >> 8) & 0x7u)   /* status code type */
#define GPUMEM_NVME_CRD(sf) (((sf) >> 11) & 0x3u)  /* command retry delay (index into CRDT) */
#define GPUMEM_NVME_MORE(sf) (((sf) >> 13) & 0x1u) /* more status information in a log page */
#define GPUMEM_NVME_DNR(sf) (((sf) >> 14) & 0x1u)  /* do not retry */
#define GPUMEM_NVME_STATUS(sct, sc) ((uint16_t)((((sct) & 0x7u) << 8) | ((sc) & 0xFFu)))

/* Fields of a completion (0 for c NULL). */
GPUMEM_API uint16_t gpumem_nvme_cpl_cid(const gpumem_nvme_cpl *c) { return c ? (uint16_t)(c->dw3 & 0xFFFFu) : 0; }
GPUMEM_API uint32_t gpumem_nvme_cpl_phase(const gpumem_nvme_cpl *c) { return c ? (c->dw3 >> 16) & 1u : 0; }
GPUMEM_API uint16_t gpumem_nvme_cpl_status(const gpumem_nvme_cpl *c) { return c ? (uint16_t)(c->dw3 >> 17) : 0; }
GPUMEM_API uint16_t gpumem_nvme_cpl_sq_head(const gpumem_nvme_cpl *c) { return c ? (uint16_t)(c->dw2 & 0xFFFFu) : 0; }
GPUMEM_API uint16_t gpumem_nvme_cpl_sq_id(const gpumem_nvme_cpl *c) { return c ? (uint16_t)(c->dw2 >> 16) : 0; }

/* Status decode as the specification says (and Linux and SPDK do): a
 * status field reports success when SCT = 0 and SC = 0. CRD, More and DNR
 * describe a failure; alone they make none. */
GPUMEM_API int gpumem_nvme_status_ok(uint16_t sf) { return GPUMEM_NVME_SCT(sf) == 0 && GPUMEM_NVME_SC(sf) == 0; }
/* Do Not Retry: the controller says the same command would fail again (a
 * caller deciding whether to retry a GPUMEM_EIO looks here; 0 for c NULL). */
GPUMEM_API int gpumem_nvme_cpl_dnr(const gpumem_nvme_cpl *c) {
    return c ? (int)GPUMEM_NVME_DNR(gpumem_nvme_cpl_status(c)) : 0;
}
/* The status a controller gives commands it aborts when their SQ is deleted
 * (a queue reset): SCT 0, SC 0x08. gpumem gives it to every request a reset
 * ends, too; either way the request returns GPUMEM_EABORTED. */
#define GPUMEM_NVME_SC_ABORTED_SQ_DELETION GPUMEM_NVME_STATUS(0, 0x08)

/* Words for a status field (SCT and SC; CRD/More/DNR are ignored). */
GPUMEM_API const char *gpumem_nvme_status_str(uint16_t sf) {
    uint32_t sct = GPUMEM_NVME_SCT(sf), sc = GPUMEM_NVME_SC(sf);
    switch (sct << 8 | sc) { /* SCT 0 generic, 1 command specific, 2 media, 3 path */
    case 0x000: return "successful completion"; case 0x001: return "invalid command opcode";
    case 0x002: return "invalid field in command"; case 0x003: return "command ID conflict";
    case 0x004: return "data transfer error"; case 0x005: return "commands aborted due to power loss notification";
    case 0x006: return "internal error"; case 0x007: return "command abort requested";
    case 0x008: return "command aborted due to SQ deletion";
    case 0x009: return "command aborted due to failed fused command";
    case 0x00A: return "command aborted due to missing fused command";
    case 0x00B: return "invalid namespace or format"; case 0x00C: return "command sequence error";
    case 0x00D: return "invalid SGL segment descriptor"; case 0x00E: return "invalid number of SGL descriptors";
    case 0x00F: return "data SGL length invalid"; case 0x010: return "metadata SGL length invalid";
    case 0x011: return "SGL descriptor type invalid"; case 0x012: return "invalid use of controller memory buffer";
    case 0x013: return "PRP offset invalid"; case 0x014: return "atomic write unit exceeded";
    case 0x015: return "operation denied"; case 0x016: return "SGL offset invalid";
    case 0x018: return "host identifier inconsistent format"; case 0x019: return "keep alive timer expired";
    case 0x01A: return "keep alive timeout invalid"; case 0x01B: return "command aborted due to preempt and abort";
    case 0x01C: return "sanitize failed"; case 0x01D: return "sanitize in progress";
    case 0x01E: return "SGL data block granularity invalid";
    case 0x01F: return "command not supported for queue in CMB"; case 0x020: return "namespace is write protected";
    case 0x021: return "command interrupted"; case 0x022: return "transient transport error";
    case 0x080: return "LBA out of range"; case 0x081: return "capacity exceeded";
    case 0x082: return "namespace not ready"; case 0x083: return "reservation conflict";
    case 0x084: return "format in progress"; case 0x100: return "completion queue invalid";
    case 0x101: return "invalid queue identifier"; case 0x102: return "invalid queue size";
    case 0x103: return "abort command limit exceeded"; case 0x105: return "asynchronous event request limit exceeded";
    case 0x106: return "invalid firmware slot"; case 0x107: return "invalid firmware image";
    case 0x108: return "invalid interrupt vector"; case 0x109: return "invalid log page";
    case 0x10A: return "invalid format"; case 0x10C: return "invalid queue deletion";
    case 0x10D: return "feature identifier not saveable"; case 0x10E: return "feature not changeable";
    case 0x10F: return "feature not namespace specific"; case 0x180: return "conflicting attributes";
    case 0x181: return "invalid protection information"; case 0x182: return "attempted write to read only range";
    case 0x280: return "write fault"; case 0x281: return "unrecovered read error";
    case 0x282: return "end-to-end guard check error"; case 0x283: return "end-to-end application tag check error";
    case 0x284: return "end-to-end reference tag check error"; case 0x285: return "compare failure";
    case 0x286: return "access denied"; case 0x287: return "deallocated or unwritten logical block";
    case 0x300: return "internal path error"; case 0x301: return "asymmetric access persistent loss";
    case 0x302: return "asymmetric access inaccessible"; case 0x303: return "asymmetric access transition";
    case 0x360: return "controller pathing error"; case 0x370: return "host pathing error";
    case 0x371: return "command aborted by host";
    default: break;
    }
    switch (sct) {
    case 0: return "unknown generic command status";
    case 1: return "unknown command specific status";
    case 2: return "unknown media or data integrity error";
    case 3: return "unknown path related status";
    case 7: return "vendor specific status";
    default: return "reserved status code type";
    }
}

/* The namespace a queue pair addresses, used to check commands before they
 * reach the controller. */
typedef struct gpumem_nvme_ns {
    uint32_t nsid;
    uint32_t lba_shift;  /* log2 of the LBA size in bytes */
    uint64_t n_blocks;   /* capacity in LBAs */
    uint32_t max_blocks; /* most LBAs in one command (MDTS), at most 65536 */
    uint32_t reserved_;
} gpumem_nvme_ns;

GPUMEM_API void gpumem__cmd_clear(gpumem_nvme_cmd *c) {
    uint32_t *w = (uint32_t *)c;
    int i;
    for (i = 0; i < 16; i++) w[i] = 0;
}

/* Build a Read or Write. The LBA range is checked against the namespace:
 * GPUMEM_ERANGE past its end, GPUMEM_EINVAL for zero blocks, GPUMEM_E2BIG
 * for more than max_blocks (MDTS). The command ID is filled in at submission. */
GPUMEM_API gpumem_status gpumem_nvme_cmd_rw(gpumem_nvme_cmd *c, uint8_t opcode, const gpumem_nvme_ns *ns,
                                            uint64_t slba, uint32_t nlb, uint64_t prp1, uint64_t prp2) {
    if (!c || !ns) return GPUMEM_ENULL;
    if (nlb == 0) return GPUMEM_EINVAL;
    if (nlb > ns->max_blocks || nlb > 65536u) return GPUMEM_E2BIG;
    if (slba >= ns->n_blocks || nlb > ns->n_blocks - slba) return GPUMEM_ERANGE;
    if (prp1 == 0) return GPUMEM_ENULL;
    gpumem__cmd_clear(c);
    c->cdw0 = opcode;
    c->nsid = ns->nsid;
    c->prp1 = prp1;
    c->prp2 = prp2;
    c->cdw10 = (uint32_t)slba;
    c->cdw11 = (uint32_t)(slba >> 32);
    c->cdw12 = nlb - 1;
    return GPUMEM_OK;
}

GPUMEM_API gpumem_status gpumem_nvme_cmd_read(gpumem_nvme_cmd *c, const gpumem_nvme_ns *ns, uint64_t slba,
                                              uint32_t nlb, uint64_t prp1, uint64_t prp2) {
    return gpumem_nvme_cmd_rw(c, GPUMEM_NVME_OP_READ, ns, slba, nlb, prp1, prp2);
}

GPUMEM_API gpumem_status gpumem_nvme_cmd_write(gpumem_nvme_cmd *c, const gpumem_nvme_ns *ns, uint64_t slba,
                                               uint32_t nlb, uint64_t prp1, uint64_t prp2) {
    return gpumem_nvme_cmd_rw(c, GPUMEM_NVME_OP_WRITE, ns, slba, nlb, prp1, prp2);
}

GPUMEM_API gpumem_status gpumem_nvme_cmd_flush(gpumem_nvme_cmd *c, const gpumem_nvme_ns *ns) {
    if (!c || !ns) return GPUMEM_ENULL;
    gpumem__cmd_clear(c);
    c->cdw0 = GPUMEM_NVME_OP_FLUSH;
    c->nsid = ns->nsid;
    return GPUMEM_OK;
}

/* Where a buffer lies in I/O address space (what the controller's DMA uses).
 * Either contiguous: byte k is at iova + k (pages == NULL); or page by page:
 * byte k is at pages[(offset + k) / 4096] + (offset + k) % 4096, where
 * pages[] holds the I/O address of each 4 KiB page the buffer touches (memory
 * that is contiguous virtually but not physically, as ordinary pages of a
 * user process are) and offset is where the buffer starts in its first page. */
typedef struct gpumem_nvme_iomap {
    uint64_t iova;         /* contiguous: I/O address of byte 0 */
    const uint64_t *pages; /* or the I/O address of each page, NULL if contiguous */
    uint64_t offset;       /* pages: byte 0's offset into pages[0] */
} gpumem_nvme_iomap;

GPUMEM_API gpumem_nvme_iomap gpumem_nvme_iomap_contiguous(uint64_t iova) {
    gpumem_nvme_iomap m;
    m.iova = iova;
    m.pages = (const uint64_t *)0;
    m.offset = 0;
    return m;
}

/* The I/O address of byte `off` of the buffer (0 for m NULL). */
GPUMEM_API uint64_t gpumem_nvme_iomap_at(const gpumem_nvme_iomap *m, uint64_t off) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES;
    if (!m) return 0;
    if (!m->pages) return m->iova + off;
    off += m->offset;
    return m->pages[off / pg] + (off & (pg - 1));
}

/* The same buffer starting `off` bytes later (an all-zero map for m NULL). */
GPUMEM_API gpumem_nvme_iomap gpumem_nvme_iomap_sub(const gpumem_nvme_iomap *m, uint64_t off) {
    gpumem_nvme_iomap r = gpumem_nvme_iomap_contiguous(0);
    if (!m) return r;
    r = *m;
    if (r.pages) r.offset += off;
    else r.iova += off;
    return r;
}

/* Memory pages a transfer of `len` (> 0) bytes starting at I/O address
 * `iova` touches, and the PRP-list pages it needs: the n - 1 pages after the
 * first go into the list (none when n <= 2); each list page holds 512
 * entries, but every page that is followed by another gives its last entry
 * to the chain pointer, so p pages hold 511 (p - 1) + 512 entries. */
GPUMEM_API uint64_t gpumem_nvme_prp_pages(uint64_t iova, uint64_t len) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES, first = pg - (iova & (pg - 1));
    return 1 + (len > first ? (len - first + pg - 1) / pg : 0);
}
GPUMEM_API uint64_t gpumem_nvme_prp_list_pages(uint64_t n_pages) {
    return n_pages <= 2 ? 0 : (n_pages - 1 + 509) / 511;
}

/* PRP1/PRP2 for a transfer of `len` bytes from buffer `data`. Up to two
 * pages need no list. Longer transfers need a PRP list: `list` is where it is
 * written (its I/O addresses given by `list_map`, starting page aligned),
 * `list_entries` its capacity; lists longer than one page are chained through
 * the last entry of each page, as the specification requires. Each data page
 * after the first is looked up separately, so the data need not be
 * contiguous in I/O space; nor need the list's pages. */
GPUMEM_API gpumem_status gpumem_nvme_prp_build(const gpumem_nvme_iomap *data, uint64_t len, uint64_t *list,
                                               const gpumem_nvme_iomap *list_map, uint32_t list_entries,
                                               uint64_t *prp1, uint64_t *prp2) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES;
    const uint32_t per_page = GPUMEM_NVME_PAGE_BYTES / 8;
    uint64_t iova, first, n_pages;
    uint32_t k, slot, pages;
    if (!data || !prp1 || !prp2) return GPUMEM_ENULL;
    iova = gpumem_nvme_iomap_at(data, 0);
    if (iova == 0) return GPUMEM_ENULL;
    if (len == 0) return GPUMEM_EINVAL;
    if ((iova & 3u) != 0) return GPUMEM_EALIGN; /* PRP1 must be dword aligned */
    /* The page count below must not wrap (no command moves 2^63 bytes). */
    if (len > (UINT64_MAX >> 1)) return GPUMEM_E2BIG;
    first = pg - (iova & (pg - 1)); /* bytes in the first page */
    n_pages = gpumem_nvme_prp_pages(iova, len);
    *prp1 = iova;
    *prp2 = 0;
    if (n_pages == 1) return GPUMEM_OK;
    if (n_pages == 2) {
        *prp2 = gpumem_nvme_iomap_at(data, first);
        return GPUMEM_OK;
    }
    if (!list || !list_map) return GPUMEM_ENULL;
    if ((gpumem_nvme_iomap_at(list_map, 0) & (pg - 1)) != 0) return GPUMEM_EINVAL;
    /* Entries for n_pages - 1 data pages, plus one chain pointer per full list
     * page that is followed by another. */
    if (n_pages - 1 + gpumem_nvme_prp_list_pages(n_pages) - 1 > list_entries) return GPUMEM_ENOMEM;
    /* From here the page count fits in 32 bits (the list holds them all):
     * 32-bit counters, fewer registers in the device loop. */
    pages = (uint32_t)n_pages;
    slot = 0;
    /* Not unrolled on the GPU: the unrolled copies were once the peak of
     * the cache's miss path, and still cost it a register (issue 12). */
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
    for (k = 1; k < pages; k++) {
        if (slot % per_page == per_page - 1 && k + 1 < pages) {
            list[slot] = gpumem_nvme_iomap_at(list_map, (uint64_t)(slot + 1) * 8); /* start of the next list page */
            slot++;
        }
        list[slot++] = gpumem_nvme_iomap_at(data, first + (uint64_t)(k - 1) * pg);
    }
    *prp2 = gpumem_nvme_iomap_at(list_map, 0);
    return GPUMEM_OK;
}

/* PRP1/PRP2 for `len` bytes starting at I/O address `iova`, contiguous in I/O
 * address space, with the list at I/O address `list_iova` (see
 * gpumem_nvme_prp_build). The software controller uses virtual addresses as
 * I/O addresses; a real controller needs physical ones (gpumem_nvmectl_dma). */
GPUMEM_API gpumem_status gpumem_nvme_prp_setup(uint64_t iova, uint64_t len, uint64_t *list, uint64_t list_iova,
                                               uint32_t list_entries, uint64_t *prp1, uint64_t *prp2) {
    gpumem_nvme_iomap d = gpumem_nvme_iomap_contiguous(iova), l = gpumem_nvme_iomap_contiguous(list_iova);
    return gpumem_nvme_prp_build(&d, len, list, &l, list_entries, prp1, prp2);
}

/* The same for memory whose I/O address is its virtual address. */
GPUMEM_API gpumem_status gpumem_nvme_prp_identity(const void *buf, uint64_t len, uint64_t *list,
                                                  uint32_t list_entries, uint64_t *prp1, uint64_t *prp2) {
    return gpumem_nvme_prp_setup((uint64_t)(uintptr_t)buf, len, list, (uint64_t)(uintptr_t)list, list_entries,
                                 prp1, prp2);
}

/* ======================================================================== */
/* Queue pair                                                               */
/* ======================================================================== */

/* Per-position record, shared by SQ position p and CQ position p (the two
 * queues have the same depth). Padded to GPUMEM_SLOT_BYTES so that threads
 * working on neighbouring positions do not share a sector. */
typedef struct gpumem__nvme_slot {
    uint32_t turn;      /* SQ: +2 per lap; a submitter of lap L waits for 2L */
    uint32_t tail_mark; /* SQ: 1 = command written, tail not yet past it */
    uint32_t head_mark; /* CQ: 1 = completion consumed (delivered or dropped), head not yet past it */
    uint32_t sq_next;   /* CQ, with head_mark 1: the SQ head this completion proves (see "Validation") */
    uint32_t pad_[GPUMEM_SLOT_BYTES / 4 - 4];
} gpumem__nvme_slot;

/* A hot word alone on its cache line. */
typedef struct gpumem__nvme_word {
    uint32_t v;
    uint32_t pad_[GPUMEM_PAD_BYTES / 4 - 1];
} gpumem__nvme_word;

/* The same, 64 bits wide. */
typedef struct gpumem__nvme_word64 {
    uint64_t v;
    uint32_t pad_[GPUMEM_PAD_BYTES / 4 - 2];
} gpumem__nvme_word64;

/* Command-ID words (64-bit), one per command ID:
 *   [47:32]  the CID on the wire of the ID's current (or last) command:
 *            the ID in the low cid_shift bits, its generation above
 *   [31:0]   SUBMITTED: the command's SQ ticket; DONE: the CQ position
 *            (virtual) its completion was taken from
 *   IN_USE     held by a thread that has not yet seen its result
 *   SUBMITTED  with IN_USE: the command is (about to be) on the SQ
 *   ORPHAN     with SUBMITTED: its owner gave up waiting (timed out, the
 *              controller stopped, or the pair was aborted); whoever
 *              harvests the completion frees the ID
 *   CLAIMED    with SUBMITTED: a harvester is filling the mailbox; DONE follows
 *   DONE       with IN_USE: the mailbox holds the result; without IN_USE: free
 *   PARKED     its owner (a host thread) may be asleep waiting for the result:
 *              whoever delivers it wakes the owner's class (see "Wakeups")
 * A free word (no IN_USE) may be taken once it has no DONE, or once the CQ
 * head has passed v, so that no scan can meet the old completion again.
 * The mailbox (cid_mail[2 id], [2 id + 1]) holds the completion's dword 0
 * and status field. */
#define GPUMEM__CID_IN_USE (1ull << 63)
#define GPUMEM__CID_DONE (1ull << 62)
#define GPUMEM__CID_ORPHAN (1ull << 61)
#define GPUMEM__CID_SUBMITTED (1ull << 60)
#define GPUMEM__CID_CLAIMED (1ull << 59)
#define GPUMEM__CID_PARKED (1ull << 58)
#define GPUMEM__CID_WIRE(w) ((uint32_t)((w) >> 32) & 0xFFFFu)

/* Why a completion was dropped: bits of the pair's fault flag (device code
 * reads it with gpumem_nvme_qp_faults) and, with the counts below, what
 * gpumem_nvme_qp_get_stats reports. */
#define GPUMEM_NVME_FAULT_STRAY 0x01u     /* its CID names no command in flight */
#define GPUMEM_NVME_FAULT_STALE 0x02u     /* its ID is in flight under another generation */
#define GPUMEM_NVME_FAULT_DUPLICATE 0x04u /* the command's completion was taken already */
#define GPUMEM_NVME_FAULT_EARLY 0x08u     /* its SQ head says the command was not fetched yet */
#define GPUMEM_NVME_FAULT_SQ_HEAD 0x10u   /* its SQ head is no forward move within what was submitted */
#define GPUMEM_NVME_FAULT_TIMEOUT 0x20u   /* a command outlived the pair's cmd_timeout_ms */
/* Indices of the pair's counts (gpumem_nvme_qp.counts). */
enum {
    GPUMEM__QPC_STRAY, GPUMEM__QPC_STALE, GPUMEM__QPC_DUPLICATE, GPUMEM__QPC_EARLY, GPUMEM__QPC_SQ_HEAD,
    GPUMEM__QPC_LATE, GPUMEM__QPC_TIMED_OUT, GPUMEM__QPC_ABORTED, GPUMEM__QPC_COUNTS
};

/* Values of the pair's `stopped` word. */
#define GPUMEM__QP_RUNNING 0u
#define GPUMEM__QP_STOPPED 1u /* the controller stopped: waits end with GPUMEM_ENODEV */
#define GPUMEM__QP_ABORTED 2u /* the queues were deleted (reset): waits end with GPUMEM_EABORTED */
#define GPUMEM__QP_RESETTING 3u /* the queues are being deleted: new calls are refused (EABORTED),
                                   waits for commands already out go on */

/* The pair's gate word (gpumem_nvme_qp.inflight; see "Gate" above):
 *   [19:0]   command IDs taken and not yet given back (the budget: at most
 *            65,535, plus one for each thread whose add overshot and is
 *            being undone - fewer than 2^20 threads are ever resident on
 *            a GPU, so it never carries into the next field)
 *   [39:20]  threads inside a call that touches the pair's rings and counters
 *   [40]     closed: a reset is under way; entering calls are refused
 *   [63:41]  a submission's command-ID candidate, round robin: the add that
 *            enters and takes a unit advances it too, so a submission's
 *            first candidate costs no atomic of its own (it wraps out of
 *            the word; n_cids divides 2^23) */
#define GPUMEM__GATE_UNITS(v) ((uint32_t)(v) & 0xFFFFFu)
#define GPUMEM__GATE_CALL (1ull << 20)
#define GPUMEM__GATE_CALLS(v) ((uint32_t)((v) >> 20) & 0xFFFFFu)
#define GPUMEM__GATE_CLOSED (1ull << 40)
#define GPUMEM__GATE_CID_NEXT (1ull << 41)
#define GPUMEM__GATE_CID(v) ((uint32_t)((v) >> 41))

/* The controller-visible words of a pair besides its rings and doorbells:
 * what a controller writes for the pair's threads to read, and where host
 * threads park. It lives in ring memory, with the rings, never with the
 * client state, so that a controller that reaches only the rings (another
 * process, the far side of PCIe) reaches it too; the host-thread controller
 * touches nothing else of a pair. Its events are process-shared futexes
 * (gpumem_event.shared) for the same reason. GPU threads read `stopped` and
 * never touch the events (a device thread never parks, and its notify is a
 * no-op). */
typedef struct gpumem_nvme_qp_signals {
    gpumem__nvme_word stopped; /* GPUMEM__QP_*: nonzero ends waits (ENODEV; EABORTED during a reset) */
    /* Host threads park here while they wait for a completion, each as
     * the class of its command ID (gpumem__cid_class): whoever delivers a
     * completion to a parked owner wakes that class only. A host
     * controller that posts completions wakes one waiter of any class (its
     * interrupt, in NVMe terms), which harvests for everyone. */
    gpumem_event event;
    /* ... here while they wait for a command ID: each ID given back wakes
     * one of them, not every waiter of the pair ... */
    gpumem_event id_event;
    /* ... and here while they wait for a turn in the submission queue,
     * woken by turn releases and a controller's interrupt. A stop wakes
     * everyone on all three. */
    gpumem_event sq_event;
} gpumem_nvme_qp_signals;

/* The pair as its threads see it: the client state. Every word below is
 * touched only by the threads that use the pair (GPU threads: keep it in
 * GPU memory, so that no client atomic crosses PCIe); what the controller
 * sees is reached through the pointers to ring memory (sq, cq, doorbells,
 * signals, prp_lists). */
typedef struct gpumem_nvme_qp {
    /* set at init, read-only afterwards */
    gpumem_nvme_cmd *sq;      /* depth entries, controller-visible */
    gpumem_nvme_cpl *cq;      /* depth entries, controller-visible */
    uint32_t *sq_doorbell;    /* SQ tail doorbell (MMIO for a real controller) */
    uint32_t *cq_doorbell;    /* CQ head doorbell */
    gpumem_nvme_qp_signals *signals; /* controller-visible: stop flag, host parking */
    gpumem__nvme_slot *slots; /* depth records */
    uint64_t *cids;           /* n_cids words: command-ID state (see above) */
    uint32_t *cid_mail;       /* 2 n_cids words: each ID's completion dword 0 and status field */
    uint64_t *prp_lists;      /* n_cids * prp_list_pages pages: command ID k's PRP list
                                 starts at page k * prp_list_pages (NULL: none) */
    gpumem_nvme_iomap prp_map; /* where the controller sees prp_lists */
    gpumem_nvme_ns ns;
    uint64_t cmd_timeout_ns; /* a command outstanding longer is given up (GPUMEM_NO_TIMEOUT: never) */
    uint32_t depth;
    uint32_t depth_log2;
    uint32_t turn_mask; /* turns compare modulo 2^(33 - depth_log2) */
    uint32_t n_cids;
    uint32_t cid_shift; /* log2 n_cids: the generation lies above this bit of a CID */
    uint32_t qid;
    uint32_t prp_list_pages; /* per command ID: enough for the namespace's largest transfer */
    uint32_t cid_limit;   /* most commands in flight: min(n_cids, depth - 1) */
    uint32_t async_limit; /* most of them asynchronous: the rest is kept for blocking calls */
    uint32_t wait_max_ns; /* device waits on this pair back off up to this (gpumem_nvme_qp_set_wait_max_ns) */
    uint32_t tag; /* nonzero, this pair's own: a request carries it from submission (gpumem_nvme_req) */
    uint32_t pad0_[GPUMEM_PAD_BYTES / 4 - 13];
    /* hot words, one cache line each */
    gpumem__nvme_word ticket;    /* next SQ ticket */
    gpumem__nvme_word tail;      /* virtual SQ tail: entries handed to the controller */
    gpumem__nvme_word tail_lock;
    gpumem__nvme_word sq_head;   /* virtual SQ head: entries known consumed */
    gpumem__nvme_word cq_head;   /* virtual CQ head */
    gpumem__nvme_word cq_released; /* virtual CQ head as last rung on the doorbell */
    gpumem__nvme_word head_lock;
    gpumem__nvme_word cid_ticket;
    gpumem__nvme_word sq_doorbell_writes; /* statistics: one per batch, written by the lock holder */
    gpumem__nvme_word cq_doorbell_writes; /* (0 with GPUMEM_NO_STATS) */
    gpumem__nvme_word64 inflight; /* the gate: the budget, threads inside calls, closed (GPUMEM__GATE_*) */
    gpumem__nvme_word waiters;  /* threads waiting for an ID inside a pair call */
    gpumem__nvme_word faults;   /* GPUMEM_NVME_FAULT_* bits raised so far */
    gpumem__nvme_word quiet;    /* nonzero while a reset deletes the queues: no doorbell is rung */
    /* Rare events, counted together on one line: completions dropped by
     * kind, late completions, timed-out and aborted commands. */
    uint32_t counts[GPUMEM__QPC_COUNTS];
    uint32_t pad1_[GPUMEM_PAD_BYTES / 4 - GPUMEM__QPC_COUNTS];
    /* Notified after each doorbell write, so that a host-thread controller
     * can park while idle (NULL: none). */
    gpumem_event *doorbell_event;
} gpumem_nvme_qp;

/* cmd_timeout_ms: 0 is the default (Linux's I/O timeout, 30 s); this value
 * is "never" (commands wait for the controller as long as it runs). */
#define GPUMEM_NVME_CMD_TIMEOUT_DEFAULT_MS 30000u
#define GPUMEM_NVME_CMD_TIMEOUT_NEVER 0xFFFFFFFFu

/* Where a pair's memory lives, in two placements by who touches it.
 *
 * Ring memory, what the controller reads and writes: sq, cq, the doorbells
 * and the signals block (and the PRP-list pages, which it reads). A real
 * controller: DMA memory and its registers. The host-thread controller:
 * memory its thread can reach (pinned, mapped host memory when GPU threads
 * drive the pair; memory shared with another process when it runs there).
 *
 * Client memory, what only the pair's threads touch: the gpumem_nvme_qp
 * struct itself (tickets, tail, heads, locks, the budget: passed to
 * gpumem_nvme_qp_init) and `state` (turns, markers, command-ID words and
 * mailboxes). GPU threads: GPU memory (cudaMalloc).
 *
 * The pair keeps the memory it runs on (sq, cq, doorbells, signals, state,
 * prp_lists, doorbell_event); nothing else of the description is kept. */
typedef struct gpumem_nvme_qp_desc {
    uint32_t depth;  /* entries in each queue: a power of two, 2 .. 65536 */
    uint32_t n_cids; /* command IDs: a power of two, 2 .. 65536 */
    uint32_t qid;    /* I/O queue identifier (SQ ID reported in completions) */
    uint32_t virtual_start; /* first ticket and CQ head: 0, or a multiple of 2*depth
                               (tests start just below 2^32 to cross the wrap) */
    gpumem_nvme_ns ns;
    /* ring memory */
    gpumem_nvme_cmd *sq;
    gpumem_nvme_cpl *cq;
    uint32_t *sq_doorbell;
    uint32_t *cq_doorbell;
    gpumem_nvme_qp_signals *signals; /* initialised by gpumem_nvme_qp_init */
    /* client memory */
    void *state;        /* gpumem_nvme_qp_state_bytes() bytes, 16-byte aligned */
    size_t state_bytes;
    /* optional: the host-thread controller's parking spot, which the pair's
     * threads notify after ringing a doorbell; where they can reach it */
    gpumem_event *doorbell_event;
    /* Optional: one PRP-list area per command ID, so that commands built from
     * buffer pointers (gpumem_nvme_qp_submit_buf and friends) never allocate:
     * gpumem_nvme_qp_prp_bytes() bytes, page aligned, controller-readable.
     * prp_lists_map says where the controller sees them; all zero means at
     * their virtual address (software controllers, GPU memory). Without
     * them, buffer commands that span more than two pages get GPUMEM_E2BIG.
     * prp_lists_map.pages, if set, is kept (the real-controller shim passes
     * its own DMA page table, which lives as long as the pair). */
    uint64_t *prp_lists;
    gpumem_nvme_iomap prp_lists_map;
    /* A command outstanding longer than this is given up: its blocking call
     * and its poll return GPUMEM_ETIMEDOUT (see "Timeouts" above). 0: the
     * default, GPUMEM_NVME_CMD_TIMEOUT_DEFAULT_MS; GPUMEM_NVME_CMD_TIMEOUT_NEVER:
     * never (waits then end only when the controller stops or the pair is reset). */
    uint32_t cmd_timeout_ms;
    uint32_t reserved_;
} gpumem_nvme_qp_desc;

/* Bytes of client state for a pair besides its struct (slot records,
 * command-ID words and mailboxes). */
GPUMEM_API size_t gpumem_nvme_qp_state_bytes(uint32_t depth, uint32_t n_cids) {
    return (size_t)depth * sizeof(gpumem__nvme_slot) + (size_t)n_cids * (sizeof(uint64_t) + 2 * sizeof(uint32_t));
}

/* Zero a signals block (not stopped, nobody parked) and make its events
 * process-shared. gpumem_nvme_qp_init does this. */
GPUMEM_API void gpumem_nvme_qp_signals_init(gpumem_nvme_qp_signals *s) {
    unsigned char *b = (unsigned char *)s;
    size_t k;
    if (!s) return;
    for (k = 0; k < sizeof *s; k++) b[k] = 0;
    s->event.shared = 1;
    s->id_event.shared = 1;
    s->sq_event.shared = 1;
}

/* A controller's interrupt, after it posted completions: wake one host
 * thread parked for a completion, whichever (it harvests every completion
 * there, and wakes the owners it delivers to), and every thread parked in
 * the submission queue (whose turn may wait on the CQ head; rare). One
 * wake per batch, not one per parked thread. */
GPUMEM_API void gpumem_nvme_qp_signals_interrupt(gpumem_nvme_qp_signals *s) {
    if (!s) return;
    gpumem__event_fence();
    gpumem__event_kick(&s->event, 1, GPUMEM_EVENT_ALL);
    gpumem__event_kick(&s->sq_event, GPUMEM__WAKE_EVERYONE, GPUMEM_EVENT_ALL);
}

/* PRP-list pages one command ID needs: enough for the namespace's largest
 * transfer (max_blocks blocks) from a buffer at the worst allowed offset
 * (4 bytes before a page boundary). */
GPUMEM_API uint32_t gpumem_nvme_qp_prp_pages(const gpumem_nvme_ns *ns) {
    uint64_t max_len;
    if (!ns || ns->lba_shift > 16) return 0;
    max_len = (uint64_t)ns->max_blocks << ns->lba_shift;
    return (uint32_t)gpumem_nvme_prp_list_pages(gpumem_nvme_prp_pages(GPUMEM_NVME_PAGE_BYTES - 4, max_len));
}

/* Bytes of PRP-list memory for a pair's n_cids command IDs (see the desc). */
GPUMEM_API size_t gpumem_nvme_qp_prp_bytes(uint32_t n_cids, const gpumem_nvme_ns *ns) {
    return (size_t)n_cids * gpumem_nvme_qp_prp_pages(ns) * GPUMEM_NVME_PAGE_BYTES;
}

GPUMEM_API int gpumem__valid_count(uint32_t n, uint32_t max) { return n >= 2 && n <= max && gpumem_is_pow2_u64(n); }

/* Put the pair's rings and counters where a fresh pair of this layout
 * starts, `start` being the first ticket and CQ head: every turn at its
 * first lap, no marks, the CQ zeroed (so no old entry carries the phase the
 * controller posts first), both doorbells 0. What init and reinit share. */
GPUMEM_API void gpumem__qp_restart(gpumem_nvme_qp *qp, uint32_t start) {
    /* Every position's first ticket is start + p, of lap start / depth. */
    const uint32_t start_turn = (start >> qp->depth_log2) * 2u;
    uint32_t i, j;
    qp->ticket.v = qp->tail.v = qp->sq_head.v = qp->cq_head.v = qp->cq_released.v = start;
    qp->tail_lock.v = qp->head_lock.v = 0;
    for (i = 0; i < qp->depth; i++) {
        gpumem__nvme_slot *s = &qp->slots[i];
        s->turn = start_turn;
        s->tail_mark = 0;
        s->head_mark = 0;
        s->sq_next = 0;
        for (j = 0; j < GPUMEM_SLOT_BYTES / 4 - 4; j++) s->pad_[j] = 0;
        qp->cq[i].dw0 = qp->cq[i].dw1 = qp->cq[i].dw2 = qp->cq[i].dw3 = 0;
    }
    *qp->sq_doorbell = 0;
    *qp->cq_doorbell = 0;
}

/* Point the pair's client-state pointers into `state`, laid out as
 * gpumem_nvme_qp_init lays it out (the one place that knows the layout of
 * the gpumem_nvme_qp_state_bytes() area). Init uses it; so does a pair
 * built in host memory and then copied where host code cannot write (GPU
 * memory), and a host copy of such a pair read for diagnostics: the copy's
 * pointers are moved to the copy's state. */
GPUMEM_API void gpumem_nvme_qp_relocate_state(gpumem_nvme_qp *qp, void *state) {
    char *base = (char *)state;
    if (!qp || !state) return;
    qp->slots = (gpumem__nvme_slot *)base;
    qp->cids = (uint64_t *)(base + (size_t)qp->depth * sizeof(gpumem__nvme_slot));
    qp->cid_mail = (uint32_t *)(qp->cids + qp->n_cids);
}

/* A pair's tag (gpumem_nvme_qp.tag): what a request carries to say which
 * pair it was submitted to. Never 0, so that a zeroed request names no pair.
 * Mixed from the pair's address and the clock at init: two pairs of a
 * process differ but for a 2^-32 chance, and a pair initialised again at the
 * same address gets a new tag, so its old requests are refused. A pair
 * copied elsewhere (GPU memory) keeps it. */
GPUMEM_API uint32_t gpumem__qp_tag_make(const void *qp) {
    uint64_t x = (uint64_t)(uintptr_t)qp ^ (gpumem_clock_ns() * 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull; /* a 64-bit finaliser: every input bit moves the top half */
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)(x >> 32) ? (uint32_t)(x >> 32) : 1u;
}

/* Initialise a pair (host, before any thread uses it). Zeroes the CQ. */
GPUMEM_API gpumem_status gpumem_nvme_qp_init(gpumem_nvme_qp *qp, const gpumem_nvme_qp_desc *d) {
    uint32_t i;
    char *state;
    if (!qp || !d || !d->sq || !d->cq || !d->sq_doorbell || !d->cq_doorbell || !d->signals || !d->state)
        return GPUMEM_ENULL;
    if (!gpumem__valid_count(d->depth, GPUMEM_NVME_MAX_DEPTH)) return GPUMEM_EINVAL;
    if (!gpumem__valid_count(d->n_cids, GPUMEM_NVME_MAX_CIDS)) return GPUMEM_EINVAL;
    if (d->virtual_start % (2u * d->depth) != 0) return GPUMEM_EINVAL; /* CQ lap 0 at position 0 */
    if (d->state_bytes < gpumem_nvme_qp_state_bytes(d->depth, d->n_cids)) return GPUMEM_ENOMEM;
    if (((uintptr_t)d->state & 15u) != 0) return GPUMEM_EINVAL;
    if (d->ns.lba_shift < 9 || d->ns.lba_shift > 16 || d->ns.n_blocks == 0 || d->ns.max_blocks == 0 ||
        d->ns.max_blocks > 65536u)
        return GPUMEM_EINVAL;
    if (d->ns.n_blocks > (UINT64_MAX >> d->ns.lba_shift)) return GPUMEM_ERANGE; /* byte offsets must not wrap */
    if (d->qid > 0xFFFFu) return GPUMEM_EINVAL;
    if (d->prp_lists && (((uintptr_t)d->prp_lists & (GPUMEM_NVME_PAGE_BYTES - 1)) != 0 ||
                         (gpumem_nvme_iomap_at(&d->prp_lists_map, 0) & (GPUMEM_NVME_PAGE_BYTES - 1)) != 0))
        return GPUMEM_EALIGN; /* list pages must be whole pages */

    {   /* zero the whole struct, padding included */
        unsigned char *b = (unsigned char *)qp;
        size_t k;
        for (k = 0; k < sizeof *qp; k++) b[k] = 0;
    }
    state = (char *)d->state;
    qp->sq = d->sq;
    qp->cq = d->cq;
    qp->sq_doorbell = d->sq_doorbell;
    qp->cq_doorbell = d->cq_doorbell;
    qp->signals = d->signals;
    gpumem_nvme_qp_signals_init(d->signals);
    qp->ns = d->ns;
    qp->cmd_timeout_ns = d->cmd_timeout_ms == GPUMEM_NVME_CMD_TIMEOUT_NEVER ? GPUMEM_NO_TIMEOUT
                         : (uint64_t)(d->cmd_timeout_ms ? d->cmd_timeout_ms : GPUMEM_NVME_CMD_TIMEOUT_DEFAULT_MS) *
                               1000000ull;
    qp->depth = d->depth;
    qp->depth_log2 = gpumem_log2_u64(d->depth);
    qp->turn_mask = (uint32_t)((2ull << (32 - qp->depth_log2)) - 1);
    qp->n_cids = d->n_cids;
    qp->cid_shift = gpumem_log2_u64(d->n_cids);
    qp->qid = d->qid;
    gpumem_nvme_qp_relocate_state(qp, state);
    /* At most depth - 1 commands in flight: then a submitter's turn never
     * waits on the controller, only on other threads (see "Budget" above),
     * so every wait can end when the controller stops. A quarter of them
     * (at least one) only blocking calls may take: an asynchronous request
     * holds its ID until its owner polls, and owners blocked in a blocking
     * call never poll; blocking calls give their IDs back by themselves.
     * Depth 2 allows 2, so that one asynchronous request can be out beside
     * the blocking calls' one; its second submitter may then wait in the
     * queue for the controller (which holds one command), and a stop leaves
     * it there until the controller runs again. */
    qp->cid_limit = d->depth == 2 ? 2 : d->n_cids < d->depth - 1 ? d->n_cids : d->depth - 1;
    qp->async_limit = qp->cid_limit - (qp->cid_limit / 4 > 1 ? qp->cid_limit / 4 : 1);
    qp->wait_max_ns = GPUMEM_BACKOFF_MAX_NS;
    qp->tag = gpumem__qp_tag_make(qp);
    qp->doorbell_event = d->doorbell_event;
    qp->prp_lists = d->prp_lists;
    qp->prp_map = d->prp_lists_map;
    if (d->prp_lists && !qp->prp_map.pages && qp->prp_map.iova == 0)
        qp->prp_map = gpumem_nvme_iomap_contiguous((uint64_t)(uintptr_t)d->prp_lists);
    qp->prp_list_pages = d->prp_lists ? gpumem_nvme_qp_prp_pages(&d->ns) : 0;
    for (i = 0; i < d->n_cids; i++) qp->cids[i] = qp->cid_mail[2 * i] = qp->cid_mail[2 * i + 1] = 0;
    gpumem__qp_restart(qp, d->virtual_start);
    return GPUMEM_OK;
}

/* ---- doorbells ------------------------------------------------------------ */

/* Ring a doorbell. Everything this thread (and, through the locks, every
 * thread it synchronised with) wrote before must be visible to the controller
 * first: on the host a release store (a plain MOV on x86, which is also the
 * correct MMIO write to an uncached BAR mapping); on the GPU a system-scope
 * fence followed by the PTX st.mmio store, which the memory model defines for
 * MMIO (PTX ISA 8.2+), or a relaxed system-scope store where it is missing. */
GPUMEM_API void gpumem__doorbell_write(uint32_t *db, uint32_t value) {
#if GPUMEM_ON_DEVICE
    gpumem_atomic_fence(GPUMEM_ORDER_SEQ_CST, GPUMEM_SCOPE_SYSTEM);
#if __CUDA_ARCH__ >= 700 && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 2))
    asm volatile("st.mmio.relaxed.sys.global.u32 [%0], %1;" ::"l"(db), "r"(value) : "memory");
#else
    gpumem_atomic_store_u32(db, value, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
#endif
#else
    gpumem_atomic_store_u32(db, value, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
#endif
}

/* Shorthands for the two scopes used below. */
#define GPUMEM__DEV GPUMEM_SCOPE_DEVICE
#define GPUMEM__SYS GPUMEM_SCOPE_SYSTEM

/* Whether the pair's queues are being deleted (a reset): then no doorbell
 * is rung, as a controller must see no doorbell write for a queue it does
 * not have; tails and heads still move, so no thread waits on them.
 * Relaxed: one look per batch at a line that is written twice a reset; the
 * look and the doorbell write happen under the tail or head lock, which is
 * what makes the flag binding (gpumem__qp_hush). */
GPUMEM_API int gpumem__qp_quiet(gpumem_nvme_qp *qp) {
    return gpumem_atomic_load_u32(&qp->quiet.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV) != 0;
}

/* Stop the pair's doorbells before its queues are deleted: raise `quiet`,
 * then take and drop the tail lock and the head lock once each. A mover
 * that looked at the flag before it rose holds its lock until its doorbell
 * write is done, so once both locks have passed through this thread no
 * doorbell write can follow (the lock's release carries the flag to every
 * later holder). Host code of a reset; spins only while a mover holds a
 * lock, a few stores long. */
GPUMEM_API void gpumem__qp_hush(gpumem_nvme_qp *qp) {
    uint32_t *locks[2];
    int k;
    locks[0] = &qp->tail_lock.v;
    locks[1] = &qp->head_lock.v;
    gpumem_atomic_store_u32(&qp->quiet.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    for (k = 0; k < 2; k++) {
        while (gpumem_atomic_exchange_u32(locks[k], 1, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 0) {
        }
        gpumem_atomic_store_u32(locks[k], 0, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
    }
}

/* One more in a pair's statistics word. Only a lock holder counts (the tail
 * lock for SQ doorbells, the head lock for CQ doorbells), so a relaxed load
 * and store suffice: no read-modify-write on a shared line. Compiled out
 * with GPUMEM_NO_STATS. */
GPUMEM_API void gpumem__qp_count(gpumem__nvme_word *w) {
#if defined(GPUMEM_NO_STATS)
    (void)w;
#else
    gpumem_atomic_store_u32(&w->v, gpumem_atomic_load_u32(&w->v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV) + 1,
                            GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
#endif
}

/* Set how long a device thread waiting on this pair may sleep between looks
 * (its back-off doubles from 8 ns up to this; default GPUMEM_BACKOFF_MAX_NS).
 * A pair whose rings are in host memory is polled across PCIe by every
 * waiting warp: a longer cap means fewer polls and later wake-ups. Read
 * relaxed at the start of each wait; host waits ignore it (they park).
 * GPUMEM_EINVAL for 0 or more than 1 ms. */
GPUMEM_API gpumem_status gpumem_nvme_qp_set_wait_max_ns(gpumem_nvme_qp *qp, uint32_t ns) {
    if (!qp) return GPUMEM_ENULL;
    if (ns == 0 || ns > 1000000u) return GPUMEM_EINVAL;
    gpumem_atomic_store_u32(&qp->wait_max_ns, ns, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    return GPUMEM_OK;
}

/* The cap for a wait starting now. */
GPUMEM_API uint32_t gpumem__qp_wait_cap(gpumem_nvme_qp *qp) {
    return gpumem_atomic_load_u32(&qp->wait_max_ns, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
}

/* ---- submission queue ----------------------------------------------------- */

/* The record of virtual SQ/CQ position v. Code that waits, or harvests,
 * looks it up again after each wait instead of keeping the pointer: every
 * wait inlines the harvest, so a pointer kept across it costs each waiting
 * GPU thread two more registers (issue 12 budgets 32 for a blocking read);
 * the lookup is two loads of lines the thread touches anyway. The same
 * goes for gpumem__cid_word and gpumem__cid_mail. */
GPUMEM_API gpumem__nvme_slot *gpumem__slot(gpumem_nvme_qp *qp, uint32_t v) { return &qp->slots[v & (qp->depth - 1)]; }

/* Move the tail over consecutive written entries; caller holds tail_lock.
 * Stops at the first unwritten entry or when only one free slot would remain.
 * Does increment #1 of every entry it passes (handed to the controller) and
 * rings the doorbell once for the batch; returns how many it passed (the
 * caller wakes a parked controller after unlocking: gpumem__sq_moved). */
GPUMEM_API uint32_t gpumem__sq_move_tail(gpumem_nvme_qp *qp) {
    const uint32_t mask = qp->depth - 1;
    /* The lock's acquire made the previous holder's tail store visible. */
    uint32_t cur = gpumem_atomic_load_u32(&qp->tail.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    /* Acquire: pairs with the head mover's release of sq_head. A stale value
     * only makes this batch shorter; the waiting submitters retry. */
    uint32_t head = gpumem_atomic_load_u32(&qp->sq_head.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    uint32_t n = 0;
    while (cur + n - head < qp->depth - 1) {
        uint32_t *mark = &qp->slots[(cur + n) & mask].tail_mark;
        /* Acquire: the submitter's release store of its mark published its
         * command; the doorbell's release below passes that on to the
         * controller. A mark here can only belong to ticket cur+n: the next
         * lap's ticket cannot pass its turn before the head passes cur+n. */
        if (gpumem_atomic_load_u32(mark, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV) == 0) break;
        gpumem_atomic_store_u32(mark, 0, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
        /* Increment #1, for the submitter, who has left. Release: the next
         * lap's occupant of the position sees the mark cleared before it
         * sets its own. */
        gpumem_atomic_fetch_add_u32(&qp->slots[(cur + n) & mask].turn, 1, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
        n++;
    }
    if (n) {
        /* Tail before doorbell, so that sq_head (learnt from completions of
         * what the doorbell hands over) never runs ahead of tail. Seq_cst:
         * part of the handshake in gpumem__sq_push. */
        gpumem_atomic_store_u32(&qp->tail.v, cur + n, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
        if (!gpumem__qp_quiet(qp)) {
            gpumem__doorbell_write(qp->sq_doorbell, (cur + n) & mask);
            gpumem__qp_count(&qp->sq_doorbell_writes);
        }
    }
    return n;
}

/* After a tail move, out of the tail lock: wake a parked host controller
 * (a real one has no doorbell event). Never while holding the lock: a woken
 * thread may take this one's core on the spot, and the entries written
 * meanwhile would wait for the lock. */
GPUMEM_API void gpumem__sq_moved(gpumem_nvme_qp *qp) {
    if (!gpumem__qp_quiet(qp)) gpumem_event_notify(qp->doorbell_event);
}

/* Hand written entries to the controller: move the tail over them if the
 * tail lock is free, else leave them to its holder. No submitter waits for
 * another: whoever finds the entry at the tail written and room behind the
 * head takes the lock and moves; the holder looks again after unlocking.
 * A store-then-load handshake in seq_cst order makes that enough: a
 * submitter stores its mark, then loads the tail, the head, the mark at the
 * tail and the lock; the holder stores the tail and the unlock, then loads
 * the tail, the mark there and the head; so of a submitter that found the
 * lock held and the holder that released it, at least one sees the other.
 * The head mover calls this after it frees positions (the holder may have
 * stopped for want of room), after the same kind of seq_cst store. A mark
 * behind an unwritten entry (a submitter between its ticket and its mark)
 * is moved by that entry's submitter, whose push continues over it. */
GPUMEM_API void gpumem__sq_push(gpumem_nvme_qp *qp) {
    for (;;) {
        const uint32_t tail = gpumem_atomic_load_u32(&qp->tail.v, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
        uint32_t moved;
        if (gpumem_atomic_load_u32(&gpumem__slot(qp, tail)->tail_mark, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) == 0)
            return; /* nothing written at the tail: its submitter will push */
        if (tail - gpumem_atomic_load_u32(&qp->sq_head.v, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) >= qp->depth - 1)
            return; /* full: the head mover pushes once it frees positions */
        if (gpumem_atomic_load_u32(&qp->tail_lock.v, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 0 ||
            gpumem_atomic_exchange_u32(&qp->tail_lock.v, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 0)
            return; /* the holder will see the mark */
        moved = gpumem__sq_move_tail(qp);
        gpumem_atomic_store_u32(&qp->tail_lock.v, 0, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
        if (moved) gpumem__sq_moved(qp);
    }
}

GPUMEM_API uint32_t gpumem__cq_harvest(gpumem_nvme_qp *qp);
GPUMEM_API void gpumem__cq_harvest_warp(gpumem_nvme_qp *qp);


/* Whether SQ ticket `ticket` has its turn at its position. Acquire: pairs
 * with the release increments of the previous occupant (submitted) and of
 * the head mover (consumed by the controller), so the controller is done
 * reading the position before we overwrite it. */
GPUMEM_API int gpumem__sq_turn_ok(gpumem_nvme_qp *qp, uint32_t ticket) {
    const uint32_t want = (ticket >> qp->depth_log2) * 2u;
    return ((gpumem_atomic_load_u32(&gpumem__slot(qp, ticket)->turn, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV) - want) &
            qp->turn_mask) == 0;
}

/* The back-off cap of a wait for a turn in the submission queue. There a
 * thread waits for other threads' steps (the previous lap's command passed
 * by the tail, its completion by the head); on a host with more threads
 * than cores one of them has usually been preempted, so a host waiter parks
 * after a brief spin (cap 0, gpumem_backoff_start_capped) and lets it have
 * the core. */
#if GPUMEM_ON_DEVICE
#define GPUMEM__SQ_WAIT_CAP(qp) gpumem__qp_wait_cap(qp)
#else
#define GPUMEM__SQ_WAIT_CAP(qp) 0u
#endif

/* Copies of a command, field by field (each in its own type), through
 * volatile lvalues. A blocking command waits twice before its SQ entry is
 * written - for an ID, then for its turn - and on the device the compiler
 * would keep the command's fields (PRPs, LBA, namespace, count: about 8
 * registers) live through both waits, on top of the waits' own, in every
 * kernel that reads through a queue (the cache's element read among them:
 * issue 12, bench/results/registers-sm_90.md). So the command is held in
 * the thread's local memory meanwhile: gpumem__cmd_hold stores it there
 * (volatile stores: made where they stand, not sunk past the waits), and
 * gpumem__cmd_fetch loads it back where it is used (volatile loads: not
 * hoisted above the waits, nor replaced by the values stored), with plain
 * stores so that an SQ entry is still written in wide stores. */
#define GPUMEM__CMD_COPY(d, s)                                                                                    \
    do {                                                                                                          \
        (d)->cdw0 = (s)->cdw0, (d)->nsid = (s)->nsid, (d)->cdw2 = (s)->cdw2, (d)->cdw3 = (s)->cdw3;               \
        (d)->mptr = (s)->mptr, (d)->prp1 = (s)->prp1, (d)->prp2 = (s)->prp2;                                      \
        (d)->cdw10 = (s)->cdw10, (d)->cdw11 = (s)->cdw11, (d)->cdw12 = (s)->cdw12;                                \
        (d)->cdw13 = (s)->cdw13, (d)->cdw14 = (s)->cdw14, (d)->cdw15 = (s)->cdw15;                                \
    } while (0)
GPUMEM_API void gpumem__cmd_hold(volatile gpumem_nvme_cmd *dst, const volatile gpumem_nvme_cmd *src) {
    GPUMEM__CMD_COPY(dst, src);
}
GPUMEM_API void gpumem__cmd_fetch(gpumem_nvme_cmd *dst, const volatile gpumem_nvme_cmd *src) {
    GPUMEM__CMD_COPY(dst, src);
}

/* Enqueue `cmd` under `ticket`. Returns once the command is written and
 * either handed to the controller or left to the tail-lock holder, or to
 * the submitter of an unwritten entry before it, who pass it on
 * (gpumem__sq_push): no submitter waits for another after its turn. */
GPUMEM_API void gpumem__sq_enqueue(gpumem_nvme_qp *qp, uint32_t ticket, const gpumem_nvme_cmd *cmd) {
    /* While waiting, harvest completions: the turn may wait on the CQ head. */
    GPUMEM_WAIT_CAPPED(&qp->signals->sq_event, GPUMEM__SQ_WAIT_CAP(qp),
                       gpumem__sq_turn_ok(qp, ticket) || (gpumem__cq_harvest_warp(qp), 0), 0);
    gpumem__cmd_fetch(&qp->sq[ticket & (qp->depth - 1)], cmd); /* from memory, after the wait */
    /* Seq_cst (a release, for the command, and the handshake's store). */
    gpumem_atomic_store_u32(&gpumem__slot(qp, ticket)->tail_mark, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
    gpumem__sq_push(qp);
}

/* ---- command-ID budget (see "Budget" above) --------------------------------- */

/* Take one unit of the budget if fewer than `limit` are taken and the
 * pair is open (a caller inside the pair stops taking once a reset has
 * closed it). Relaxed: the count only bounds how many commands are in
 * flight; what they touch is ordered by the ID words, turns and markers.
 * An add that overshoots is undone, so a racing taker may fail spuriously
 * and retry, never pass. */
GPUMEM_API int gpumem__budget_take(gpumem_nvme_qp *qp, uint32_t limit) {
    /* Look before the add: many waiters on a spent budget then only read. */
    uint64_t v = gpumem_atomic_load_u64(&qp->inflight.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    if (GPUMEM__GATE_UNITS(v) >= limit || (v & GPUMEM__GATE_CLOSED)) return 0;
    v = gpumem_atomic_fetch_add_u64(&qp->inflight.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    if (GPUMEM__GATE_UNITS(v) < limit && !(v & GPUMEM__GATE_CLOSED)) return 1;
    gpumem_atomic_fetch_sub_u64(&qp->inflight.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    return 0;
}

/* Give one unit back, and leave the pair with the same subtraction when
 * `leave` is GPUMEM__GATE_CALL (0: stay); one waiter for an ID may go on.
 * Relaxed for the unit alone; release when leaving (see gpumem__gate_leave). */
GPUMEM_API void gpumem__budget_put_leave(gpumem_nvme_qp *qp, uint64_t leave) {
    gpumem_atomic_fetch_sub_u64(&qp->inflight.v, 1 + leave, leave ? GPUMEM_ORDER_RELEASE : GPUMEM_ORDER_RELAXED,
                                GPUMEM__DEV);
    gpumem_event_notify_one(&qp->signals->id_event);
}

/* Give one unit back. */
GPUMEM_API void gpumem__budget_put(gpumem_nvme_qp *qp) { gpumem__budget_put_leave(qp, 0); }

/* ---- the gate (see "Gate" above) ------------------------------------------- */

/* Enter the pair for a call that touches its rings and counters, adding
 * `unit` (0 or 1) to the budget with the same add (and then advancing the
 * command-ID candidate: *cand, for gpumem__cid_pick): 1 if entered with
 * the unit taken, 0 if entered without one (no unit asked, or fewer than
 * `limit` were free: then none is held), -1 if the pair is closed for a
 * reset (nothing held, not entered: return GPUMEM_EABORTED). Acquire: pairs
 * with the release that opened the gate after a reinitialisation. */
GPUMEM_API int gpumem__gate_enter(gpumem_nvme_qp *qp, uint32_t unit, uint32_t limit, uint32_t *cand) {
    /* Look before the add: a closed pair is only read, and a spent budget
     * is not added to (as gpumem__budget_take). */
    uint64_t v = gpumem_atomic_load_u64(&qp->inflight.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV), add;
    if (v & GPUMEM__GATE_CLOSED) return -1;
    add = GPUMEM__GATE_CALL + (GPUMEM__GATE_UNITS(v) < limit && unit ? 1u + GPUMEM__GATE_CID_NEXT : 0u);
    v = gpumem_atomic_fetch_add_u64(&qp->inflight.v, add, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    if (v & GPUMEM__GATE_CLOSED) {
        /* Closed just before: undo; this thread touched nothing. (The
         * candidate field is left advanced: any value serves.) */
        gpumem_atomic_fetch_sub_u64(&qp->inflight.v, add & (GPUMEM__GATE_CID_NEXT - 1), GPUMEM_ORDER_RELAXED,
                                    GPUMEM__DEV);
        return -1;
    }
    if (add == GPUMEM__GATE_CALL) return 0;
    *cand = GPUMEM__GATE_CID(v);
    if (GPUMEM__GATE_UNITS(v) < limit) return 1;
    gpumem_atomic_fetch_sub_u64(&qp->inflight.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV); /* overshot */
    return 0;
}

/* Enter without taking a unit. */
GPUMEM_API int gpumem__gate_enter_call(gpumem_nvme_qp *qp) {
    uint32_t unused;
    return gpumem__gate_enter(qp, 0, 0, &unused);
}

/* Leave the pair. Release: everything this thread did inside comes before
 * a reinitialisation that reads the count it leaves. */
GPUMEM_API void gpumem__gate_leave(gpumem_nvme_qp *qp) {
    gpumem_atomic_fetch_sub_u64(&qp->inflight.v, GPUMEM__GATE_CALL, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
}

/* Close the pair to new entrants (a reset begins). Returns the gate word
 * before: its count of threads still inside. Acquire, for the count (see
 * gpumem_nvme_qp_reinit). */
GPUMEM_API uint64_t gpumem__gate_close(gpumem_nvme_qp *qp) {
    return gpumem_atomic_fetch_or_u64(&qp->inflight.v, GPUMEM__GATE_CLOSED, GPUMEM_ORDER_ACQ_REL, GPUMEM__DEV);
}

/* Open it again (a reset ends, the queues exist). Release: the
 * reinitialisation's writes come before any entry that sees it open. */
GPUMEM_API void gpumem__gate_open(gpumem_nvme_qp *qp) {
    gpumem_atomic_fetch_and_u64(&qp->inflight.v, ~GPUMEM__GATE_CLOSED, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
}

/* ---- completion queue ----------------------------------------------------- */

/* Move the CQ head over consecutive consumed completions, if the head lock
 * is free. The holder re-checks the marker at the new head after unlocking; the
 * marker setter checks the lock after setting its marker. Both use seq_cst,
 * so at least one of them sees the other (store-buffering handshake) and no
 * marker is left without someone to move the head over it. */
/* After a head move, out of the head lock: wake a parked host controller
 * (CQ space), the submitters waiting for turns it released, and one waiter
 * for a command ID it made reusable; one fence for the three (each a load
 * unless someone is parked). */
GPUMEM_API void gpumem__cq_moved(gpumem_nvme_qp *qp) {
    gpumem__event_fence();
    if (!gpumem__qp_quiet(qp)) gpumem__event_kick(qp->doorbell_event, GPUMEM__WAKE_EVERYONE, GPUMEM_EVENT_ALL);
    gpumem__event_kick(&qp->signals->sq_event, GPUMEM__WAKE_EVERYONE, GPUMEM_EVENT_ALL);
    gpumem__event_kick(&qp->signals->id_event, 1, GPUMEM_EVENT_ALL);
}

GPUMEM_API void gpumem__cq_move_head(gpumem_nvme_qp *qp) {
    const uint32_t mask = qp->depth - 1;
    int freed = 0; /* SQ positions freed: the tail may move again (gpumem__sq_push) */
    for (;;) {
        uint32_t cur, n = 0, sq_head, best;
        if (gpumem_atomic_load_u32(&qp->head_lock.v, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 0 ||
            gpumem_atomic_exchange_u32(&qp->head_lock.v, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 0)
            break; /* the holder will see our marker */
        cur = gpumem_atomic_load_u32(&qp->cq_head.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
        sq_head = best = gpumem_atomic_load_u32(&qp->sq_head.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
        while (n < qp->depth - 1) {
            gpumem__nvme_slot *slot = &qp->slots[(cur + n) & mask];
            uint32_t next;
            /* 1 = consumed (0 = not yet, 2 = being harvested). Acquire:
             * pairs with the harvester's marker store, so its reads of the
             * entry (and its sq_next) come before we hand the slot back. */
            if (gpumem_atomic_load_u32(&slot->head_mark, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV) != 1) break;
            /* The SQ head this completion proves (see below). */
            next = gpumem_atomic_load_u32(&slot->sq_next, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
            if (gpumem_wrap_diff_u32(next, best) > 0) best = next;
            n++;
        }
        if (n) {
            /* Stale-entry cleanup (§5.4), from evidence only: a command
             * that completed was fetched, and the controller fetches in
             * order, so its ticket + 1 entries are consumed (sq_next; a
             * dropped completion proves nothing and carries the head as it
             * was). The SQ head the controller wrote was only checked for
             * plausibility (gpumem__cpl_judge): believing it would let a
             * lying controller have unread entries overwritten. Every
             * sq_next lies within what was handed over, so the head never
             * passes the tail. best: the most the passed ones prove. */
            uint32_t k;
            /* Not unrolled on the GPU: this rare loop's unrolled copies took
             * registers beyond the harvest's peak (issue 12's count). */
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
            for (k = 0; k < best - sq_head; k++) /* increment #2: consumed by the controller */
                gpumem_atomic_fetch_add_u32(&qp->slots[(sq_head + k) & mask].turn, 1, GPUMEM_ORDER_RELEASE,
                                            GPUMEM__DEV);
            /* Seq_cst: the handshake of gpumem__sq_push, called below. */
            if (best != sq_head) {
                gpumem_atomic_store_u32(&qp->sq_head.v, best, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
                freed = 1;
            }
            /* Publish the head, then clear the markers, then hand the slots to
             * the controller. Head first: a harvester with a stale view that
             * claims a just-cleared marker re-reads the head (the release
             * clear pairs with its claim) and backs off, instead of taking an
             * already-passed entry a second time. Doorbell last: the
             * controller may overwrite a slot only once its marker is clear. */
            gpumem_atomic_store_u32(&qp->cq_head.v, cur + n, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
            for (k = 0; k < n; k++)
                gpumem_atomic_store_u32(&qp->slots[(cur + k) & mask].head_mark, 0, GPUMEM_ORDER_RELEASE,
                                        GPUMEM__DEV);
            if (!gpumem__qp_quiet(qp)) gpumem__doorbell_write(qp->cq_doorbell, (cur + n) & mask);
            /* Command IDs whose completions lie before this may be reused: the
             * controller has been told those completions are consumed. */
            gpumem_atomic_store_u32(&qp->cq_released.v, cur + n, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
            gpumem__qp_count(&qp->cq_doorbell_writes);
        }
        gpumem_atomic_store_u32(&qp->head_lock.v, 0, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
        if (n) gpumem__cq_moved(qp); /* out of the lock, as gpumem__sq_moved */
        if (gpumem_atomic_load_u32(&qp->slots[(cur + n) & mask].head_mark, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV) != 1)
            break;
    }
    /* Entries written while the SQ was full wait for a push (gpumem__sq_push). */
    if (freed) gpumem__sq_push(qp);
}

/* Count a fault of kind `bit` (count index `idx`) and raise its flag; the
 * first of each kind on a pair is logged on the host. Relaxed: counts and
 * flags publish nothing. */
GPUMEM_API void gpumem__qp_fault(gpumem_nvme_qp *qp, uint32_t bit, uint32_t idx, uint32_t cid, uint32_t detail) {
    gpumem_atomic_fetch_add_u32(&qp->counts[idx], 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
#if GPUMEM_ON_DEVICE
    gpumem_atomic_fetch_or_u32(&qp->faults.v, bit, GPUMEM_ORDER_RELAXED, GPUMEM__SYS);
    (void)cid;
    (void)detail;
#else
    if (!(gpumem_atomic_fetch_or_u32(&qp->faults.v, bit, GPUMEM_ORDER_RELAXED, GPUMEM__SYS) & bit)) {
        static const char *const what[] = {
            "the controller sent a completion whose CID names no command in flight (dropped)",
            "the controller sent a completion for an ID in flight under another generation, a stale repeat "
            "(dropped)",
            "the controller sent a second completion for one command (dropped)",
            "the controller sent a completion whose SQ head says its command was not fetched yet (dropped)",
            "the controller sent a completion whose SQ head is no forward move within what was submitted "
            "(dropped)",
            "a command outlived the command timeout (its ID stays reserved until it completes or the pair is "
            "reset)"};
        uint32_t k = 0;
        while ((bit >> k) > 1) k++;
        GPUMEM_LOG("queue pair %u: %s: CID %u, %s %u; further faults of this kind are only counted "
                   "(gpumem_nvme_qp_get_stats)",
                   qp->qid, what[k], cid, bit == GPUMEM_NVME_FAULT_TIMEOUT ? "timeout ms" : "SQ head", detail);
    }
#endif
}

/* The ID word and the mailbox (two words: dword 0 and status) of CID
 * `wire`, whose low bits are the ID; looked up where used (see
 * gpumem__slot). */
GPUMEM_API uint64_t *gpumem__cid_word(gpumem_nvme_qp *qp, uint32_t wire) { return &qp->cids[wire & (qp->n_cids - 1)]; }
GPUMEM_API uint32_t *gpumem__cid_mail(gpumem_nvme_qp *qp, uint32_t wire) {
    return &qp->cid_mail[2 * (wire & (qp->n_cids - 1))];
}

/* The class (gpumem__event_sleep_bits) a host thread waiting for CID
 * `wire`'s completion parks as: one of 32 by the ID's low bits, so a
 * delivery wakes its owner and, on average, one in 32 of the other parked
 * owners. */
GPUMEM_API uint32_t gpumem__cid_class(uint32_t wire) { return 1u << (wire & 31u); }

/* Host, before the owner of CID `wire` parks: mark the word PARKED, unless
 * the result is there already. Seq_cst, before the owner registers with the
 * event: the harvester's exchange of the word (gpumem__cpl_take) either
 * comes first, and the owner's re-check finds DONE, or returns the mark,
 * and the harvester wakes the owner's class. */
GPUMEM_API void gpumem__cid_will_park(gpumem_nvme_qp *qp, uint32_t wire) {
    uint64_t w = gpumem_atomic_load_u64(gpumem__cid_word(qp, wire), GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    while (!(w & (GPUMEM__CID_DONE | GPUMEM__CID_PARKED)) && GPUMEM__CID_WIRE(w) == (wire & 0xFFFFu))
        if (gpumem_atomic_cas_u64(gpumem__cid_word(qp, wire), &w, w | GPUMEM__CID_PARKED, GPUMEM_ORDER_SEQ_CST,
                                  GPUMEM__DEV))
            break;
}

/* Validation: may the completion at CQ position v (its CID `wire`, its SQ
 * head read here from dword 2) complete the command that ID word w
 * describes? 0 if so, else the fault bit. The CID must name a
 * command in flight under its generation, not yet completed; the SQ head
 * the controller reports must be a plausible forward move (at or past the
 * known head, at most the tail: the tail is read before the head, so the
 * window is at most depth - 1 long and the position names one virtual
 * head) that has passed the command's own entry (its ticket). */
GPUMEM_API uint32_t gpumem__cpl_judge(gpumem_nvme_qp *qp, uint32_t v, uint32_t wire, uint64_t w) {
    /* Ordered by the harvester's acquire load of dw3. */
    uint32_t pos = qp->cq[v & (qp->depth - 1)].dw2 & 0xFFFFu, tail, known, head;
    if (!(w & GPUMEM__CID_IN_USE))
        return (w & GPUMEM__CID_DONE) && GPUMEM__CID_WIRE(w) == wire ? GPUMEM_NVME_FAULT_DUPLICATE
                                                                    : GPUMEM_NVME_FAULT_STRAY;
    if (GPUMEM__CID_WIRE(w) != wire) return GPUMEM_NVME_FAULT_STALE;
    if (w & (GPUMEM__CID_DONE | GPUMEM__CID_CLAIMED)) return GPUMEM_NVME_FAULT_DUPLICATE;
    if (!(w & GPUMEM__CID_SUBMITTED)) return GPUMEM_NVME_FAULT_STRAY; /* its ID is taken, the command not sent */
    if (pos >= qp->depth) return GPUMEM_NVME_FAULT_SQ_HEAD;
    /* Acquire: the tail store came before the doorbell that handed the
     * command over; the completion's acquire load ordered this after it. */
    tail = gpumem_atomic_load_u32(&qp->tail.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    known = gpumem_atomic_load_u32(&qp->sq_head.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    head = known + ((pos - known) & (qp->depth - 1));
    if (head - known > tail - known) return GPUMEM_NVME_FAULT_SQ_HEAD;
    if (gpumem_wrap_diff_u32(head, (uint32_t)w) <= 0) return GPUMEM_NVME_FAULT_EARLY;
    return 0;
}

/* Deliver the completion at CQ position v (dw3 as read) to its command ID,
 * or drop it; either way the entry is consumed. Returns the SQ head it
 * proves (sq_next); adds the owner's class to *wake if a host owner may be
 * parked (the harvester wakes them all at the end of its pass). Only a compare-and-swap from the exact word judged
 * takes the ID, so two harvesters of a repeated completion cannot both
 * deliver, and a word that changed meanwhile (its owner orphaned it) is
 * judged again. */
GPUMEM_API uint32_t gpumem__cpl_take(gpumem_nvme_qp *qp, uint32_t dw3, uint32_t v, uint32_t *wake) {
    /* The entry (dwords 0 and 2) and the ID's words are looked up again
     * where used (see gpumem__slot); the claimed entry stays put meanwhile. */
    const uint32_t wire = dw3 & 0xFFFFu;
    uint64_t w = gpumem_atomic_load_u64(gpumem__cid_word(qp, wire), GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    uint32_t bad;
    for (;;) {
        if ((bad = gpumem__cpl_judge(qp, v, wire, w)) != 0) break;
        if (gpumem_atomic_cas_u64(gpumem__cid_word(qp, wire), &w, w | GPUMEM__CID_CLAIMED, GPUMEM_ORDER_ACQ_REL,
                                  GPUMEM__DEV)) {
            /* The word is ours and stays w | CLAIMED until the DONE store
             * below (nobody else changes a claimed word): read back, so
             * that w need not be kept across the compare-and-swap (two
             * registers; see gpumem__slot). */
            const uint64_t claimed =
                gpumem_atomic_load_u64(gpumem__cid_word(qp, wire), GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
            const int orphan = (claimed & GPUMEM__CID_ORPHAN) != 0;
            const uint64_t done = GPUMEM__CID_DONE | ((uint64_t)wire << 32) | v;
            gpumem__cid_mail(qp, wire)[0] = qp->cq[v & (qp->depth - 1)].dw0;
            gpumem__cid_mail(qp, wire)[1] = dw3 >> 17;
            /* Release: the mailbox before the owner can see DONE. An
             * orphan's ID is free at once (its owner is gone). */
#if GPUMEM_ON_DEVICE
            gpumem_atomic_store_u64(gpumem__cid_word(qp, wire), orphan ? done : done | GPUMEM__CID_IN_USE,
                                    GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
            (void)wake;
#else
            /* A host owner may have marked the word PARKED since the claim
             * (gpumem__cid_will_park): the exchange sees the mark that the
             * store would overwrite, and the owner's class is woken. */
            if (gpumem_atomic_exchange_u64(gpumem__cid_word(qp, wire), orphan ? done : done | GPUMEM__CID_IN_USE,
                                           GPUMEM_ORDER_ACQ_REL, GPUMEM__DEV) &
                GPUMEM__CID_PARKED)
                *wake |= gpumem__cid_class(wire);
#endif
            if (orphan) {
                gpumem_atomic_fetch_add_u32(&qp->counts[GPUMEM__QPC_LATE], 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
                gpumem__budget_put(qp);
            }
            return (uint32_t)claimed + 1; /* its ticket + 1 */
        }
    }
    {
        uint32_t idx = 0;
        while ((bad >> idx) > 1) idx++;
        gpumem__qp_fault(qp, bad, idx, wire, qp->cq[v & (qp->depth - 1)].dw2 & 0xFFFFu);
    }
    return gpumem_atomic_load_u32(&qp->sq_head.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
}

/* Harvest every completion the controller has posted and nobody has taken
 * yet: validate it, deliver it to its command ID's mailbox or drop it, and
 * mark it for the head mover. Any thread may do this for any command, so
 * the CQ head never waits on one particular thread (an owner busy
 * elsewhere, or waiting on another of its requests). Returns the number
 * consumed. */
GPUMEM_API uint32_t gpumem__cq_harvest(gpumem_nvme_qp *qp) {
    const uint32_t mask = qp->depth - 1;
    uint32_t head = gpumem_atomic_load_u32(&qp->cq_head.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    uint32_t i, got = 0, wake = 0;
    for (i = 0; i < qp->depth - 1; i++) {
        uint32_t v = head + i, expected = 0;
        uint32_t want_phase = ((v >> qp->depth_log2) & 1u) ^ 1u; /* phase 1 on even laps */
        gpumem_nvme_cpl *e = &qp->cq[v & mask];
        gpumem__nvme_slot *slot = &qp->slots[v & mask];
        /* Acquire: pairs with the controller's release store of dw3, made
         * after dw0..dw2. */
        uint32_t dw3 = gpumem_atomic_load_u32(&e->dw3, GPUMEM_ORDER_ACQUIRE, GPUMEM__SYS);
        if (((dw3 >> 16) & 1u) != want_phase) break; /* reached the tail */
        if (gpumem_atomic_load_u32(&slot->head_mark, GPUMEM_ORDER_RELAXED, GPUMEM__DEV) != 0) continue;
        /* Claim the entry (0 -> 2): one harvester per completion. */
        if (!gpumem_atomic_cas_u32(&slot->head_mark, &expected, 2, GPUMEM_ORDER_ACQ_REL, GPUMEM__DEV)) continue;
        /* Our head may be stale by whole laps. The entry is v only if the
         * head has not passed v (so v is unconsumed and lies in the posted
         * window) and the slot still carries v's phase; otherwise un-claim. */
        if (v - gpumem_atomic_load_u32(&qp->cq_head.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV) >= qp->depth ||
            (((dw3 = gpumem_atomic_load_u32(&e->dw3, GPUMEM_ORDER_ACQUIRE, GPUMEM__SYS)) >> 16) & 1u) !=
                want_phase) {
            gpumem_atomic_store_u32(&slot->head_mark, 0, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
            break;
        }
        {
            /* The slot looked up again, not kept across the take (see gpumem__slot). */
            const uint32_t next = gpumem__cpl_take(qp, dw3, v, &wake);
            gpumem_atomic_store_u32(&gpumem__slot(qp, v)->sq_next, next, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
            gpumem_atomic_store_u32(&gpumem__slot(qp, v)->head_mark, 1, GPUMEM_ORDER_SEQ_CST, GPUMEM__DEV);
        }
        got++;
    }
    if (got) gpumem__cq_move_head(qp);
#if !GPUMEM_ON_DEVICE
    /* The owners of what was delivered that may be parked, in one wake, once
     * every entry is marked consumed and the head has moved: a woken owner
     * may take this thread's core at once, and nobody waits on it now. */
    if (wake) {
        gpumem__event_fence();
        gpumem__event_kick(&qp->signals->event, GPUMEM__WAKE_EVERYONE, wake);
    }
#endif
    return got;
}

/* Harvest for every waiting lane of the calling warp at once (one poller
 * per warp). Lanes of a warp that reach this together and wait on the same
 * pair elect their lowest lane; it scans the CQ (which may be in host memory,
 * across PCIe) and fills everyone's mailboxes, which are in the pair's
 * state, and the others wait for it at the warp barrier instead of each
 * scanning the same entries. Harvesting is lock-free and never waits, so the
 * barrier is short. On the host, or with GPUMEM_WARP_POLL 0: every caller
 * harvests. */
GPUMEM_API void gpumem__cq_harvest_warp(gpumem_nvme_qp *qp) {
#if GPUMEM_ON_DEVICE && GPUMEM_WARP_POLL
    const uint32_t active = __activemask();
    const uint32_t peers = __match_any_sync(active, (unsigned long long)(uintptr_t)qp);
    if (gpumem_lane_id() == gpumem_lowest_lane(peers)) gpumem__cq_harvest(qp);
    /* The barrier. The leader's mailbox stores are release atomics and the
     * peers load theirs with acquire; a peer that looks before a store is
     * visible simply finds nothing and waits a round. No count is shared:
     * no caller uses it, and broadcasting it kept the leader's lane number
     * live across the harvest (a register; issue 12). */
    gpumem_warp_sync(peers);
#else
    gpumem__cq_harvest(qp);
#endif
}

/* Wait until `cond` (or `give_up`) for the completion of CID `wire`. A host
 * thread parks as the class of its ID, marking the word PARKED first so
 * that whoever delivers the completion wakes it; each time it wakes (its
 * delivery, a controller's interrupt, a stop, the park's timeout) it
 * harvests once, for everyone, before it looks at its own result: a
 * thread woken by the interrupt whose own result is already there must
 * still take the completions the interrupt announced. Device threads wait
 * as in GPUMEM_WAIT_CAPPED. */
#define GPUMEM__QP_WAIT_CPL(qp, wire, cond, give_up)                                                       \
    GPUMEM__WAIT_PARKING(&(qp)->signals->event, gpumem__qp_wait_cap(qp), gpumem__cid_class(wire), cond, \
                         give_up, gpumem__cid_will_park((qp), (wire)), gpumem__cq_harvest(qp))

/* Whether ID word w is held for the command under CID `wire` by an owner
 * that will still collect it: taken, not given up, and under that CID (ID
 * and generation). A request whose CID fails this is not in flight: a
 * copy of one collected already, or never submitted. */
GPUMEM_API int gpumem__cid_held(uint64_t w, uint32_t wire) {
    return (w & (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN)) == GPUMEM__CID_IN_USE && GPUMEM__CID_WIRE(w) == wire;
}

/* If the command under CID `wire` has its result, copy it to *out, free
 * the command ID and return 1; 0 if it has not come. -1, changing nothing,
 * if the ID is not held under that CID (gpumem__cid_held): the caller's
 * request is not in flight. Only a compare-and-swap from the word read
 * frees the ID, so two callers that hold copies of one request cannot both
 * collect it, and the budget is given back once per ID taken, whatever
 * callers pass. A request ended by a reset (gpumem_nvme_qp_reinit) finds
 * an "aborted" result here. Touches only the ID's word and mailbox, so a
 * caller need not have entered the pair (see "Gate"); one that has may
 * leave it with the unit's subtraction (`leave`: GPUMEM__GATE_CALL; then it
 * has left when this returns 1). */
GPUMEM_API int gpumem__cid_collect_done(gpumem_nvme_qp *qp, uint16_t wire, gpumem_nvme_cpl *out, uint64_t leave) {
    uint64_t w = gpumem_atomic_load_u64(gpumem__cid_word(qp, wire), GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    if (!gpumem__cid_held(w, wire)) return -1;
    if (!(w & GPUMEM__CID_DONE)) return 0;
    out->dw0 = gpumem__cid_mail(qp, wire)[0];
    out->dw1 = 0;
    out->dw2 = qp->qid << 16; /* the SQ head it carried was consumed by the head mover */
    out->dw3 = (uint32_t)wire | ((gpumem__cid_mail(qp, wire)[1] & 0x7FFFu) << 17);
    /* Release the ID, keeping its CID (the next one is a generation on) and
     * where its completion was: reusable once the head has passed it.
     * Release: the mailbox was read before the ID can be taken again. */
    if (!gpumem_atomic_cas_u64(gpumem__cid_word(qp, wire), &w, w & ~GPUMEM__CID_IN_USE, GPUMEM_ORDER_RELEASE,
                               GPUMEM__DEV))
        return -1; /* another copy of the request collected it first */
    gpumem__budget_put_leave(qp, leave);
    return 1;
}

/* The same, harvesting once if the result has not come, and looking again
 * (a caller inside the pair). */
GPUMEM_API int gpumem__cid_collect(gpumem_nvme_qp *qp, uint16_t wire, gpumem_nvme_cpl *out, uint64_t leave) {
    int got = gpumem__cid_collect_done(qp, wire, out, leave);
    if (got != 0) return got;
    gpumem__cq_harvest_warp(qp);
    return gpumem__cid_collect_done(qp, wire, out, leave);
}

/* The owner of CID `wire` stops waiting for it: mark it ORPHAN so that the
 * harvester frees it. Returns 0 if its completion was taken first (then
 * the owner collects it as usual: gpumem__cid_collect_now). */
GPUMEM_API int gpumem__cid_orphan(gpumem_nvme_qp *qp, uint16_t wire) {
    uint64_t w = gpumem_atomic_load_u64(gpumem__cid_word(qp, wire), GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    /* Relaxed: nothing is published; the harvester's compare-and-swap sees
     * either this mark or the word without it. Fails once a harvester has
     * claimed the word (or the word changed some other way: then retry). */
    while ((w & (GPUMEM__CID_IN_USE | GPUMEM__CID_SUBMITTED | GPUMEM__CID_CLAIMED | GPUMEM__CID_DONE)) ==
               (GPUMEM__CID_IN_USE | GPUMEM__CID_SUBMITTED) &&
           GPUMEM__CID_WIRE(w) == wire)
        if (gpumem_atomic_cas_u64(gpumem__cid_word(qp, wire), &w, w | GPUMEM__CID_ORPHAN, GPUMEM_ORDER_RELAXED,
                                  GPUMEM__DEV))
            return 1;
    return 0;
}

/* Collect a result that orphaning found taken: a harvester has claimed it
 * and is a few stores from DONE. 1, or -1 as gpumem__cid_collect (a copy of
 * the request collected it meanwhile). */
GPUMEM_API int gpumem__cid_collect_now(gpumem_nvme_qp *qp, uint16_t wire, gpumem_nvme_cpl *out) {
    int got = 0;
    GPUMEM__QP_WAIT_CPL(qp, wire, (got = gpumem__cid_collect(qp, wire, out, 0)) != 0, 0);
    return got;
}

/* The pair's `stopped` word (GPUMEM__QP_*). Acquire: pairs with the
 * controller's release store, made after its last completion was posted. */
GPUMEM_API uint32_t gpumem__qp_stopped(gpumem_nvme_qp *qp) {
    return gpumem_atomic_load_u32(&qp->signals->stopped.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__SYS);
}

/* The status a call returns for a pair whose stopped word is s (nonzero). */
GPUMEM_API gpumem_status gpumem__stopped_status(uint32_t s) {
    return s == GPUMEM__QP_ABORTED || s == GPUMEM__QP_RESETTING ? GPUMEM_EABORTED : GPUMEM_ENODEV;
}

/* The stopped word as a round of a wait looks at it. Every waiting thread
 * looks once a round, and for GPU threads of a host-thread controller's
 * pair the word is in pinned host memory: so on the device one lane of the
 * warp's lanes on this pair reads it, relaxed, and passes it on by shuffle
 * (one read across PCIe per warp and round, as the CQ poll is, instead of
 * 32; and no acquire, which would also drop the SM's L1 each round). A
 * shuffle orders nothing, so a lane told "set" reads the word again itself
 * with acquire, once, as its wait ends. */
GPUMEM_API uint32_t gpumem__qp_stopped_round(gpumem_nvme_qp *qp) {
#if GPUMEM_ON_DEVICE && GPUMEM_WARP_POLL
    const uint32_t peers = __match_any_sync(__activemask(), (unsigned long long)(uintptr_t)qp);
    const uint32_t leader = gpumem_lowest_lane(peers);
    uint32_t s = 0;
    if (gpumem_lane_id() == leader)
        s = gpumem_atomic_load_u32(&qp->signals->stopped.v, GPUMEM_ORDER_RELAXED, GPUMEM__SYS);
    return __shfl_sync(peers, s, (int)leader) ? gpumem__qp_stopped(qp) : 0;
#else
    return gpumem__qp_stopped(qp);
#endif
}

/* Why a wait should end, or 0: the controller stopped (ENODEV), the pair
 * was aborted (EABORTED), or the deadline passed (ETIMEDOUT). Stores the
 * reason in *st. */
GPUMEM_API int gpumem__qp_give_up(gpumem_nvme_qp *qp, uint64_t deadline, gpumem_status *st) {
    uint32_t s = gpumem__qp_stopped_round(qp);
    if (s && s != GPUMEM__QP_RESETTING) *st = gpumem__stopped_status(s);
    else if (gpumem_deadline_passed(deadline)) *st = GPUMEM_ETIMEDOUT;
    else return 0;
    return 1;
}

/* The pair's command timeout for a command first seen outstanding now
 * (*deadline 0: not yet looked): sets the deadline on the first call and
 * says, on later ones, whether it passed. The first look comes right after
 * submission in a blocking call, so the clock is read only for commands
 * that did not complete at once. */
GPUMEM_API int gpumem__cmd_expired(gpumem_nvme_qp *qp, uint64_t *deadline) {
    if (*deadline == 0) {
        *deadline = gpumem_deadline_ns(qp->cmd_timeout_ns);
        return 0;
    }
    return gpumem_deadline_passed(*deadline);
}

/* ---- command IDs ---------------------------------------------------------- */

/* Try to take command ID `c` (a round-robin candidate: the pair's
 * cid_ticket, or the gate word's field for a submission's first); *cid is
 * the CID to send: the ID with its generation advanced by one (wrapping
 * within the bits above the ID), so that a completion of the ID's previous
 * command cannot pass for this one. */
GPUMEM_API int gpumem__cid_try_id(gpumem_nvme_qp *qp, uint32_t c, uint16_t *cid) {
    uint64_t w = gpumem_atomic_load_u64(&qp->cids[c], GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    uint32_t wire;
    if (w & GPUMEM__CID_IN_USE) return 0;
    if (w & GPUMEM__CID_DONE) {
        /* Reusable only once the head has passed the old completion and the
         * doorbell has told the controller so: no harvester can meet it again,
         * and the controller never sees the ID twice in flight. Each of the
         * two round-robin tickets revisits every ID within n_cids of its
         * takes, and one of them has at least half of all takes: far less
         * than the 2^31 completions that would make this comparison wrap. */
        uint32_t head = gpumem_atomic_load_u32(&qp->cq_released.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
        if (gpumem_wrap_diff_u32(head, (uint32_t)w) <= 0) return 0;
    }
    wire = (GPUMEM__CID_WIRE(w) + qp->n_cids) & 0xFFFFu; /* generation + 1; the ID bits stay */
    wire = (wire & ~(qp->n_cids - 1)) | c;
    if (!gpumem_atomic_cas_u64(&qp->cids[c], &w, GPUMEM__CID_IN_USE | ((uint64_t)wire << 32), GPUMEM_ORDER_ACQUIRE,
                               GPUMEM__DEV))
        return 0;
    *cid = (uint16_t)wire;
    return 1;
}

/* Try one candidate from the pair's round-robin ticket. */
GPUMEM_API int gpumem__cid_try_take(gpumem_nvme_qp *qp, uint16_t *cid) {
    return gpumem__cid_try_id(
        qp, gpumem_atomic_fetch_add_u32(&qp->cid_ticket.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV) & (qp->n_cids - 1),
        cid);
}

/* ---- public I/O API ------------------------------------------------------- */

/* An asynchronous request: submit fills it, poll completes it. It is a
 * handle the pair checks (issue 30): it carries the pair it was submitted
 * to (the pair's tag), the CID it got (ID and generation), and its state -
 * never submitted, in flight, collected, or ended without a result. A
 * zeroed request is "never submitted"; so is one whose submit was refused,
 * whatever it held before. Poll, wait and gpumem_nvme_req_busy refuse,
 * changing nothing in the pair, and say why in the log (host):
 *   - a request of another pair: GPUMEM_EINVAL;
 *   - one never submitted, or "in flight" under a CID that the pair no
 *     longer holds for it (a copy of a request collected or given up
 *     already): GPUMEM_ESTATE.
 * A submit with a request that is in flight on the same pair is refused
 * (GPUMEM_ESTATE) before anything is taken. What the pair cannot see: a
 * request in flight on another pair passed to submit (it reads like a
 * stack request's leftover bytes, and is overwritten), and a copy held so
 * long that its ID's generation wrapped to the current command's (at
 * least 16 reuses of the ID with 4,096 IDs or fewer; see "Validation"). */
typedef struct gpumem_nvme_req {
    gpumem_nvme_cpl cpl; /* the completion, valid once poll returned OK, EIO or EABORTED */
    uint16_t cid;   /* the CID sent: command ID and generation */
    uint16_t state; /* GPUMEM__REQ_*: never submitted, in flight, collected, or ended without a result */
    uint32_t pair;  /* the tag of the pair it was submitted to (gpumem_nvme_qp.tag); 0: none */
    uint64_t deadline_ns; /* when the pair's command timeout gives it up (gpumem_clock_ns; 0: not yet set) */
} gpumem_nvme_req;

enum {
    GPUMEM__REQ_IDLE = 0, /* never submitted, or its submit was refused */
    GPUMEM__REQ_SUBMITTED = 1,
    GPUMEM__REQ_DONE = 2,
    GPUMEM__REQ_ABANDONED = 3, /* the controller stopped */
    GPUMEM__REQ_TIMED_OUT = 4, /* outlived the command timeout */
    GPUMEM__REQ_ABORTED = 5    /* the pair was reset */
};

/* Refuse a request (see gpumem_nvme_req): the status, and on the host a
 * line that says which call, which pair and why. Changes nothing. The
 * reasons: */
#define GPUMEM__REQ_NEVER "the request was never submitted (or its submit was refused)"
#define GPUMEM__REQ_FOREIGN "the request belongs to another pair"
#define GPUMEM__REQ_GONE                                                                                    \
    "the request is not in flight: the pair holds no command ID for it (a copy of a request collected or " \
    "given up already?)"
#define GPUMEM__REQ_OUT "the request is in flight on this pair: submit it again once it has its result"
GPUMEM_API gpumem_status gpumem__req_refuse(const gpumem_nvme_qp *qp, const gpumem_nvme_req *req, const char *call,
                                            const char *why, gpumem_status st) {
#if GPUMEM_ON_DEVICE
    (void)qp;
    (void)req;
    (void)call;
    (void)why;
#else
    GPUMEM_LOG("queue pair %u: %s: %s; nothing done (the request: CID %u, state %u, pair tag %08x; this pair's "
               "tag %08x)",
               qp->qid, call, why, (unsigned)req->cid, (unsigned)req->state, (unsigned)req->pair,
               (unsigned)qp->tag);
#endif
    return st;
}

/* What a completion means for its caller: GPUMEM_OK for success (SCT 0,
 * SC 0, whatever CRD, More and DNR say), GPUMEM_EABORTED for a command
 * aborted by SQ deletion (a reset), GPUMEM_EIO for any other error. */
GPUMEM_API gpumem_status gpumem__cpl_result(const gpumem_nvme_cpl *c) {
    uint16_t sf = gpumem_nvme_cpl_status(c);
    if (gpumem_nvme_status_ok(sf)) return GPUMEM_OK;
    return (sf & 0x7FFu) == GPUMEM_NVME_SC_ABORTED_SQ_DELETION ? GPUMEM_EABORTED : GPUMEM_EIO;
}

/* With a unit of the budget taken, a free command ID: 1, or 0 (then the
 * caller gives the unit back). Within the budget an ID is free unless
 * completions wait for the head to pass them (other threads' steps): look
 * at up to 64 candidates, the first `first` (from the gate word, see
 * gpumem__gate_enter), the others from the pair's ticket. */
GPUMEM_API int gpumem__cid_pick(gpumem_nvme_qp *qp, uint32_t first, uint16_t *cid) {
    uint32_t tries;
    if (gpumem__cid_try_id(qp, first & (qp->n_cids - 1), cid)) return 1;
    for (tries = 1; tries < 64 && tries < qp->n_cids; tries++)
        if (gpumem__cid_try_take(qp, cid)) return 1;
    return 0;
}

/* Take a unit of the budget (below `limit`) and a free command ID with it,
 * or neither. */
GPUMEM_API int gpumem__cid_take(gpumem_nvme_qp *qp, uint32_t limit, uint16_t *cid) {
    uint32_t tries;
    if (!gpumem__budget_take(qp, limit)) return 0;
    for (tries = 0; tries < 64 && tries < qp->n_cids; tries++)
        if (gpumem__cid_try_take(qp, cid)) return 1;
    gpumem__budget_put(qp);
    return 0;
}

/* Bytes a Read or Write moves (its block count times the block size). */
GPUMEM_API uint64_t gpumem__cmd_bytes(const gpumem_nvme_qp *qp, const gpumem_nvme_cmd *c) {
    return ((uint64_t)(c->cdw12 & 0xFFFFu) + 1) << qp->ns.lba_shift;
}

/* Can `data` carry command c (built by gpumem__qp_data_cmd, which refused a
 * NULL buffer)? Checked before a command ID is taken, so that building its
 * PRPs under the ID cannot fail: GPUMEM_EALIGN unless dword aligned (the PRP
 * rule), GPUMEM_E2BIG if it needs more PRP-list pages than each command ID
 * of the pair has (or the pair has none). */
GPUMEM_API gpumem_status gpumem__qp_data_check(const gpumem_nvme_qp *qp, const gpumem_nvme_cmd *c,
                                               const gpumem_nvme_iomap *data) {
    uint64_t iova = gpumem_nvme_iomap_at(data, 0);
    if ((iova & 3u) != 0) return GPUMEM_EALIGN;
    if (gpumem_nvme_prp_list_pages(gpumem_nvme_prp_pages(iova, gpumem__cmd_bytes(qp, c))) > qp->prp_list_pages)
        return GPUMEM_E2BIG;
    return GPUMEM_OK;
}

/* Put `cmd` on the submission queue under command ID `cid`. With `data`, its
 * PRPs are built here, into the ID's own PRP-list pages: nobody else writes
 * them until the ID is free again, which is after the controller has
 * consumed the command (and so read the list). The list is written before
 * the command is published; the doorbell's release orders both for the
 * controller. */
GPUMEM_API void gpumem__submit(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd, uint16_t cid,
                               const gpumem_nvme_iomap *data) {
    const uint32_t id = cid & (qp->n_cids - 1);
    gpumem_nvme_cmd c;
    uint32_t ticket;
    gpumem__cmd_hold(&c, cmd); /* in memory through the turn wait (gpumem__sq_enqueue) */
    c.cdw0 = (c.cdw0 & 0xFFFFu) | ((uint32_t)cid << 16);
    if (data) {
        const uint64_t page_words = GPUMEM_NVME_PAGE_BYTES / 8;
        gpumem_nvme_iomap list = gpumem_nvme_iomap_sub(&qp->prp_map, (uint64_t)id * qp->prp_list_pages *
                                                                         GPUMEM_NVME_PAGE_BYTES);
        uint64_t *words = qp->prp_lists ? qp->prp_lists + (size_t)id * qp->prp_list_pages * page_words : 0;
        /* Cannot fail: gpumem__qp_data_check passed. */
        (void)gpumem_nvme_prp_build(data, gpumem__cmd_bytes(qp, &c), words, &list,
                                    (uint32_t)(qp->prp_list_pages * page_words), &c.prp1, &c.prp2);
    }
    ticket = gpumem_atomic_fetch_add_u32(&qp->ticket.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    /* The ID word learns its command's ticket before the command can reach
     * the controller, so that a harvester can judge its completion's SQ
     * head. Relaxed: the command is published by the tail marker's release
     * and the doorbell, which come after this store in this thread's order;
     * the completion that a harvester judges comes after the doorbell. */
    gpumem_atomic_store_u64(&qp->cids[id],
                            GPUMEM__CID_IN_USE | GPUMEM__CID_SUBMITTED | ((uint64_t)cid << 32) | ticket,
                            GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    gpumem__sq_enqueue(qp, ticket, &c);
}

/* gpumem_nvme_qp_submit with PRPs built from `data` when it is not NULL, and
 * a budget limit of the caller's choosing (a caller that never blocks while
 * it holds requests, such as the serialised admin queue, may use the whole
 * budget, cid_limit). */
GPUMEM_API gpumem_status gpumem__qp_submit_within(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                                  const gpumem_nvme_iomap *data, gpumem_nvme_req *req,
                                                  uint32_t limit) {
    uint16_t cid = 0;
    uint32_t s, first = 0;
    int took;
    gpumem_status st;
    if (!qp || !cmd || !req) return GPUMEM_ENULL;
    /* Relaxed: whether the request's ID is held for it says only whether
     * it is in flight; nothing is read through it. */
    if (req->state == GPUMEM__REQ_SUBMITTED && req->pair == qp->tag &&
        gpumem__cid_held(gpumem_atomic_load_u64(gpumem__cid_word(qp, req->cid), GPUMEM_ORDER_RELAXED, GPUMEM__DEV),
                         req->cid))
        return gpumem__req_refuse(qp, req, "submit", GPUMEM__REQ_OUT, GPUMEM_ESTATE);
    req->state = GPUMEM__REQ_IDLE; /* until it is submitted: a refused submit leaves it never submitted */
    if ((s = gpumem__qp_stopped(qp)) != 0) return gpumem__stopped_status(s);
    if (data && (st = gpumem__qp_data_check(qp, cmd, data)) != GPUMEM_OK) return st;
    /* Enter the pair and take a unit of the budget, one add (see "Gate"). */
    if ((took = gpumem__gate_enter(qp, 1, limit, &first)) < 0) return GPUMEM_EABORTED; /* closed for a reset */
    if (!took || !gpumem__cid_pick(qp, first, &cid)) {
        if (took) gpumem__budget_put(qp);
        gpumem__cq_harvest_warp(qp); /* the caller retries: free what has come */
        gpumem__gate_leave(qp);
        return GPUMEM_EAGAIN;
    }
    /* The command timeout starts at the first poll that finds the command
     * outstanding (gpumem__cmd_expired): no clock is read for a command
     * that is complete when first looked at. */
    req->deadline_ns = 0;
    gpumem__submit(qp, cmd, cid, data);
    gpumem__gate_leave(qp);
    req->cid = cid;
    req->pair = qp->tag;
    req->state = GPUMEM__REQ_SUBMITTED;
    return GPUMEM_OK;
}

/* gpumem_nvme_qp_submit, with PRPs built from `data` when it is not NULL. */
GPUMEM_API gpumem_status gpumem__qp_submit(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                           const gpumem_nvme_iomap *data, gpumem_nvme_req *req) {
    return gpumem__qp_submit_within(qp, cmd, data, req, qp ? qp->async_limit : 0);
}

/* Submit and return once the controller can see the command; the request
 * holds a command ID until poll (or wait) has returned its result. Never
 * waits on the controller (see "Budget"). GPUMEM_EAGAIN when the pair's
 * asynchronous budget (async_limit IDs) is used up or no ID is free:
 * poll or wait for requests of yours, then retry. GPUMEM_ENODEV once the
 * pair's controller has stopped, GPUMEM_EABORTED while the pair is being
 * reset. The command carries its own PRPs; gpumem_nvme_qp_submit_buf
 * builds them. */
GPUMEM_API gpumem_status gpumem_nvme_qp_submit(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                               gpumem_nvme_req *req) {
    return gpumem__qp_submit(qp, cmd, (const gpumem_nvme_iomap *)0, req);
}

/* The owner of CID `wire` gives its command up for `why` (GPUMEM_ETIMEDOUT
 * by the command timeout when `expired`, GPUMEM_ENODEV, GPUMEM_EABORTED, or
 * a caller's own deadline): orphans the ID and counts it. Returns 0 if the
 * completion was taken first: then the caller collects it
 * (gpumem__cid_collect_now) instead. */
GPUMEM_API int gpumem__cid_give_up(gpumem_nvme_qp *qp, uint16_t wire, gpumem_status why, int expired) {
    if (!gpumem__cid_orphan(qp, wire)) return 0;
    if (expired)
        gpumem__qp_fault(qp, GPUMEM_NVME_FAULT_TIMEOUT, GPUMEM__QPC_TIMED_OUT, wire,
                         (uint32_t)(qp->cmd_timeout_ns / 1000000ull));
    else if (why == GPUMEM_EABORTED)
        gpumem_atomic_fetch_add_u32(&qp->counts[GPUMEM__QPC_ABORTED], 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    return 1;
}

/* A request that has its result, or not (got: gpumem__cid_collect). */
GPUMEM_API gpumem_status gpumem__req_collected(gpumem_nvme_qp *qp, gpumem_nvme_req *req, int got) {
    if (got < 0) return gpumem__req_refuse(qp, req, "poll", GPUMEM__REQ_GONE, GPUMEM_ESTATE);
    req->state = GPUMEM__REQ_DONE;
    return gpumem__cpl_result(&req->cpl);
}

/* What a poll can say without entering the pair (see "Gate"): a refusal, a
 * request's end, or its result if it is in the ID's mailbox (collected);
 * GPUMEM_EAGAIN for a request in flight whose result has not been
 * delivered. */
GPUMEM_API gpumem_status gpumem__poll_look(gpumem_nvme_qp *qp, gpumem_nvme_req *req) {
    int got;
    if (req->state == GPUMEM__REQ_IDLE) return gpumem__req_refuse(qp, req, "poll", GPUMEM__REQ_NEVER, GPUMEM_ESTATE);
    if (req->pair != qp->tag) return gpumem__req_refuse(qp, req, "poll", GPUMEM__REQ_FOREIGN, GPUMEM_EINVAL);
    switch (req->state) {
    case GPUMEM__REQ_SUBMITTED: break;
    case GPUMEM__REQ_DONE: return gpumem__cpl_result(&req->cpl);
    case GPUMEM__REQ_ABANDONED: return GPUMEM_ENODEV;
    case GPUMEM__REQ_TIMED_OUT: return GPUMEM_ETIMEDOUT;
    case GPUMEM__REQ_ABORTED: return GPUMEM_EABORTED;
    default: return gpumem__req_refuse(qp, req, "poll", GPUMEM__REQ_NEVER, GPUMEM_ESTATE);
    }
    if ((got = gpumem__cid_collect_done(qp, req->cid, &req->cpl, 0)) == 0) return GPUMEM_EAGAIN;
    return gpumem__req_collected(qp, req, got);
}

/* One look inside the pair for a request in flight, harvesting: poll's
 * part after gpumem__poll_look, and each round of a wait. The caller has
 * entered the pair; this leaves it whenever it returns anything but
 * GPUMEM_EAGAIN (a result collected leaves with its unit's subtraction:
 * one atomic for both). */
GPUMEM_API gpumem_status gpumem__poll_inside(gpumem_nvme_qp *qp, gpumem_nvme_req *req) {
    gpumem_status why;
    uint16_t ended;
    uint32_t s;
    int got;
    if ((got = gpumem__cid_collect(qp, req->cid, &req->cpl, GPUMEM__GATE_CALL)) != 1) {
        if (got == 0) {
            /* A wait polls every round: one read of the stopped word per warp */
            if ((s = gpumem__qp_stopped_round(qp)) != 0 && s != GPUMEM__QP_RESETTING) {
                why = gpumem__stopped_status(s);
                ended = s == GPUMEM__QP_ABORTED ? GPUMEM__REQ_ABORTED : GPUMEM__REQ_ABANDONED;
            } else if (gpumem__cmd_expired(qp, &req->deadline_ns)) {
                why = GPUMEM_ETIMEDOUT;
                ended = GPUMEM__REQ_TIMED_OUT;
            } else {
                return GPUMEM_EAGAIN;
            }
            if (gpumem__cid_give_up(qp, req->cid, why, why == GPUMEM_ETIMEDOUT)) {
                req->state = ended;
                gpumem__gate_leave(qp);
                return why;
            }
            got = gpumem__cid_collect_now(qp, req->cid, &req->cpl); /* it completed just before */
        }
        gpumem__gate_leave(qp);
    }
    return gpumem__req_collected(qp, req, got);
}

/* A request in flight without its result, on a pair closed for a reset.
 * Once the pair is aborted (its queues deleted: the controller moves no
 * more data for it; acquire, against the abort's release) it ends
 * GPUMEM_EABORTED through its ID word alone, the ID given up for the
 * reinitialisation to free. Before that the controller may still carry it
 * out (tests/spin/reset.pml found a read made into a buffer given back):
 * its result if it has come, else GPUMEM_EAGAIN. A result a harvester
 * inside the pair has claimed is a few stores away: waited for, collected. */
GPUMEM_API gpumem_status gpumem__poll_closed(gpumem_nvme_qp *qp, gpumem_nvme_req *req) {
    int got = 0;
    if (gpumem__qp_stopped(qp) != GPUMEM__QP_ABORTED) {
        if ((got = gpumem__cid_collect_done(qp, req->cid, &req->cpl, 0)) == 0) return GPUMEM_EAGAIN;
        return gpumem__req_collected(qp, req, got);
    }
    if (gpumem__cid_give_up(qp, req->cid, GPUMEM_EABORTED, 0)) {
        req->state = GPUMEM__REQ_ABORTED;
        return GPUMEM_EABORTED;
    }
    GPUMEM_WAIT_CAPPED(&qp->signals->event, 0, (got = gpumem__cid_collect_done(qp, req->cid, &req->cpl, 0)) != 0,
                       0);
    return gpumem__req_collected(qp, req, got);
}

/* One look for the request's completion: GPUMEM_EAGAIN while it is not
 * there; GPUMEM_OK, GPUMEM_EIO or GPUMEM_EABORTED (status in req->cpl) once
 * it is. Never waits. The request ends without a completion, and poll says
 * so from then on, when:
 *   - the command outlived the pair's command timeout, counted from the
 *     first poll that found it outstanding: GPUMEM_ETIMEDOUT;
 *   - the controller stopped: GPUMEM_ENODEV;
 *   - the pair is being reset: GPUMEM_EABORTED, once its queues are
 *     deleted (until then a poll that finds the pair closed for the reset
 *     says GPUMEM_EAGAIN: the controller may still carry the command out).
 * After ETIMEDOUT or ENODEV the controller may still carry the command out
 * and write into its buffer, until its late completion arrives (it is then
 * dropped, counted, and the ID freed) or the pair is reset:
 * gpumem_nvme_req_busy says when the buffer may be reused. After EABORTED
 * it never will (the queues were deleted first). A request of another
 * pair gets GPUMEM_EINVAL; one never submitted, or a copy of one that is
 * no longer in flight, GPUMEM_ESTATE (see gpumem_nvme_req). */
GPUMEM_API gpumem_status gpumem_nvme_qp_poll(gpumem_nvme_qp *qp, gpumem_nvme_req *req) {
    gpumem_status st;
    if (!qp || !req) return GPUMEM_ENULL;
    if ((st = gpumem__poll_look(qp, req)) != GPUMEM_EAGAIN) return st;
    if (gpumem__gate_enter_call(qp) < 0) return gpumem__poll_closed(qp, req);
    if ((st = gpumem__poll_inside(qp, req)) == GPUMEM_EAGAIN) gpumem__gate_leave(qp); /* else left */
    return st;
}

/* Whether the controller may still read or write the request's buffer (0
 * for NULL arguments): 1 while it is submitted and not yet polled to its
 * end, and after GPUMEM_ETIMEDOUT or GPUMEM_ENODEV until the command's late
 * completion has arrived or the pair was reset; 0 once the request has its
 * result or was aborted, and for a request never submitted. A buffer may
 * be reused (freed, or handed to another request) only when this says 0.
 * Negative for a request it cannot judge, logged: -GPUMEM_EINVAL for one
 * of another pair, -GPUMEM_ESTATE for a copy of one that is no longer in
 * flight (see gpumem_nvme_req); ask the pair the request belongs to, with
 * the request itself. */
GPUMEM_API int gpumem_nvme_req_busy(gpumem_nvme_qp *qp, const gpumem_nvme_req *req) {
    uint64_t w;
    if (!qp || !req || req->state == GPUMEM__REQ_IDLE) return 0;
    if (req->pair != qp->tag) return -(int)gpumem__req_refuse(qp, req, "req_busy", GPUMEM__REQ_FOREIGN, GPUMEM_EINVAL);
    if (req->state == GPUMEM__REQ_SUBMITTED) {
        w = gpumem_atomic_load_u64(gpumem__cid_word(qp, req->cid), GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
        if (!gpumem__cid_held(w, req->cid))
            return -(int)gpumem__req_refuse(qp, req, "req_busy", GPUMEM__REQ_GONE, GPUMEM_ESTATE);
        return 1;
    }
    if (req->state != GPUMEM__REQ_TIMED_OUT && req->state != GPUMEM__REQ_ABANDONED) return 0;
    if (gpumem__qp_stopped(qp) == GPUMEM__QP_ABORTED) return 0; /* its queues are deleted */
    /* Acquire: pairs with the harvester's release of the freed word, and so
     * with the controller's writes into the buffer that its completion
     * followed. */
    w = gpumem_atomic_load_u64(gpumem__cid_word(qp, req->cid), GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
    return (w & (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN)) == (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN) &&
           GPUMEM__CID_WIRE(w) == req->cid;
}

/* Poll until done, at most timeout_ns (GPUMEM_NO_TIMEOUT: no limit).
 * GPUMEM_ETIMEDOUT: either the caller's timeout_ns passed, which leaves the
 * request submitted (wait or poll again later), or the pair's command
 * timeout did, which ends it (poll then says GPUMEM_ETIMEDOUT again; see
 * gpumem_nvme_qp_poll). ENODEV and EABORTED as gpumem_nvme_qp_poll. */
GPUMEM_API gpumem_status gpumem_nvme_qp_wait_timed(gpumem_nvme_qp *qp, gpumem_nvme_req *req, uint64_t timeout_ns) {
    gpumem_status st = GPUMEM_OK, why = GPUMEM_OK;
    uint64_t deadline;
    if (!qp || !req) return GPUMEM_ENULL;
    if ((st = gpumem__poll_look(qp, req)) != GPUMEM_EAGAIN) return st;
    deadline = gpumem_deadline_ns(timeout_ns);
    if (gpumem__gate_enter_call(qp) < 0) {
        /* Closed for a reset: wait outside the pair until the request has
         * its result or its queues are deleted (gpumem__poll_closed); the
         * abort's state change wakes a parked host thread. */
        GPUMEM_WAIT_CAPPED(&qp->signals->event, gpumem__qp_wait_cap(qp),
                           (st = gpumem__poll_closed(qp, req)) != GPUMEM_EAGAIN,
                           gpumem_deadline_passed(deadline) && (why = GPUMEM_ETIMEDOUT) != GPUMEM_OK);
        return why != GPUMEM_OK ? why : st;
    }
    /* Inside the pair once for the whole wait. Each round ends the wait
     * when the controller stops or the command times out. */
    GPUMEM__QP_WAIT_CPL(qp, req->cid, (st = gpumem__poll_inside(qp, req)) != GPUMEM_EAGAIN,
                        gpumem_deadline_passed(deadline) && (why = GPUMEM_ETIMEDOUT) != GPUMEM_OK);
    if (why != GPUMEM_OK) {
        gpumem__gate_leave(qp); /* the caller's time ran out: still inside */
        return why;
    }
    return st; /* poll_inside left */
}

/* Poll until done (the pair's command timeout still applies). */
GPUMEM_API gpumem_status gpumem_nvme_qp_wait(gpumem_nvme_qp *qp, gpumem_nvme_req *req) {
    return gpumem_nvme_qp_wait_timed(qp, req, GPUMEM_NO_TIMEOUT);
}

/* The two waits of a blocking command (gpumem__qp_exec_timed), each a
 * function of its own: the ID wait takes only the pair and the deadline,
 * the completion wait the pair, the ID and the deadline, never the command.
 * Inlined as before; written apart, they cost the cache's element read (whose
 * miss waits in both) 4 registers fewer on sm_90 (60 to 56, ptxas), the
 * queue's own kernels none (bench/results/registers-sm_90.md).
 * First a command ID for `qp`, waited for until `deadline`
 * (gpumem_deadline_ns): GPUMEM_OK with *cid, or why none was had (then
 * nothing is held). */
GPUMEM_API gpumem_status gpumem__qp_id_wait(gpumem_nvme_qp *qp, uint64_t deadline, uint16_t *cid) {
    gpumem_status why = GPUMEM_OK;
    if (gpumem__cid_take(qp, qp->cid_limit, cid)) return GPUMEM_OK;
    /* Counted while waiting, so that destroying the pair meanwhile is
     * refused (GPUMEM_EBUSY); a thread that holds an ID is seen by it. */
    gpumem_atomic_fetch_add_u32(&qp->waiters.v, 1, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    GPUMEM_WAIT_CAPPED(&qp->signals->id_event, gpumem__qp_wait_cap(qp),
                       gpumem__cid_take(qp, qp->cid_limit, cid) || (gpumem__cq_harvest_warp(qp), 0),
                       gpumem__qp_give_up(qp, deadline, &why));
    gpumem_atomic_fetch_sub_u32(&qp->waiters.v, 1, GPUMEM_ORDER_RELEASE, GPUMEM__DEV);
    return why;
}

/* Then, once the command with ID `cid` was submitted, its completion, until
 * `deadline` and at most the pair's command timeout: copied to *cpl (may be
 * NULL); the result as gpumem_nvme_qp_exec_timed says. */
GPUMEM_API gpumem_status gpumem__qp_cpl_wait(gpumem_nvme_qp *qp, uint16_t cid, uint64_t deadline,
                                             gpumem_nvme_cpl *cpl) {
    gpumem_nvme_cpl got;
    gpumem_status why = GPUMEM_OK;
    uint64_t cmd_deadline = 0;
    int expired = 0, held = 0;
    /* The command timeout starts at the first look that finds no result,
     * right after submission. */
    GPUMEM__QP_WAIT_CPL(qp, cid, (held = gpumem__cid_collect(qp, cid, &got, 0)) != 0,
                        gpumem__qp_give_up(qp, deadline, &why) ||
                            ((expired = gpumem__cmd_expired(qp, &cmd_deadline)) != 0 &&
                             (why = GPUMEM_ETIMEDOUT) != GPUMEM_OK));
    if (why != GPUMEM_OK) {
        if (gpumem__cid_give_up(qp, cid, why, expired)) return why;
        held = gpumem__cid_collect_now(qp, cid, &got); /* taken just before: its result stands */
    }
    /* Its ID was freed by someone else: a stale request copy whose CID's
     * generation wrapped to this command's took the result (see
     * gpumem_nvme_req). The command is done; its result is lost. */
    if (held < 0) return GPUMEM_ESTATE;
    if (cpl) *cpl = got;
    return gpumem__cpl_result(&got);
}

/* gpumem_nvme_qp_exec_timed, with PRPs built from `data` when it is not NULL. */
GPUMEM_API gpumem_status gpumem__qp_exec_timed(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                               const gpumem_nvme_iomap *data, gpumem_nvme_cpl *cpl,
                                               uint64_t timeout_ns) {
    uint64_t deadline;
    uint16_t cid = 0;
    uint32_t s;
    gpumem_status st;
    gpumem_nvme_cmd held;
    if (!qp || !cmd) return GPUMEM_ENULL;
    if ((s = gpumem__qp_stopped(qp)) != 0) return gpumem__stopped_status(s);
    if (data && (st = gpumem__qp_data_check(qp, cmd, data)) != GPUMEM_OK) return st;
    gpumem__cmd_hold(&held, cmd); /* in memory through the ID wait (see gpumem__cmd_hold) */
    deadline = gpumem_deadline_ns(timeout_ns);
    if (gpumem__gate_enter_call(qp) < 0) return GPUMEM_EABORTED; /* closed for a reset */
    if ((st = gpumem__qp_id_wait(qp, deadline, &cid)) == GPUMEM_OK) {
        gpumem__submit(qp, &held, cid, data);
        st = gpumem__qp_cpl_wait(qp, cid, deadline, cpl);
    }
    gpumem__gate_leave(qp);
    return st;
}

/* gpumem_nvme_qp_exec, with PRPs built from `data` when it is not NULL. */
GPUMEM_API gpumem_status gpumem__qp_exec(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                         const gpumem_nvme_iomap *data, gpumem_nvme_cpl *cpl) {
    return gpumem__qp_exec_timed(qp, cmd, data, cpl, GPUMEM_NO_TIMEOUT);
}

/* Blocking, at most timeout_ns (GPUMEM_NO_TIMEOUT: no limit) and at most
 * the pair's command timeout after submission: take a command ID, submit,
 * wait for the completion and copy it to *cpl (may be NULL). GPUMEM_EIO if
 * the controller reported an error (gpumem_nvme_cpl_dnr: whether a retry
 * may help), GPUMEM_EABORTED if the command was aborted. GPUMEM_ETIMEDOUT,
 * GPUMEM_ENODEV (the controller stopped) or GPUMEM_EABORTED (a reset)
 * before an ID was had: nothing was submitted. After submission: the
 * command was given up. ETIMEDOUT and ENODEV: it may still be carried out
 * (its buffer read or written) until its late completion frees its ID
 * (gpumem_nvme_qp_get_stats counts those still out: `orphans`) or the pair
 * is reset; so such a buffer may be reused only once
 * gpumem_nvme_qp_orphans_settled says GPUMEM_OK (its acquire orders the
 * controller's last writes before the reuse; a statistics count of 0 does
 * not). A request, gpumem_nvme_qp_submit, can be asked on its own:
 * gpumem_nvme_req_busy. EABORTED: it never will. */
GPUMEM_API gpumem_status gpumem_nvme_qp_exec_timed(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd,
                                                   gpumem_nvme_cpl *cpl, uint64_t timeout_ns) {
    return gpumem__qp_exec_timed(qp, cmd, (const gpumem_nvme_iomap *)0, cpl, timeout_ns);
}

/* Blocking: as gpumem_nvme_qp_exec_timed without a time limit. */
GPUMEM_API gpumem_status gpumem_nvme_qp_exec(gpumem_nvme_qp *qp, const gpumem_nvme_cmd *cmd, gpumem_nvme_cpl *cpl) {
    return gpumem__qp_exec(qp, cmd, (const gpumem_nvme_iomap *)0, cpl);
}

/* Blocking Read or Write of nlb blocks at slba, checked against the
 * namespace, at most timeout_ns (see gpumem_nvme_qp_exec_timed). */
GPUMEM_API gpumem_status gpumem_nvme_qp_rw_timed(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                                 uint64_t prp1, uint64_t prp2, gpumem_nvme_cpl *cpl,
                                                 uint64_t timeout_ns) {
    gpumem_nvme_cmd c;
    gpumem_status st;
    if (!qp) return GPUMEM_ENULL;
    if ((st = gpumem_nvme_cmd_rw(&c, opcode, &qp->ns, slba, nlb, prp1, prp2)) != GPUMEM_OK) return st;
    return gpumem_nvme_qp_exec_timed(qp, &c, cpl, timeout_ns);
}

/* Blocking Read or Write without a time limit. */
GPUMEM_API gpumem_status gpumem_nvme_qp_rw(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                           uint64_t prp1, uint64_t prp2, gpumem_nvme_cpl *cpl) {
    return gpumem_nvme_qp_rw_timed(qp, opcode, slba, nlb, prp1, prp2, cpl, GPUMEM_NO_TIMEOUT);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_read(gpumem_nvme_qp *qp, uint64_t slba, uint32_t nlb, uint64_t prp1,
                                             uint64_t prp2, gpumem_nvme_cpl *cpl) {
    return gpumem_nvme_qp_rw(qp, GPUMEM_NVME_OP_READ, slba, nlb, prp1, prp2, cpl);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_write(gpumem_nvme_qp *qp, uint64_t slba, uint32_t nlb, uint64_t prp1,
                                              uint64_t prp2, gpumem_nvme_cpl *cpl) {
    return gpumem_nvme_qp_rw(qp, GPUMEM_NVME_OP_WRITE, slba, nlb, prp1, prp2, cpl);
}

/* ---- commands built from buffers ------------------------------------------ */
/*
 * Read or Write nlb blocks at slba into / from a buffer, with PRP1, PRP2 and
 * a PRP list (in the command ID's own list pages) built from the buffer's
 * address: any address NVMe allows, which is any dword-aligned one. A
 * buffer that starts inside a page (CUDA's allocators hand out 512-byte
 * aligned blocks) simply spans one page more. Refused with a status, before
 * anything reaches the controller: GPUMEM_EALIGN (not dword aligned),
 * GPUMEM_E2BIG (more than max_blocks, or a PRP list the pair has no pages
 * for), GPUMEM_ERANGE (past the namespace), GPUMEM_ENULL.
 *
 * _buf: the buffer's virtual address is what the controller uses (the
 * software controllers, the GPU-resident one, GPU memory). _map: the
 * buffer's I/O addresses are given (gpumem_nvmectl_dma's map for a real
 * controller, gpumem_nvme_iomap_sub to start inside it).
 */
GPUMEM_API gpumem_status gpumem__qp_data_cmd(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                             const gpumem_nvme_iomap *data, gpumem_nvme_cmd *c) {
    if (!qp || !data) return GPUMEM_ENULL;
    /* The buffer's address as PRP1: the builder refuses a NULL one. The real
     * PRPs are built at submission, under the command ID. */
    return gpumem_nvme_cmd_rw(c, opcode, &qp->ns, slba, nlb, gpumem_nvme_iomap_at(data, 0), 0);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_submit_map(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                                   const gpumem_nvme_iomap *data, gpumem_nvme_req *req) {
    gpumem_nvme_cmd c;
    gpumem_status st = gpumem__qp_data_cmd(qp, opcode, slba, nlb, data, &c);
    return st != GPUMEM_OK ? st : gpumem__qp_submit(qp, &c, data, req);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_rw_map(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                               const gpumem_nvme_iomap *data, gpumem_nvme_cpl *cpl) {
    gpumem_nvme_cmd c;
    gpumem_status st = gpumem__qp_data_cmd(qp, opcode, slba, nlb, data, &c);
    return st != GPUMEM_OK ? st : gpumem__qp_exec(qp, &c, data, cpl);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_submit_buf(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                                   const void *buf, gpumem_nvme_req *req) {
    gpumem_nvme_iomap m = gpumem_nvme_iomap_contiguous((uint64_t)(uintptr_t)buf);
    return gpumem_nvme_qp_submit_map(qp, opcode, slba, nlb, &m, req);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_rw_buf(gpumem_nvme_qp *qp, uint8_t opcode, uint64_t slba, uint32_t nlb,
                                               const void *buf, gpumem_nvme_cpl *cpl) {
    gpumem_nvme_iomap m = gpumem_nvme_iomap_contiguous((uint64_t)(uintptr_t)buf);
    return gpumem_nvme_qp_rw_map(qp, opcode, slba, nlb, &m, cpl);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_read_buf(gpumem_nvme_qp *qp, uint64_t slba, uint32_t nlb, void *buf,
                                                 gpumem_nvme_cpl *cpl) {
    return gpumem_nvme_qp_rw_buf(qp, GPUMEM_NVME_OP_READ, slba, nlb, buf, cpl);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_write_buf(gpumem_nvme_qp *qp, uint64_t slba, uint32_t nlb, const void *buf,
                                                  gpumem_nvme_cpl *cpl) {
    return gpumem_nvme_qp_rw_buf(qp, GPUMEM_NVME_OP_WRITE, slba, nlb, buf, cpl);
}

GPUMEM_API gpumem_status gpumem_nvme_qp_flush(gpumem_nvme_qp *qp, gpumem_nvme_cpl *cpl) {
    gpumem_nvme_cmd c;
    if (!qp) return GPUMEM_ENULL;
    gpumem_nvme_cmd_flush(&c, &qp->ns);
    return gpumem_nvme_qp_exec(qp, &c, cpl);
}

/* Set a pair's stopped word (GPUMEM__QP_*) through its signals block alone:
 * what a controller calls, which never touches the client state. While it
 * is nonzero, waits for an ID or a completion end (GPUMEM_ENODEV, or
 * GPUMEM_EABORTED during a reset), and so do new calls. Release: the
 * controller's last completions are visible to whoever sees the mark; the
 * notifications wake parked host waiters at once (in another process too:
 * the events are process-shared). */
GPUMEM_API gpumem_status gpumem__signals_set_state(gpumem_nvme_qp_signals *s, uint32_t state) {
    if (!s) return GPUMEM_ENULL;
    gpumem_atomic_store_u32(&s->stopped.v, state, GPUMEM_ORDER_RELEASE, GPUMEM__SYS);
    gpumem_event_notify(&s->event);
    gpumem_event_notify(&s->id_event);
    gpumem_event_notify(&s->sq_event);
    return GPUMEM_OK;
}

/* Mark a pair's controller stopped (stopped != 0) or running again. */
GPUMEM_API gpumem_status gpumem_nvme_qp_signals_set_stopped(gpumem_nvme_qp_signals *s, int stopped) {
    return gpumem__signals_set_state(s, stopped ? GPUMEM__QP_STOPPED : GPUMEM__QP_RUNNING);
}

/* The same for a caller that holds the pair (its owner). */
GPUMEM_API gpumem_status gpumem_nvme_qp_set_stopped(gpumem_nvme_qp *qp, int stopped) {
    if (!qp) return GPUMEM_ENULL;
    return gpumem_nvme_qp_signals_set_stopped(qp->signals, stopped);
}

/*
 * Queue reset, the pair's part (a controller's owner drives it:
 * gpumem_swctl_reset_begin/end, gpumem_nvmectl_reset_begin/end):
 *
 *   1. the controller deletes the pair's I/O SQ, then its CQ: from then on
 *      it transfers no data for the pair's commands (NVMe: once Delete I/O
 *      SQ has completed);
 *   2. gpumem_nvme_qp_abort: the pair is closed to new entrants (see
 *      "Gate"), and every wait on the pair, every poll of a request
 *      without its result, and every new call ends with GPUMEM_EABORTED;
 *      under load, from any thread;
 *   3. the threads inside calls on the pair leave it (they see the abort);
 *   4. gpumem_nvme_qp_reinit: once they are out, the rings and counters
 *      start afresh, the pair opens again, IDs
 *      given up (timed out, abandoned, aborted) are free again, requests
 *      still submitted end with an "aborted" completion (status
 *      GPUMEM_NVME_SC_ABORTED_SQ_DELETION; poll returns GPUMEM_EABORTED),
 *      and results that arrived before the reset are kept for their owners;
 *   5. the controller recreates the CQ, then the SQ, and serves it again.
 */
GPUMEM_API gpumem_status gpumem_nvme_qp_abort(gpumem_nvme_qp *qp) {
    if (!qp) return GPUMEM_ENULL;
    (void)gpumem__gate_close(qp);
    return gpumem__signals_set_state(qp->signals, GPUMEM__QP_ABORTED);
}

/* Step 4 above, leaving the pair closed and aborted when `open` is 0 (a
 * controller that must recreate its queues first opens it with
 * gpumem__gate_open and marks it running). */
GPUMEM_API gpumem_status gpumem__qp_reinit(gpumem_nvme_qp *qp, int open) {
    uint32_t i, last, start, aborted = 0;
    if (!qp) return GPUMEM_ENULL;
    if (gpumem__qp_stopped(qp) != GPUMEM__QP_ABORTED) return GPUMEM_ESTATE;
    /* Closed already (the abort closed it; again for an abort made through
     * the signals block alone). Acquire: a count of 0 read here comes after
     * every leaving thread's release, so all they did inside comes before
     * what follows; a thread that enters later finds the pair closed and
     * touches nothing. */
    if (GPUMEM__GATE_CALLS(gpumem__gate_close(qp)) != 0) return GPUMEM_EBUSY;
    /* Plain reads and writes of the rings and counters from here: nobody
     * else is inside. The ID words alone are still read and changed by
     * polls that need not enter (gpumem__cid_collect_done: words with a
     * result, which this leaves alone; gpumem__poll_closed: an owner giving
     * its ID up), so they are changed here by compare-and-swap. */
    last = gpumem_wrap_diff_u32(qp->ticket.v, qp->cq_head.v) > 0 ? qp->ticket.v : qp->cq_head.v;
    start = (last + 2u * qp->depth) & ~(2u * qp->depth - 1);
    for (i = 0; i < qp->n_cids; i++) {
        uint64_t w = gpumem_atomic_load_u64(&qp->cids[i], GPUMEM_ORDER_RELAXED, GPUMEM__DEV), wire;
        for (;;) {
            wire = (uint64_t)GPUMEM__CID_WIRE(w) << 32;
            if (!(w & GPUMEM__CID_IN_USE) || (w & GPUMEM__CID_DONE)) break; /* free, or a result to collect */
            if (w & GPUMEM__CID_ORPHAN) {
                /* Nobody waits: free. Release, for gpumem_nvme_qp_orphans_settled. */
                if (!gpumem_atomic_cas_u64(&qp->cids[i], &w, wire, GPUMEM_ORDER_RELEASE, GPUMEM__DEV)) continue;
                gpumem__budget_put(qp);
                break;
            }
            /* Its owner will look: it finds its command aborted. Release:
             * the mailbox before the result's mark, which the owner reads
             * with acquire. */
            qp->cid_mail[2 * i] = 0;
            qp->cid_mail[2 * i + 1] = GPUMEM_NVME_SC_ABORTED_SQ_DELETION;
            if (!gpumem_atomic_cas_u64(&qp->cids[i], &w,
                                       GPUMEM__CID_IN_USE | GPUMEM__CID_DONE | wire | (uint32_t)(start - 1),
                                       GPUMEM_ORDER_RELEASE, GPUMEM__DEV))
                continue; /* its owner gave it up meanwhile: free it */
            aborted++;
            break;
        }
    }
    gpumem_atomic_fetch_add_u32(&qp->counts[GPUMEM__QPC_ABORTED], aborted, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    gpumem__qp_restart(qp, start);
    gpumem_atomic_store_u32(&qp->quiet.v, 0, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    if (!open) return GPUMEM_OK;
    /* Running before open (release: all of the above first): a caller that
     * enters once the gate opens must not find the pair still aborted and
     * give up a command the new queues carry out (tests/spin/reset.pml). */
    gpumem__signals_set_state(qp->signals, GPUMEM__QP_RUNNING);
    gpumem__gate_open(qp);
    return GPUMEM_OK;
}

/* Step 4 above. GPUMEM_ESTATE unless the pair was aborted; GPUMEM_EBUSY,
 * changing nothing, while a thread is still inside a call on the pair
 * (aborted, it leaves soon: call again). The numbering of tickets and CQ
 * positions goes on from the next lap boundary of both queues (position
 * 0, phase 1, where a new queue starts), so free IDs stay reusable as
 * they were. */
GPUMEM_API gpumem_status gpumem_nvme_qp_reinit(gpumem_nvme_qp *qp) { return gpumem__qp_reinit(qp, 1); }

/* What the pair has seen of its controller, beyond the completions it
 * delivered. Counts wrap at 2^32. */
typedef struct gpumem_nvme_qp_stats {
    uint32_t sq_doorbell_writes, cq_doorbell_writes;
    /* completions dropped, by kind (GPUMEM_NVME_FAULT_*) */
    uint32_t stray, stale, duplicate, early, bad_sq_head;
    uint32_t dropped;   /* their sum */
    uint32_t late;      /* completions of given-up commands: their IDs freed */
    uint32_t timed_out; /* commands given up after the command timeout */
    uint32_t aborted;   /* requests ended by a reset */
    uint32_t orphans;   /* IDs held now by given-up commands whose completion has not come */
    uint32_t faults;    /* GPUMEM_NVME_FAULT_* bits raised so far (gpumem_nvme_qp_faults) */
} gpumem_nvme_qp_stats;

/* The pair's fault flag: the GPUMEM_NVME_FAULT_* bits raised so far (0 for
 * a healthy controller). One load; device code may look at it. */
GPUMEM_API uint32_t gpumem_nvme_qp_faults(gpumem_nvme_qp *qp) {
    return qp ? gpumem_atomic_load_u32(&qp->faults.v, GPUMEM_ORDER_RELAXED, GPUMEM__SYS) : 0;
}

/* The counts so far; safe while the pair runs (each one exact, together a
 * recent snapshot). */
GPUMEM_API gpumem_status gpumem_nvme_qp_get_stats(gpumem_nvme_qp *qp, gpumem_nvme_qp_stats *out) {
    uint32_t i, c[GPUMEM__QPC_COUNTS];
    if (!qp || !out) return GPUMEM_ENULL;
    for (i = 0; i < GPUMEM__QPC_COUNTS; i++)
        c[i] = gpumem_atomic_load_u32(&qp->counts[i], GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    out->sq_doorbell_writes = gpumem_atomic_load_u32(&qp->sq_doorbell_writes.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    out->cq_doorbell_writes = gpumem_atomic_load_u32(&qp->cq_doorbell_writes.v, GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
    out->stray = c[GPUMEM__QPC_STRAY];
    out->stale = c[GPUMEM__QPC_STALE];
    out->duplicate = c[GPUMEM__QPC_DUPLICATE];
    out->early = c[GPUMEM__QPC_EARLY];
    out->bad_sq_head = c[GPUMEM__QPC_SQ_HEAD];
    out->dropped = out->stray + out->stale + out->duplicate + out->early + out->bad_sq_head;
    out->late = c[GPUMEM__QPC_LATE];
    out->timed_out = c[GPUMEM__QPC_TIMED_OUT];
    out->aborted = c[GPUMEM__QPC_ABORTED];
    out->orphans = 0;
    for (i = 0; i < qp->n_cids; i++) {
        uint64_t w = gpumem_atomic_load_u64(&qp->cids[i], GPUMEM_ORDER_RELAXED, GPUMEM__DEV);
        out->orphans += (w & (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN)) == (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN);
    }
    out->faults = gpumem_nvme_qp_faults(qp);
    return GPUMEM_OK;
}

/* The rule for buffers of blocking calls that ended early (GPUMEM_ETIMEDOUT
 * or GPUMEM_ENODEV after submission): GPUMEM_OK once nothing can still
 * write into any of them - every such command's late completion has come
 * (its ID freed) or the pair's queues were deleted by a reset - and
 * GPUMEM_EBUSY while one may. Acquire: each ID word is read with acquire,
 * pairing with the release that freed it after the completion, which the
 * controller posted after its data; so the buffers may be reused (freed,
 * handed on) once this has said GPUMEM_OK. The statistics' `orphans`
 * count reads the words relaxed: its 0 orders nothing. Commands given up
 * later are not covered, of course: ask after the call you care about. */
GPUMEM_API gpumem_status gpumem_nvme_qp_orphans_settled(gpumem_nvme_qp *qp) {
    uint32_t i;
    if (!qp) return GPUMEM_ENULL;
    if (gpumem__qp_stopped(qp) == GPUMEM__QP_ABORTED) return GPUMEM_OK; /* the queues are deleted */
    /* Late completions that came free their IDs (a caller alone may spin
     * on this): harvested inside the pair, unless a reset has closed it. */
    if (gpumem__gate_enter_call(qp) >= 0) {
        gpumem__cq_harvest(qp);
        gpumem__gate_leave(qp);
    }
    for (i = 0; i < qp->n_cids; i++) {
        uint64_t w = gpumem_atomic_load_u64(&qp->cids[i], GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
        if ((w & (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN)) == (GPUMEM__CID_IN_USE | GPUMEM__CID_ORPHAN))
            return GPUMEM_EBUSY;
    }
    return GPUMEM_OK;
}

/* GPUMEM_OK if nothing needs the pair any more: no thread waits in it for an
 * ID, and no command ID is held by a request whose owner will still look at
 * it (abandoned ones do not count). GPUMEM_EBUSY otherwise. Destroying a
 * pair's memory is safe only when this says OK and no thread is about to
 * call into the pair. */
GPUMEM_API gpumem_status gpumem_nvme_qp_check_idle(gpumem_nvme_qp *qp) {
    uint32_t i;
    if (!qp) return GPUMEM_ENULL;
    /* Acquire: pairs with the waiters' release decrement on leaving. */
    if (gpumem_atomic_load_u32(&qp->waiters.v, GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV) != 0) return GPUMEM_EBUSY;
    for (i = 0; i < qp->n_cids; i++) {
        uint64_t w = gpumem_atomic_load_u64(&qp->cids[i], GPUMEM_ORDER_ACQUIRE, GPUMEM__DEV);
        if ((w & GPUMEM__CID_IN_USE) && !(w & GPUMEM__CID_ORPHAN)) return GPUMEM_EBUSY;
    }
    return GPUMEM_OK;
}

/* Pick one of n pairs for a caller identified by `key`: on the device pass
 * gpumem_sm_id() (threads of one SM share a pair, as in BaM), on the host a
 * thread index. */
GPUMEM_API gpumem_nvme_qp *gpumem_nvme_qp_pick(gpumem_nvme_qp *pairs, uint32_t n, uint32_t key) {
    if (!pairs || n == 0) return (gpumem_nvme_qp *)0;
    return &pairs[key % n];
}

/* ======================================================================== */
/* Diagnostics (host): the state of a pair, both sides, in words            */
/* ======================================================================== */
/*
 * For a watchdog that has seen progress stop (gpumem_watchdog below, and the
 * CUDA tests' copy of it for pairs in GPU memory): what every counter of the
 * pair says, what the controller's side says, and which command IDs are
 * outstanding. Reads the memory through the pointers in the structs, so run
 * it where they are readable (for GPU memory, on a host copy: see
 * gpumem_nvme_qp_report_cuda). Each call appends to buf (n bytes, always
 * NUL-terminated) and returns the length the whole text would have.
 */
#if !GPUMEM_ON_DEVICE
#include <string.h>

/* Client side: tickets, tail, heads, locks, doorbells, turns, command IDs. */
static inline size_t gpumem_nvme_qp_report(const gpumem_nvme_qp *qp, char *buf, size_t n, size_t at) {
    if (!qp) return gpumem__appendf(buf, n, at, "queue pair: none (NULL)\n");
    const uint32_t mask = qp->depth - 1;
    uint32_t ticket = qp->ticket.v, tail = qp->tail.v, sq_head = qp->sq_head.v, cq_head = qp->cq_head.v, i;
    uint32_t outstanding = 0, uncollected = 0, shown = 0;
    const gpumem_nvme_cpl *e = &qp->cq[cq_head & mask];
    at = gpumem__appendf(buf, n, at,
                         "pair %u (depth %u, %u command IDs)\n"
                         "  client: ticket %u, tail %u (%u submitted, not yet handed over), SQ head %u "
                         "(%u handed over, not known consumed), CQ head %u, released %u\n"
                         "          tail lock %u, head lock %u, command-ID ticket %u, doorbell writes SQ %u "
                         "CQ %u, doorbells now SQ %u CQ %u\n",
                         qp->qid, qp->depth, qp->n_cids, ticket, tail, ticket - tail, sq_head, tail - sq_head,
                         cq_head, qp->cq_released.v, qp->tail_lock.v, qp->head_lock.v, qp->cid_ticket.v,
                         qp->sq_doorbell_writes.v, qp->cq_doorbell_writes.v, *qp->sq_doorbell, *qp->cq_doorbell);
    at = gpumem__appendf(buf, n, at,
                         "          SQ position %u: turn %u, tail mark %u; CQ position %u: phase %u (expects %u), "
                         "command ID %u, status 0x%04x, SQ head %u\n",
                         sq_head & mask, qp->slots[sq_head & mask].turn, qp->slots[sq_head & mask].tail_mark,
                         cq_head & mask, (e->dw3 >> 16) & 1u, ((cq_head >> qp->depth_log2) & 1u) ^ 1u,
                         e->dw3 & 0xFFFFu, e->dw3 >> 17, e->dw2 & 0xFFFFu);
    at = gpumem__appendf(buf, n, at, "  outstanding command IDs (no completion yet):");
    for (i = 0; i < qp->n_cids; i++) {
        uint64_t w = qp->cids[i];
        if ((w & GPUMEM__CID_IN_USE) && !(w & GPUMEM__CID_DONE)) {
            if (shown++ < 16) at = gpumem__appendf(buf, n, at, " %u", i);
            outstanding++;
        } else if ((w & GPUMEM__CID_IN_USE) && (w & GPUMEM__CID_DONE)) {
            uncollected++;
        }
    }
    at = gpumem__appendf(buf, n, at, "%s (%u in all); completed, not yet collected by their owner: %u\n",
                         outstanding > 16 ? " ..." : outstanding ? "" : " none", outstanding, uncollected);
    /* Plain reads, as above: the report is made where the pair is at rest. */
    return gpumem__appendf(buf, n, at,
                           "  controller faults 0x%x: completions dropped: stray %u, stale %u, duplicate %u, early "
                           "%u, SQ head %u; late %u, timed out %u, aborted by a reset %u\n",
                           qp->faults.v, qp->counts[GPUMEM__QPC_STRAY], qp->counts[GPUMEM__QPC_STALE],
                           qp->counts[GPUMEM__QPC_DUPLICATE], qp->counts[GPUMEM__QPC_EARLY],
                           qp->counts[GPUMEM__QPC_SQ_HEAD], qp->counts[GPUMEM__QPC_LATE],
                           qp->counts[GPUMEM__QPC_TIMED_OUT], qp->counts[GPUMEM__QPC_ABORTED]);
}
#endif /* !GPUMEM_ON_DEVICE */

#if defined(__CUDACC__) && !GPUMEM_ON_DEVICE /* host code (stdio) */
#include <stdlib.h>
/* gpumem_nvme_qp_report for a pair in GPU (or any) memory: copies the pair,
 * its rings, slots and command-ID words to the host first. */
static inline size_t gpumem_nvme_qp_report_cuda(const gpumem_nvme_qp *dev_qp, char *buf, size_t n, size_t at) {
    gpumem_nvme_qp h;
    void *slots = NULL, *cids = NULL, *cq = NULL;
    uint32_t db[2] = {0, 0};
    if (gpumem__cuda_peek(&h, dev_qp, sizeof h) != GPUMEM_OK || h.depth == 0 || h.n_cids == 0)
        return gpumem__appendf(buf, n, at, "pair at %p: cannot be read\n", (const void *)dev_qp);
    slots = malloc((size_t)h.depth * sizeof(gpumem__nvme_slot));
    cids = malloc((size_t)h.n_cids * sizeof(uint64_t));
    cq = malloc((size_t)h.depth * sizeof(gpumem_nvme_cpl));
    if (slots && cids && cq && gpumem__cuda_peek(slots, h.slots, (size_t)h.depth * sizeof(gpumem__nvme_slot)) == 0 &&
        gpumem__cuda_peek(cids, h.cids, (size_t)h.n_cids * sizeof(uint64_t)) == 0 &&
        gpumem__cuda_peek(cq, h.cq, (size_t)h.depth * sizeof(gpumem_nvme_cpl)) == 0 &&
        gpumem__cuda_peek(&db[0], h.sq_doorbell, 4) == 0 && gpumem__cuda_peek(&db[1], h.cq_doorbell, 4) == 0) {
        h.slots = (gpumem__nvme_slot *)slots;
        h.cids = (uint64_t *)cids;
        h.cq = (gpumem_nvme_cpl *)cq;
        h.sq_doorbell = &db[0];
        h.cq_doorbell = &db[1];
        at = gpumem_nvme_qp_report(&h, buf, n, at);
    } else {
        at = gpumem__appendf(buf, n, at, "pair %u: its state cannot be read\n", h.qid);
    }
    free(slots);
    free(cids);
    free(cq);
    return at;
}
#endif

#endif /* GPUMEM_NVME_H */
