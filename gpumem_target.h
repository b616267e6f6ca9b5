/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_target.h - the controller's (the target's) side of gpumem's queue
 * protocol, for controllers built on it: the software controllers
 * (gpumem_swctl.h) and the io_uring forwarder (gpumem_uring.h). A client
 * needs gpumem_nvme.h alone; a program that writes a controller of its own
 * includes this.
 *
 * USAGE (a host thread that serves pairs from a namespace in RAM)
 *
 *   #define _POSIX_C_SOURCE 200809L        // gpumem_clock_ns's monotonic clock
 *   #define GPUMEM_IMPLEMENTATION           // in exactly one .c file: the pair set
 *   #include "gpumem_target.h"              // includes gpumem_nvme.h
 *
 *   // given: gpumem_nvme_ns ns, unsigned char *ram, uint32_t *running
 *   gpumem_target_pairs *ps;
 *   gpumem_target_pairs_create(&ns, NULL, &ps);          // NULL: GPUMEM_MALLOC
 *   gpumem_nvme_qp *qp;
 *   gpumem_target_pairs_add(ps, 256, 1024, 0, 0, &qp);   // hand qp to the clients
 *   gpumem_target_stats st = {0};
 *   gpumem_target_idle idle = gpumem_target_idle_start(GPUMEM_TARGET_DEFAULT_SPIN_NS,
 *                                                      GPUMEM_TARGET_DEFAULT_PARK_NS);
 *   while (gpumem_atomic_load_u32(running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)) {
 *       uint32_t i, work = 0;
 *       uint64_t wait;
 *       for (i = 0; i < gpumem_target_pairs_count(ps); i++) {
 *           gpumem_target_queue *q = gpumem_target_pairs_queue(ps, i);
 *           uint32_t posted = q->cq_posted, done = gpumem_target_serve_ram(q, &st, &ns, ram, 0);
 *           if (q->cq_posted != posted) gpumem_nvme_qp_signals_interrupt(q->signals);
 *           work += done;
 *       }
 *       wait = gpumem_target_idle_step(&idle, ps, work, gpumem_clock_ns());
 *       if (wait) gpumem_target_pairs_park(ps, 0, 1, wait, running);  // until a doorbell
 *   }
 *   gpumem_target_pairs_set_stopped(ps, 1);  // the pairs' waiters return GPUMEM_ENODEV
 *   if (gpumem_target_pairs_check_idle(ps) == GPUMEM_OK) gpumem_target_pairs_destroy(ps);
 *
 * SECTIONS
 *   - The controller core (host and device): one queue pair as a controller
 *     sees it (gpumem_target_queue): take the doorbells and judge them,
 *     fetch in order, check, walk PRPs, execute against memory, post
 *     completions with the phase tag; the protocol violations it counts
 *     (gpumem_target_stats). Plain functions on plain structs, so that the
 *     GPU-resident controller runs on the device the code the host test
 *     suite tests.
 *   - The host pair set (gpumem_target_pairs): a host controller's pairs and
 *     their memory, placed by who touches it (ring memory, client memory,
 *     PRP-list pages, the controller's own side), with what a controller
 *     may know of a pair without reading its client memory: its queue, its
 *     PRP-list range, its command timeout, whether it is polled.
 *   - The idle step: how a host thread that serves pairs waits for work:
 *     poll the doorbells for a while after its last work (GPU clients cannot
 *     wake it), then park on the pairs' doorbell event, looking at the
 *     doorbells once more after registering.
 *
 * ORDERING
 *   The rings and doorbells are the only memory a controller shares with a
 *   pair's users, always at system scope: it takes a doorbell with an
 *   acquire load (the ringer's release store, or fence + MMIO store on the
 *   GPU, made the entries before it visible) and writes a completion's phase
 *   word with a release store (its other words and the data it moved go
 *   first). Every other field of a gpumem_target_queue is the serving
 *   thread's own: one thread serves a queue at a time.
 */
#ifndef GPUMEM_TARGET_H
#define GPUMEM_TARGET_H

#include "gpumem_nvme.h"

/* ======================================================================== */
/* The controller core (host and device)                                    */
/* ======================================================================== */
/*
 * The controller's side of the protocol on one queue pair, as plain functions
 * on a plain struct: take the doorbells (and judge them), fetch commands in
 * order, check them (opcode, namespace, LBA range, PRPs, command-ID reuse),
 * execute them against a namespace in memory, and post completions with the
 * phase tag. The host-thread controller (gpumem_swctl), the GPU-resident
 * controller (gpumem_swctl_gpu) and the io_uring forwarder (gpumem_uringctl)
 * all run these, so the host test suite tests the code that the GPU runs,
 * and every controller judges its clients by the same rules.
 *
 * One thread serves a queue at a time. The gpumem_target_queue fields and the
 * stats passed in are that thread's own (plain loads and stores); only the
 * rings and doorbells are shared with the queue's users, at system scope.
 */

typedef struct gpumem_target_stats {
    uint64_t commands, reads, writes, flushes;
    uint64_t blocks_read, blocks_written;
    uint64_t errors_injected; /* completions given an injected error status (gpumem_swctl) */
    uint64_t errors_other;    /* completions with another error status */
    uint64_t reordered;       /* completions posted ahead of an older due command (gpumem_swctl) */
    /* protocol violations by the host */
    uint64_t bad_doorbell;        /* doorbell value >= depth */
    uint64_t doorbell_backwards;  /* SQ tail moved back, or past the fetched head */
    uint64_t cq_head_past_posted; /* CQ head moved over entries never posted */
    uint64_t cid_in_flight;       /* command ID reused before its completion was passed */
    uint64_t bad_prp;             /* PRP null, misaligned, or list entry not page aligned */
    uint64_t lba_out_of_range;
    uint64_t bad_opcode;
    uint64_t bad_nsid;
    uint64_t violations; /* the sum of the eight counts above (set by gpumem_target_stats_add) */
    uint64_t dropped;    /* commands fetched and never completed: the drop_command test hook */
} gpumem_target_stats;

/* out += in, field by field, and out->violations = the sum of out's eight
 * violation counts. */
GPUMEM_API gpumem_status gpumem_target_stats_add(gpumem_target_stats *out, const gpumem_target_stats *in) {
    uint64_t *o = (uint64_t *)out;
    const uint64_t *i = (const uint64_t *)in;
    size_t k;
    if (!out || !in) return GPUMEM_ENULL;
    for (k = 0; k < sizeof *out / sizeof(uint64_t); k++) o[k] += i[k];
    out->violations = out->bad_doorbell + out->doorbell_backwards + out->cq_head_past_posted +
                      out->cid_in_flight + out->bad_prp + out->lba_out_of_range + out->bad_opcode + out->bad_nsid;
    return GPUMEM_OK;
}

/* The controller's view of one queue pair. */
typedef struct gpumem_target_queue {
    gpumem_nvme_cmd *sq;   /* the rings, doorbells and signals: the pair's ring memory, */
    gpumem_nvme_cpl *cq;   /* all a controller touches of a pair (never its client state) */
    uint32_t *sq_doorbell;
    uint32_t *cq_doorbell;
    gpumem_nvme_qp_signals *signals;
    uint16_t *cq_cid;      /* depth entries: the command ID posted at each CQ position */
    uint8_t *cid_state;    /* 65536 entries: 0 free, 1 fetched, 2 posted */
    uint32_t depth, mask, qid;
    uint32_t sq_head;      /* next SQ entry to fetch */
    uint32_t sq_tail;      /* last accepted SQ doorbell */
    uint32_t cq_tail;      /* next CQ entry to post */
    uint32_t cq_phase;     /* phase to post with */
    uint32_t cq_head;      /* last accepted CQ doorbell */
    uint32_t cq_posted;    /* posted, not yet passed by the host's head */
    uint32_t sq_db_seen, cq_db_seen; /* raw doorbell values last judged (a bad one counts once) */
} gpumem_target_queue;

/* A fetched command whose ID was still in flight carries this mark in cdw0
 * (bit 8, the first FUSE bit, which gpumem never sends) until it completes
 * with "command ID conflict". */
#define GPUMEM_TARGET_CID_CONFLICT 0x100u

/* Bytes of controller-private memory for one queue (cq_cid and cid_state). */
GPUMEM_API size_t gpumem_target_queue_mem_bytes(uint32_t depth) { return (size_t)depth * sizeof(uint16_t) + 65536u; }

/* The controller's side of a queue as a newly created queue starts: empty,
 * nothing fetched, posting from CQ position 0 with phase 1, no command ID
 * known, both doorbells taken as 0 (the pair zeroes them: init, reinit). */
GPUMEM_API void gpumem_target_queue_restart(gpumem_target_queue *q) {
    size_t k;
    if (!q) return;
    for (k = 0; k < q->depth; k++) q->cq_cid[k] = 0;
    for (k = 0; k < 65536u; k++) q->cid_state[k] = 0;
    q->sq_head = q->sq_tail = q->cq_tail = q->cq_head = q->cq_posted = 0;
    q->sq_db_seen = q->cq_db_seen = 0;
    q->cq_phase = 1;
}

/* Bind a controller-side queue to the ring memory of the pair that `d`
 * describes (right after gpumem_nvme_qp_init, before either side runs):
 * the description, not the pair, so that the controller never reads the
 * pair's client state. `mem` holds gpumem_target_queue_mem_bytes(depth) bytes,
 * 2-byte aligned: the controller's own memory. */
GPUMEM_API gpumem_status gpumem_target_queue_init(gpumem_target_queue *q, const gpumem_nvme_qp_desc *d, void *mem,
                                                  size_t bytes) {
    if (!q || !d || !mem || !d->sq || !d->cq || !d->sq_doorbell || !d->cq_doorbell || !d->signals)
        return GPUMEM_ENULL;
    if (!gpumem__valid_count(d->depth, GPUMEM_NVME_MAX_DEPTH)) return GPUMEM_EINVAL;
    if (bytes < gpumem_target_queue_mem_bytes(d->depth) || ((uintptr_t)mem & 1u)) return GPUMEM_ENOMEM;
    q->sq = d->sq;
    q->cq = d->cq;
    q->sq_doorbell = d->sq_doorbell;
    q->cq_doorbell = d->cq_doorbell;
    q->signals = d->signals;
    q->cq_cid = (uint16_t *)mem;
    q->cid_state = (uint8_t *)mem + (size_t)d->depth * sizeof(uint16_t);
    q->depth = d->depth;
    q->mask = d->depth - 1;
    q->qid = d->qid;
    gpumem_target_queue_restart(q);
    return GPUMEM_OK;
}

/* Take the CQ head doorbell: frees CQ space and the command IDs passed.
 * Returns 1 if the head moved. */
GPUMEM_API uint32_t gpumem_target_take_cq_doorbell(gpumem_target_queue *q, gpumem_target_stats *st) {
    /* Acquire: pairs with the head mover's doorbell write (a release store on
     * the host, fence + MMIO store on the GPU); whatever it read of the CQ
     * entries it passed happened before we overwrite them. */
    uint32_t db, adv;
    if (!q || !st) return 0;
    db = gpumem_atomic_load_u32(q->cq_doorbell, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
    if (db == q->cq_db_seen) return 0;
    q->cq_db_seen = db;
    adv = (db - q->cq_head) & q->mask;
    if (db >= q->depth) {
        st->bad_doorbell++;
        return 0;
    }
    if (adv > q->cq_posted) {
        st->cq_head_past_posted++;
        return 0;
    }
    while (q->cq_head != db) {
        q->cid_state[q->cq_cid[q->cq_head]] = 0;
        q->cq_head = (q->cq_head + 1) & q->mask;
    }
    q->cq_posted -= adv;
    return 1;
}

/* Take the SQ tail doorbell. Returns 1 if the tail moved. */
GPUMEM_API uint32_t gpumem_target_take_sq_doorbell(gpumem_target_queue *q, gpumem_target_stats *st) {
    /* Acquire: pairs with the tail mover's doorbell write, which it made after
     * the submitters' commands were written: the entries up to the new tail
     * are visible to our plain loads in gpumem_target_fetch. */
    uint32_t db;
    if (!q || !st) return 0;
    db = gpumem_atomic_load_u32(q->sq_doorbell, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM);
    if (db == q->sq_db_seen) return 0;
    q->sq_db_seen = db;
    if (db >= q->depth) {
        st->bad_doorbell++;
    } else if (((db - q->sq_head) & q->mask) < ((q->sq_tail - q->sq_head) & q->mask)) {
        st->doorbell_backwards++;
    } else {
        q->sq_tail = db;
        return 1;
    }
    return 0;
}

/* Accept the command at the SQ head, already copied into *cmd (from
 * q->sq[q->sq_head]): move the head past it and take its command ID. A
 * command whose ID is still in flight is marked GPUMEM_TARGET_CID_CONFLICT
 * and counted. gpumem_target_fetch is the copy and this; the GPU
 * controller's lanes copy their commands at once and accept them in turn. */
GPUMEM_API void gpumem__target_accept(gpumem_target_queue *q, gpumem_target_stats *st, gpumem_nvme_cmd *cmd) {
    const uint16_t cid = (uint16_t)(cmd->cdw0 >> 16);
    q->sq_head = (q->sq_head + 1) & q->mask;
    /* A host may reuse an ID once it has rung the CQ doorbell past the old
     * completion, and it rang that doorbell before the SQ doorbell that
     * brought this command: look at the CQ doorbell again before calling it
     * a violation. */
    if (q->cid_state[cid] == 2) gpumem_target_take_cq_doorbell(q, st);
    if (q->cid_state[cid] != 0) {
        st->cid_in_flight++;
        cmd->cdw0 |= GPUMEM_TARGET_CID_CONFLICT;
    } else {
        q->cid_state[cid] = 1;
    }
}

/* Fetch the next command (in order) into *cmd. Returns 0 when the SQ is
 * empty. A command whose ID is still in flight is marked
 * GPUMEM_TARGET_CID_CONFLICT and counted. */
GPUMEM_API int gpumem_target_fetch(gpumem_target_queue *q, gpumem_target_stats *st, gpumem_nvme_cmd *cmd) {
    if (!q || !st || !cmd || q->sq_head == q->sq_tail) return 0;
    *cmd = q->sq[q->sq_head];
    gpumem__target_accept(q, st, cmd);
    return 1;
}

/* Check a fetched command against the namespace and count it. Returns 0 and
 * the byte range it transfers (*len 0 for Flush), or the status to complete
 * it with. */
GPUMEM_API uint16_t gpumem_target_check(gpumem_target_stats *st, const gpumem_nvme_ns *ns,
                                        const gpumem_nvme_cmd *cmd, uint64_t *off, uint64_t *len) {
    uint32_t op;
    uint64_t slba, nlb;
    if (!st || !ns || !cmd || !off || !len) return GPUMEM_NVME_STATUS(0, 0x06); /* internal error */
    op = cmd->cdw0 & 0xFFu;
    *off = *len = 0;
    if (op == GPUMEM_NVME_OP_FLUSH) {
        if (cmd->nsid != ns->nsid && cmd->nsid != 0xFFFFFFFFu) {
            st->bad_nsid++;
            return GPUMEM_NVME_STATUS(0, 0x0B);
        }
        st->flushes++;
        return 0;
    }
    if (op != GPUMEM_NVME_OP_READ && op != GPUMEM_NVME_OP_WRITE) {
        st->bad_opcode++;
        return GPUMEM_NVME_STATUS(0, 0x01);
    }
    if (cmd->nsid != ns->nsid) {
        st->bad_nsid++;
        return GPUMEM_NVME_STATUS(0, 0x0B);
    }
    slba = (uint64_t)cmd->cdw10 | ((uint64_t)cmd->cdw11 << 32);
    nlb = (uint64_t)(cmd->cdw12 & 0xFFFFu) + 1;
    if (slba >= ns->n_blocks || nlb > ns->n_blocks - slba) {
        st->lba_out_of_range++;
        return GPUMEM_NVME_STATUS(0, 0x80);
    }
    if (nlb > ns->max_blocks) return GPUMEM_NVME_STATUS(0, 0x02);
    if (op == GPUMEM_NVME_OP_READ) {
        st->reads++;
        st->blocks_read += nlb;
    } else {
        st->writes++;
        st->blocks_written += nlb;
    }
    *off = slba << ns->lba_shift;
    *len = nlb << ns->lba_shift;
    return 0;
}

/* Walk the PRPs of a transfer, one memory page (segment) at a time. */
typedef struct gpumem_target_prp_walk {
    uint64_t prp1, prp2, len, done, k, n_pages;
    const uint64_t *list; /* next PRP list entry */
    uint64_t list_left;   /* entries left on the current list page */
} gpumem_target_prp_walk;

/* Start a walk of `len` (> 0) bytes given by prp1 and prp2. Returns 0, or
 * -1 for a bad PRP. */
GPUMEM_API int gpumem__target_prp_walk_begin(gpumem_target_prp_walk *w, uint64_t prp1, uint64_t prp2, uint64_t len) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES;
    uint64_t first;
    w->prp1 = prp1;
    w->prp2 = prp2;
    w->len = len;
    w->done = w->k = 0;
    w->list = (const uint64_t *)0;
    w->list_left = 0;
    if (prp1 == 0 || (prp1 & 3u)) return -1;
    first = pg - (prp1 & (pg - 1));
    w->n_pages = 1 + (len > first ? (len - first + pg - 1) / pg : 0);
    if (w->n_pages == 2 && (prp2 == 0 || (prp2 & (pg - 1)))) return -1;
    if (w->n_pages > 2) {
        if (prp2 == 0 || (prp2 & 7u)) return -1;
        w->list = (const uint64_t *)(uintptr_t)prp2;
        w->list_left = (pg - (prp2 & (pg - 1))) / 8;
    }
    return 0;
}

/* Start a walk of `len` (> 0) bytes of a command. Returns 0, or -1 for a bad PRP. */
GPUMEM_API int gpumem_target_prp_walk_start(gpumem_target_prp_walk *w, const gpumem_nvme_cmd *cmd, uint64_t len) {
    if (!w || !cmd) return -1;
    return gpumem__target_prp_walk_begin(w, cmd->prp1, cmd->prp2, len);
}

/* The next segment: 1 with its address and length, 0 at the end, -1 for a
 * bad PRP (null, misaligned, or a list entry not page aligned). */
GPUMEM_API int gpumem_target_prp_walk_next(gpumem_target_prp_walk *w, uint64_t *addr, uint64_t *seg) {
    const uint64_t pg = GPUMEM_NVME_PAGE_BYTES;
    uint64_t a;
    if (!w || !addr || !seg) return -1;
    a = w->prp1;
    if (w->k >= w->n_pages) return 0;
    if (w->k == 1 && w->n_pages == 2) {
        a = w->prp2;
    } else if (w->k > 0) {
        if (w->list_left == 1 && w->n_pages - w->k > 1) { /* last entry of a list page chains to the next */
            uint64_t next = *w->list;
            if (next == 0 || (next & 7u)) return -1;
            w->list = (const uint64_t *)(uintptr_t)next;
            w->list_left = pg / 8 - ((next & (pg - 1)) / 8);
        }
        a = *w->list++;
        w->list_left--;
    }
    if (w->k > 0 && (a == 0 || (a & (pg - 1)))) return -1;
    *addr = a;
    *seg = pg - (a & (pg - 1));
    if (*seg > w->len - w->done) *seg = w->len - w->done;
    w->done += *seg;
    w->k++;
    return 1;
}

/* Move the `len` bytes of a checked Read (to_host: namespace to buffers) or
 * Write between the namespace at ram + off and the memory its PRPs name,
 * lane `lane` of `width` (every lane with the same arguments; on its own a
 * thread passes 0 and 1). Returns 0, or -1 for a bad PRP (every lane sees
 * the same: the walk is the same). */
GPUMEM_API int gpumem_target_move_ram(unsigned char *ram, uint64_t off, uint64_t len, int to_host, uint64_t prp1,
                                      uint64_t prp2, uint32_t lane, uint32_t width) {
    uint64_t addr, seg;
    gpumem_target_prp_walk w;
    int r;
    if (gpumem__target_prp_walk_begin(&w, prp1, prp2, len) != 0) return -1;
    while ((r = gpumem_target_prp_walk_next(&w, &addr, &seg)) == 1) {
        unsigned char *at = ram + off + (w.done - seg);
        if (to_host) gpumem_copy_lanes((void *)(uintptr_t)addr, at, seg, lane, width);
        else gpumem_copy_lanes(at, (const void *)(uintptr_t)addr, seg, lane, width);
    }
    return r == 0 ? 0 : -1;
}

/* Execute a checked command against a namespace held in memory (`ram`,
 * addressable by the serving thread; PRPs are addresses in that thread's
 * address space). Returns the status to post. */
GPUMEM_API uint16_t gpumem_target_execute_ram(gpumem_target_stats *st, const gpumem_nvme_ns *ns,
                                              unsigned char *ram, const gpumem_nvme_cmd *cmd) {
    uint64_t off, len;
    uint16_t status = gpumem_target_check(st, ns, cmd, &off, &len);
    if (status || len == 0) return status;
    if (!ram) return GPUMEM_NVME_STATUS(0, 0x06); /* internal error */
    if (gpumem_target_move_ram(ram, off, len, (cmd->cdw0 & 0xFFu) == GPUMEM_NVME_OP_READ, cmd->prp1, cmd->prp2, 0,
                                1) == 0)
        return 0;
    st->bad_prp++;
    return GPUMEM_NVME_STATUS(0, 0x13);
}

/* Claim the next CQ entry for the completion of `cmd` with `status` (a
 * conflict-marked command gets "command ID conflict" instead and leaves its
 * ID as it was): the command ID's state, the count, the CQ tail and phase.
 * Returns the entry, and in *dw2 and *dw3 what gpumem__target_post_write puts
 * there. The caller has checked that the CQ has room (cq_posted <
 * depth - 1). Claims are made in order, one at a time; the writes of
 * claimed entries may then go together (the GPU controller's lanes). */
GPUMEM_API gpumem_nvme_cpl *gpumem__target_post_claim(gpumem_target_queue *q, gpumem_target_stats *st,
                                                      const gpumem_nvme_cmd *cmd, uint16_t status, uint32_t *dw2,
                                                      uint32_t *dw3) {
    const uint16_t cid = (uint16_t)(cmd->cdw0 >> 16);
    gpumem_nvme_cpl *cpl = &q->cq[q->cq_tail];
    if (cmd->cdw0 & GPUMEM_TARGET_CID_CONFLICT) status = GPUMEM_NVME_STATUS(0, 0x03);
    else q->cid_state[cid] = 2;
    st->commands++;
    *dw2 = (q->sq_head & 0xFFFFu) | ((uint32_t)q->qid << 16);
    *dw3 = (uint32_t)cid | (q->cq_phase << 16) | ((uint32_t)status << 17);
    q->cq_cid[q->cq_tail] = cid;
    q->cq_tail = (q->cq_tail + 1) & q->mask;
    if (q->cq_tail == 0) q->cq_phase ^= 1u;
    q->cq_posted++;
    return cpl;
}

/* Write a claimed CQ entry; its phase (in dw3) goes last. */
GPUMEM_API void gpumem__target_post_write(gpumem_nvme_cpl *cpl, uint32_t dw2, uint32_t dw3) {
    cpl->dw0 = 0;
    cpl->dw1 = 0;
    cpl->dw2 = dw2;
    /* Release, system scope: dw0..dw2, and the data this command moved into
     * the host's buffer, before the phase flips; pairs with the harvester's
     * acquire load of dw3 (gpumem__cq_harvest). */
    gpumem_atomic_store_u32(&cpl->dw3, dw3, GPUMEM_ORDER_RELEASE, GPUMEM_SCOPE_SYSTEM);
}

/* Post the completion of `cmd` with `status` (a conflict-marked command
 * gets "command ID conflict" instead and leaves its ID as it was). The
 * caller has checked that the CQ has room (cq_posted < depth - 1). */
GPUMEM_API void gpumem_target_post(gpumem_target_queue *q, gpumem_target_stats *st, const gpumem_nvme_cmd *cmd,
                                   uint16_t status) {
    uint32_t dw2, dw3;
    gpumem_nvme_cpl *cpl;
    if (!q || !st || !cmd) return;
    cpl = gpumem__target_post_claim(q, st, cmd, status, &dw2, &dw3);
    gpumem__target_post_write(cpl, dw2, dw3);
}

/* Serve one queue with instant completion from a namespace in memory: take
 * both doorbells, then fetch, execute and post while the CQ has room, at
 * most `budget` commands (0: no limit). Returns the things done (0: idle). */
GPUMEM_API uint32_t gpumem_target_serve_ram(gpumem_target_queue *q, gpumem_target_stats *st, const gpumem_nvme_ns *ns,
                                            unsigned char *ram, uint32_t budget) {
    uint32_t work, n = 0;
    gpumem_nvme_cmd cmd;
    if (!q || !st || !ns || !ram) return 0;
    work = gpumem_target_take_cq_doorbell(q, st) + gpumem_target_take_sq_doorbell(q, st);
    while ((budget == 0 || n < budget) && q->cq_posted < q->depth - 1 && gpumem_target_fetch(q, st, &cmd)) {
        uint16_t status = 0;
        if (!(cmd.cdw0 & GPUMEM_TARGET_CID_CONFLICT) && (status = gpumem_target_execute_ram(st, ns, ram, &cmd)) != 0)
            st->errors_other++;
        gpumem_target_post(q, st, &cmd, status);
        n++;
    }
    return work + n;
}

/* Diagnostics: the controller side of one queue (gpumem_nvme_qp_report in
 * gpumem_nvme.h gives the client side). */
#if !GPUMEM_ON_DEVICE
/* Controller side of one queue (the core above). */
static inline size_t gpumem_target_queue_report(const gpumem_target_queue *q, const gpumem_target_stats *st, char *buf,
                                                size_t n, size_t at) {
    if (!q || !st) return gpumem__appendf(buf, n, at, "controller queue: none (NULL)\n");
    uint32_t fetched_not_posted = 0, i;
    gpumem_target_stats sum; /* st's counts with their violations summed */
    memset(&sum, 0, sizeof sum);
    gpumem_target_stats_add(&sum, st);
    for (i = 0; i < 65536u; i++) fetched_not_posted += q->cid_state[i] == 1;
    return gpumem__appendf(buf, n, at,
                           "  controller: SQ fetched up to %u of doorbell %u, CQ posted up to %u (phase %u), CQ "
                           "head doorbell %u, posted and not yet passed %u; command IDs fetched and not "
                           "completed %u\n"
                           "          commands %llu (reads %llu, writes %llu, flushes %llu), dropped %llu, "
                           "protocol violations %llu\n",
                           q->sq_head, q->sq_tail, q->cq_tail, q->cq_phase, q->cq_head, q->cq_posted,
                           fetched_not_posted, (unsigned long long)st->commands, (unsigned long long)st->reads,
                           (unsigned long long)st->writes, (unsigned long long)st->flushes,
                           (unsigned long long)st->dropped, (unsigned long long)sum.violations);
}
#endif

/* ======================================================================== */
/* Host pair set and idle step                                              */
/* ======================================================================== */
/*
 * A host controller's pairs, and their memory as the controller sees it.
 * Each pair has
 *   - ring memory, which the controller and the pair's users share: SQ, CQ,
 *     the two doorbells (each on a line of its own), the signals block, and
 *     the PRP-list pages of its command IDs (gpumem_nvme_qp_submit_buf);
 *   - client memory, which only the pair's users touch: the gpumem_nvme_qp
 *     and its state (tickets, turns, command IDs). The controller never
 *     reads it while it serves: what it must know of a pair (its command
 *     timeout, where its PRP lists lie) the set keeps in its own memory;
 *   - the controller's side of its queues (gpumem_target_queue and its
 *     memory, GPUMEM_MALLOC), which only the serving thread touches.
 * and the set has one doorbell event in ring memory (process-shared) that
 * every pair's users notify after ringing a doorbell, so that users that
 * reach only ring memory (another process, tests/test_xproc.c) wake the
 * controller. GPU threads cannot notify: the idle step below polls for
 * them.
 *
 * Where each kind of memory comes from is the caller's (gpumem_target_mem):
 * mapped pinned host memory for the rings and GPU memory for client state
 * when the clients are GPU threads (gpumem_swctl_config_gpu_clients).
 *
 * Threads: add pairs, destroy, and read a pair's client state
 * (gpumem_target_pairs_check_idle, _report_client) while no thread serves
 * the set; the accessors and the idle step from the serving threads;
 * gpumem_target_pairs_set_polled from any thread at any time.
 */

#if !defined(GPUMEM_NO_HOST_SHIM)

#ifdef __cplusplus
extern "C" {
#endif

/* Where a pair set's memory comes from, by who touches it. Ring memory
 * (rings, doorbells, signals, PRP-list pages, the doorbell event): alloc /
 * free (NULL: GPUMEM_MALLOC / GPUMEM_FREE). Client memory (each pair's
 * struct and state): client_alloc / client_free (NULL: alloc / free as
 * well). Give both of a pair of callbacks or neither. client_copy
 * (optional, for client memory host code cannot touch, cudaMalloc):
 * copies `bytes` between it and host memory, either way, returning 0 on
 * success; a pair is then built in host memory and copied in, and the
 * set's reads of client state read a copy. It must not wait for running
 * kernels (a watchdog's report reads through it). */
typedef struct gpumem_target_mem {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *alloc_ctx;
    void *(*client_alloc)(void *ctx, size_t bytes);
    void (*client_free)(void *ctx, void *p);
    int (*client_copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void *client_ctx;
} gpumem_target_mem;

/* Ring memory from m's allocator (m NULL: GPUMEM_MALLOC), and its free. */
void *gpumem_target_mem_alloc(const gpumem_target_mem *m, size_t bytes);
void gpumem_target_mem_free(const gpumem_target_mem *m, void *p);

typedef struct gpumem_target_pairs gpumem_target_pairs;

/* A pair's command IDs when the controller chooses: max(depth, this). */
#define GPUMEM_TARGET_DEFAULT_CIDS 1024u

/* An empty set whose pairs address namespace *ns (copied), its memory from
 * *mem (copied; NULL: GPUMEM_MALLOC for all of it). GPUMEM_EINVAL for one
 * callback of a pair without the other. */
gpumem_status gpumem_target_pairs_create(const gpumem_nvme_ns *ns, const gpumem_target_mem *mem,
                                         gpumem_target_pairs **out);
/* Add a pair of `depth` entries and n_cids command IDs (powers of two; at
 * most 65535 pairs), its qid the set's count after it, its first ticket
 * virtual_start (gpumem_nvme_qp_desc), commands given up after
 * cmd_timeout_ms (0: the default; GPUMEM_NVME_CMD_TIMEOUT_NEVER: never).
 * *out is the pair its users are handed (client memory: with client_copy,
 * a pointer the host must not dereference). Pair i of the set is the i-th
 * added, from 0. */
gpumem_status gpumem_target_pairs_add(gpumem_target_pairs *ps, uint32_t depth, uint32_t n_cids,
                                      uint32_t virtual_start, uint32_t cmd_timeout_ms, gpumem_nvme_qp **out);
/* Free every pair and the set. Nothing may serve it or use its pairs. */
void gpumem_target_pairs_destroy(gpumem_target_pairs *ps);
/* GPUMEM_OK if no thread waits in any pair and no request holds a command
 * ID (gpumem_nvme_qp_check_idle), GPUMEM_EBUSY if one does, GPUMEM_ESYS if
 * client_copy could not read a pair to tell. */
gpumem_status gpumem_target_pairs_check_idle(const gpumem_target_pairs *ps);

uint32_t gpumem_target_pairs_count(const gpumem_target_pairs *ps);
/* Pair i's queues, as its controller sees them (the core above): for the
 * serving thread. NULL if i is out of range. */
gpumem_target_queue *gpumem_target_pairs_queue(gpumem_target_pairs *ps, uint32_t i);
/* Pair i as its users see it (client memory: compare it, hand it out;
 * dereference it only as gpumem_target_pairs_add says). */
gpumem_nvme_qp *gpumem_target_pairs_qp(const gpumem_target_pairs *ps, uint32_t i);
/* The index of pair qp (the pointer compared), or GPUMEM_TARGET_NO_PAIR. */
#define GPUMEM_TARGET_NO_PAIR 0xFFFFFFFFu
uint32_t gpumem_target_pairs_find(const gpumem_target_pairs *ps, const gpumem_nvme_qp *qp);
/* Pair i's PRP-list pages, [*lo, *hi) in the serving thread's addresses:
 * the only memory a command's PRP list may lie in without a translation
 * (both 0 when the pair has none: its commands span at most two pages). */
gpumem_status gpumem_target_pairs_prp_range(const gpumem_target_pairs *ps, uint32_t i, uint64_t *lo, uint64_t *hi);
/* Pair i's command timeout in ns (GPUMEM_NO_TIMEOUT: never), as its users
 * apply it; 0 if i is out of range. */
uint64_t gpumem_target_pairs_timeout_ns(const gpumem_target_pairs *ps, uint32_t i);
/* The event the pairs' users notify after ringing a doorbell (notify it to
 * end a park at once: a stop). */
gpumem_event *gpumem_target_pairs_event(gpumem_target_pairs *ps);
/* Mark pair qp polled (polled != 0): its clients cannot wake the
 * controller (GPU threads), so while any pair is polled the idle step never
 * parks. GPUMEM_EINVAL if qp is not one of the set's. */
gpumem_status gpumem_target_pairs_set_polled(gpumem_target_pairs *ps, const gpumem_nvme_qp *qp, int polled);
/* Whether any pair is polled (a relaxed read: a hint for the idle step). */
int gpumem_target_pairs_polled(const gpumem_target_pairs *ps);
/* Pair i's queues deleted (a reset between Delete and Create I/O Queue):
 * the doorbell scan and gpumem_target_pairs_set_stopped pass it by; the
 * controller neither fetches from it nor posts to it. */
void gpumem_target_pairs_set_deleted(gpumem_target_pairs *ps, uint32_t i, int deleted);
int gpumem_target_pairs_deleted(const gpumem_target_pairs *ps, uint32_t i);
/* Mark every pair not deleted stopped (its waiters, and new calls, return
 * GPUMEM_ENODEV) or served again (gpumem_nvme_qp_signals_set_stopped). */
void gpumem_target_pairs_set_stopped(gpumem_target_pairs *ps, int stopped);
/* Pair i's client side in words (gpumem_nvme_qp_report, of a copy with
 * client_copy), appended at `at`; returns the whole text's length. */
size_t gpumem_target_pairs_report_client(const gpumem_target_pairs *ps, uint32_t i, char *buf, size_t n, size_t at);

/* ---- idle step ---------------------------------------------------------- */

/* idle spin: never park (poll always: a core, the lowest latency for GPU
 * clients). */
#define GPUMEM_TARGET_NEVER_PARK UINT64_MAX
#define GPUMEM_TARGET_DEFAULT_SPIN_NS 50000ull
#define GPUMEM_TARGET_DEFAULT_PARK_NS 1000000ull
/* idle spin: none, park at the first idle look (0 is the default, 50 us). */
#define GPUMEM_TARGET_NO_SPIN (UINT64_MAX - 1)

/* How one serving thread waits for work: after its last work it polls for
 * spin_ns (busy: a core), then parks, at most park_ns at a time, looking at
 * the doorbells once between parks. A doorbell nobody notifies (GPU
 * threads) is so seen within a poll while it spins and within park_ns once
 * it parks. The thread's own: plain fields. */
typedef struct gpumem_target_idle {
    uint64_t spin_ns;      /* GPUMEM_TARGET_NEVER_PARK: never park; 0: park at once */
    uint64_t park_ns;
    uint64_t last_work_ns; /* gpumem_clock_ns of the last round with work */
} gpumem_target_idle;

/* A spin setting with its default filled in (0: GPUMEM_TARGET_DEFAULT_SPIN_NS). */
uint64_t gpumem_target_spin_resolved(uint64_t spin_ns);
/* The idle state of a thread that starts serving now. */
gpumem_target_idle gpumem_target_idle_start(uint64_t spin_ns, uint64_t park_ns);
/* One idle step, after a round that did `work` things (0: idle) at now_ns.
 * Returns 0 when the thread should serve again at once (it had work, or it
 * is still within its spin, or a pair is polled: then it has paused a few
 * tens of nanoseconds), or how long it may wait now (park_ns): with
 * gpumem_target_pairs_park, or on another source of work of its own (a
 * kernel completion) for no longer. */
uint64_t gpumem_target_idle_step(gpumem_target_idle *idle, const gpumem_target_pairs *ps, uint32_t work,
                                 uint64_t now_ns);
/* Whether a doorbell of pairs first, first + stride, ... (stride 0: 1) not
 * deleted moved since their serving thread last took it. */
int gpumem_target_pairs_rung(const gpumem_target_pairs *ps, uint32_t first, uint32_t stride);
/* Park on the doorbell event at most wait_ns (1 s at most), unless a
 * doorbell of pairs first, first + stride, ... moved (looked at after
 * registering: a client that rang after the caller's last round and saw
 * nobody registered did not notify) or *running (if given) is 0 (a stop
 * that notified before this registered). A stop, or any doorbell, ends it. */
void gpumem_target_pairs_park(gpumem_target_pairs *ps, uint32_t first, uint32_t stride, uint64_t wait_ns,
                              uint32_t *running);

#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION) && !GPUMEM_ON_DEVICE

#include <stdlib.h>
#include <string.h>

/* One pair of the set. */
typedef struct gpumem__target_pair {
    gpumem_nvme_qp *qp;     /* at the start of client_mem: what its users are handed */
    void *client_mem;       /* client memory: the pair's struct and state */
    size_t client_bytes;    /* of them, from qp */
    void *ring_mem;         /* ring memory: rings, doorbells, signals block; used from
                               its first 4 KiB boundary */
    void *prp_mem;          /* the command IDs' PRP-list pages (own allocation: large, and
                               only the pages that transfers use are ever touched) */
    void *queue_mem;        /* the serving thread's own memory for queue (GPUMEM_MALLOC) */
    uint64_t prp_lo, prp_hi; /* the PRP-list pages in use: [lo, hi) */
    uint64_t cmd_timeout_ns; /* the pair's, as gpumem_nvme_qp_init set it */
    gpumem_target_queue queue; /* the controller's side (core above): ring memory only */
    uint32_t polled;        /* gpumem_target_pairs_set_polled; atomic */
    int deleted;            /* the serving threads' (set while none serves) */
} gpumem__target_pair;

struct gpumem_target_pairs {
    gpumem_target_mem mem;
    gpumem_nvme_ns ns;
    gpumem_event *doorbell_event; /* ring memory, process-shared */
    gpumem__target_pair **pairs;
    uint32_t n_pairs;
    uint32_t n_polled; /* pairs set polled; atomic */
};

void *gpumem_target_mem_alloc(const gpumem_target_mem *m, size_t bytes) {
    return m && m->alloc ? m->alloc(m->alloc_ctx, bytes) : GPUMEM_MALLOC(bytes);
}
void gpumem_target_mem_free(const gpumem_target_mem *m, void *p) {
    if (!p) return;
    if (m && m->free) m->free(m->alloc_ctx, p);
    else GPUMEM_FREE(p);
}
static void *gpumem__target_client_alloc(const gpumem_target_mem *m, size_t bytes) {
    return m->client_alloc ? m->client_alloc(m->client_ctx, bytes) : gpumem_target_mem_alloc(m, bytes);
}
static void gpumem__target_client_free(const gpumem_target_mem *m, void *p) {
    if (!p) return;
    if (m->client_free) m->client_free(m->client_ctx, p);
    else gpumem_target_mem_free(m, p);
}

gpumem_status gpumem_target_pairs_create(const gpumem_nvme_ns *ns, const gpumem_target_mem *mem,
                                         gpumem_target_pairs **out) {
    gpumem_target_pairs *ps;
    if (!ns || !out) return GPUMEM_ENULL;
    *out = NULL;
    if (mem && (!mem->alloc != !mem->free || !mem->client_alloc != !mem->client_free)) {
        GPUMEM_LOG("controller: give both allocator callbacks of a pair (alloc and free, client_alloc and "
                   "client_free) or neither");
        return GPUMEM_EINVAL;
    }
    if (!(ps = (gpumem_target_pairs *)GPUMEM_MALLOC(sizeof *ps))) return GPUMEM_ENOMEM;
    memset(ps, 0, sizeof *ps);
    if (mem) ps->mem = *mem;
    ps->ns = *ns;
    if (!(ps->doorbell_event = (gpumem_event *)gpumem_target_mem_alloc(&ps->mem, sizeof *ps->doorbell_event))) {
        GPUMEM_FREE(ps);
        return GPUMEM_ENOMEM;
    }
    memset(ps->doorbell_event, 0, sizeof *ps->doorbell_event);
    ps->doorbell_event->shared = 1;
    *out = ps;
    return GPUMEM_OK;
}

static void gpumem__target_pair_free(const gpumem_target_mem *m, gpumem__target_pair *p) {
    gpumem__target_client_free(m, p->client_mem);
    gpumem_target_mem_free(m, p->ring_mem);
    gpumem_target_mem_free(m, p->prp_mem);
    GPUMEM_FREE(p->queue_mem);
    GPUMEM_FREE(p);
}

gpumem_status gpumem_target_pairs_add(gpumem_target_pairs *ps, uint32_t depth, uint32_t n_cids,
                                      uint32_t virtual_start, uint32_t cmd_timeout_ms, gpumem_nvme_qp **out) {
    const gpumem_target_mem *m;
    gpumem__target_pair *p, **grown;
    gpumem_nvme_qp_desc d;
    size_t ring_bytes, state_bytes, queue_bytes, ring_total, client_total, prp_bytes;
    unsigned char *rings, *client;
    gpumem_status st;
    if (!ps || !out) return GPUMEM_ENULL;
    *out = NULL;
    m = &ps->mem;
    if (!gpumem__valid_count(depth, GPUMEM_NVME_MAX_DEPTH) || !gpumem__valid_count(n_cids, GPUMEM_NVME_MAX_CIDS))
        return GPUMEM_EINVAL;
    if (ps->n_pairs >= 65535) return GPUMEM_EINVAL;
    if (!(p = (gpumem__target_pair *)GPUMEM_MALLOC(sizeof *p))) return GPUMEM_ENOMEM;
    memset(p, 0, sizeof *p);
    ring_bytes = (size_t)depth * (sizeof(gpumem_nvme_cmd) + sizeof(gpumem_nvme_cpl));
    state_bytes = gpumem_nvme_qp_state_bytes(depth, n_cids);
    queue_bytes = gpumem_target_queue_mem_bytes(depth);
    /* Ring memory: SQ, CQ, the two doorbells and the signals block, each
     * hot word on a line of its own, from a 4 KiB boundary. */
    ring_total = ring_bytes + 2 * GPUMEM_PAD_BYTES + sizeof(gpumem_nvme_qp_signals);
    /* Client memory: the pair's struct, then its state, 64-byte aligned. */
    client_total = GPUMEM_ALIGN_UP(sizeof(gpumem_nvme_qp), 64) + state_bytes;
    p->ring_mem = gpumem_target_mem_alloc(m, ring_total + 4096);
    p->client_mem = gpumem__target_client_alloc(m, client_total + 64);
    prp_bytes = gpumem_nvme_qp_prp_bytes(n_cids, &ps->ns);
    p->prp_mem = prp_bytes ? gpumem_target_mem_alloc(m, prp_bytes + 4096) : NULL;
    p->queue_mem = GPUMEM_MALLOC(queue_bytes);
    grown = (gpumem__target_pair **)GPUMEM_MALLOC((ps->n_pairs + 1) * sizeof *grown);
    if (!p->ring_mem || !p->client_mem || !p->queue_mem || !grown || (prp_bytes && !p->prp_mem)) {
        GPUMEM_FREE(grown);
        gpumem__target_pair_free(m, p);
        return GPUMEM_ENOMEM;
    }
    rings = (unsigned char *)GPUMEM_ALIGN_UP((uintptr_t)p->ring_mem, 4096);
    p->qp = (gpumem_nvme_qp *)GPUMEM_ALIGN_UP((uintptr_t)p->client_mem, 64);
    p->client_bytes = client_total;
    /* Client memory host code cannot write: build the pair in host memory
     * (same layout), then copy it in. */
    client = m->client_copy ? (unsigned char *)malloc(client_total) : (unsigned char *)p->qp;
    if (!client) {
        GPUMEM_FREE(grown);
        gpumem__target_pair_free(m, p);
        return GPUMEM_ENOMEM;
    }
    memset(rings, 0, ring_total);
    memset(&d, 0, sizeof d);
    d.depth = depth;
    d.n_cids = n_cids;
    d.qid = ps->n_pairs + 1;
    d.virtual_start = virtual_start;
    d.ns = ps->ns;
    d.sq = (gpumem_nvme_cmd *)rings;
    d.cq = (gpumem_nvme_cpl *)(rings + (size_t)depth * sizeof(gpumem_nvme_cmd));
    d.sq_doorbell = (uint32_t *)(rings + ring_bytes);
    d.cq_doorbell = (uint32_t *)(rings + ring_bytes + GPUMEM_PAD_BYTES);
    d.signals = (gpumem_nvme_qp_signals *)(rings + ring_bytes + 2 * GPUMEM_PAD_BYTES);
    d.state = client + GPUMEM_ALIGN_UP(sizeof(gpumem_nvme_qp), 64);
    d.state_bytes = state_bytes;
    d.doorbell_event = ps->doorbell_event;
    d.prp_lists = prp_bytes ? (uint64_t *)GPUMEM_ALIGN_UP((uintptr_t)p->prp_mem, 4096) : NULL;
    d.cmd_timeout_ms = cmd_timeout_ms;
    if ((st = gpumem_nvme_qp_init((gpumem_nvme_qp *)client, &d)) == GPUMEM_OK &&
        (st = gpumem_target_queue_init(&p->queue, &d, p->queue_mem, queue_bytes)) == GPUMEM_OK) {
        /* What the controller may know of the pair, kept in its own memory
         * while the pair is still the host's to read (being built here). */
        p->cmd_timeout_ns = ((const gpumem_nvme_qp *)client)->cmd_timeout_ns;
        p->prp_lo = (uint64_t)(uintptr_t)d.prp_lists;
        p->prp_hi = p->prp_lo + (d.prp_lists ? prp_bytes : 0);
        if (m->client_copy) {
            gpumem_nvme_qp_relocate_state((gpumem_nvme_qp *)client,
                                          (unsigned char *)p->qp + GPUMEM_ALIGN_UP(sizeof(gpumem_nvme_qp), 64));
            if (m->client_copy(m->client_ctx, p->qp, client, client_total) != 0) {
                GPUMEM_LOG("controller: client_copy of a new pair (%zu bytes) failed", client_total);
                st = GPUMEM_ESYS;
            }
        }
    }
    if (m->client_copy) free(client);
    if (st != GPUMEM_OK) {
        GPUMEM_FREE(grown);
        gpumem__target_pair_free(m, p);
        return st;
    }
    if (ps->n_pairs) memcpy(grown, ps->pairs, ps->n_pairs * sizeof *grown);
    GPUMEM_FREE(ps->pairs);
    ps->pairs = grown;
    ps->pairs[ps->n_pairs++] = p;
    *out = p->qp;
    return GPUMEM_OK;
}

void gpumem_target_pairs_destroy(gpumem_target_pairs *ps) {
    uint32_t i;
    if (!ps) return;
    for (i = 0; i < ps->n_pairs; i++) gpumem__target_pair_free(&ps->mem, ps->pairs[i]);
    GPUMEM_FREE(ps->pairs);
    gpumem_target_mem_free(&ps->mem, ps->doorbell_event);
    GPUMEM_FREE(ps);
}

/* A host-readable view of pair p's client state for the owner's calls
 * (the idle check, the report): the pair itself, or with client_copy a
 * copy in *copy (free() it) whose pointers are moved to the copy's state.
 * NULL if the copy failed. Plain malloc, as the watchdog's: GPUMEM_MALLOC
 * may be a CUDA allocator that waits for a hung device. */
static gpumem_nvme_qp *gpumem__target_client_view(const gpumem_target_pairs *ps, const gpumem__target_pair *p,
                                                  void **copy) {
    gpumem_nvme_qp *v;
    *copy = NULL;
    if (!ps->mem.client_copy) return p->qp;
    if (!(*copy = malloc(p->client_bytes))) return NULL;
    if (ps->mem.client_copy(ps->mem.client_ctx, *copy, p->qp, p->client_bytes) != 0) {
        free(*copy);
        *copy = NULL;
        return NULL;
    }
    v = (gpumem_nvme_qp *)*copy;
    gpumem_nvme_qp_relocate_state(v, (unsigned char *)*copy + GPUMEM_ALIGN_UP(sizeof(gpumem_nvme_qp), 64));
    return v;
}

gpumem_status gpumem_target_pairs_check_idle(const gpumem_target_pairs *ps) {
    uint32_t i;
    if (!ps) return GPUMEM_ENULL;
    for (i = 0; i < ps->n_pairs; i++) {
        void *copy;
        gpumem_nvme_qp *view = gpumem__target_client_view(ps, ps->pairs[i], &copy);
        gpumem_status st = view ? gpumem_nvme_qp_check_idle(view) : GPUMEM_ESYS;
        free(copy);
        if (st != GPUMEM_OK) return st == GPUMEM_ESYS ? st : GPUMEM_EBUSY;
    }
    return GPUMEM_OK;
}

size_t gpumem_target_pairs_report_client(const gpumem_target_pairs *ps, uint32_t i, char *buf, size_t n, size_t at) {
    void *copy;
    gpumem_nvme_qp *view;
    if (!ps || i >= ps->n_pairs) return gpumem__appendf(buf, n, at, "pair %u: none\n", i + 1);
    view = gpumem__target_client_view(ps, ps->pairs[i], &copy);
    if (view) at = gpumem_nvme_qp_report(view, buf, n, at);
    else at = gpumem__appendf(buf, n, at, "pair %u: its client state cannot be read\n", i + 1);
    free(copy);
    return at;
}

uint32_t gpumem_target_pairs_count(const gpumem_target_pairs *ps) { return ps ? ps->n_pairs : 0; }

gpumem_target_queue *gpumem_target_pairs_queue(gpumem_target_pairs *ps, uint32_t i) {
    return ps && i < ps->n_pairs ? &ps->pairs[i]->queue : NULL;
}

gpumem_nvme_qp *gpumem_target_pairs_qp(const gpumem_target_pairs *ps, uint32_t i) {
    return ps && i < ps->n_pairs ? ps->pairs[i]->qp : NULL;
}

uint32_t gpumem_target_pairs_find(const gpumem_target_pairs *ps, const gpumem_nvme_qp *qp) {
    uint32_t i;
    if (!ps || !qp) return GPUMEM_TARGET_NO_PAIR;
    /* compares the pointer only: the pair's memory is its clients' */
    for (i = 0; i < ps->n_pairs; i++)
        if (ps->pairs[i]->qp == qp) return i;
    return GPUMEM_TARGET_NO_PAIR;
}

gpumem_status gpumem_target_pairs_prp_range(const gpumem_target_pairs *ps, uint32_t i, uint64_t *lo, uint64_t *hi) {
    if (!ps || !lo || !hi) return GPUMEM_ENULL;
    if (i >= ps->n_pairs) return GPUMEM_EINVAL;
    *lo = ps->pairs[i]->prp_lo;
    *hi = ps->pairs[i]->prp_hi;
    return GPUMEM_OK;
}

uint64_t gpumem_target_pairs_timeout_ns(const gpumem_target_pairs *ps, uint32_t i) {
    return ps && i < ps->n_pairs ? ps->pairs[i]->cmd_timeout_ns : 0;
}

gpumem_event *gpumem_target_pairs_event(gpumem_target_pairs *ps) { return ps ? ps->doorbell_event : NULL; }

gpumem_status gpumem_target_pairs_set_polled(gpumem_target_pairs *ps, const gpumem_nvme_qp *qp, int polled) {
    uint32_t i;
    const uint32_t want = polled != 0;
    if (!ps || !qp) return GPUMEM_ENULL;
    if ((i = gpumem_target_pairs_find(ps, qp)) == GPUMEM_TARGET_NO_PAIR) return GPUMEM_EINVAL;
    /* Relaxed: the count is a hint the idle step reads (never park while
     * nonzero), ordering nothing else; the exchange makes a repeated mark
     * count once, whichever threads mark. */
    if (gpumem_atomic_exchange_u32(&ps->pairs[i]->polled, want, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) != want) {
        if (want) gpumem_atomic_fetch_add_u32(&ps->n_polled, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
        else gpumem_atomic_fetch_sub_u32(&ps->n_polled, 1, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM);
    }
    return GPUMEM_OK;
}

int gpumem_target_pairs_polled(const gpumem_target_pairs *ps) {
    return ps && gpumem_atomic_load_u32((uint32_t *)&ps->n_polled, GPUMEM_ORDER_RELAXED, GPUMEM_SCOPE_SYSTEM) != 0;
}

void gpumem_target_pairs_set_deleted(gpumem_target_pairs *ps, uint32_t i, int deleted) {
    if (ps && i < ps->n_pairs) ps->pairs[i]->deleted = deleted != 0;
}

int gpumem_target_pairs_deleted(const gpumem_target_pairs *ps, uint32_t i) {
    return ps && i < ps->n_pairs && ps->pairs[i]->deleted;
}

void gpumem_target_pairs_set_stopped(gpumem_target_pairs *ps, int stopped) {
    uint32_t i;
    if (!ps) return;
    for (i = 0; i < ps->n_pairs; i++)
        if (!ps->pairs[i]->deleted) gpumem_nvme_qp_signals_set_stopped(ps->pairs[i]->queue.signals, stopped);
}

uint64_t gpumem_target_spin_resolved(uint64_t spin_ns) {
    return spin_ns ? spin_ns : GPUMEM_TARGET_DEFAULT_SPIN_NS;
}

gpumem_target_idle gpumem_target_idle_start(uint64_t spin_ns, uint64_t park_ns) {
    gpumem_target_idle idle;
    spin_ns = gpumem_target_spin_resolved(spin_ns);
    idle.spin_ns = spin_ns == GPUMEM_TARGET_NO_SPIN ? 0 : spin_ns;
    idle.park_ns = park_ns ? park_ns : GPUMEM_TARGET_DEFAULT_PARK_NS;
    idle.last_work_ns = gpumem_clock_ns();
    return idle;
}

uint64_t gpumem_target_idle_step(gpumem_target_idle *idle, const gpumem_target_pairs *ps, uint32_t work,
                                 uint64_t now_ns) {
    if (!idle) return 0;
    if (work) {
        idle->last_work_ns = now_ns;
        return 0;
    }
    if (idle->spin_ns == GPUMEM_TARGET_NEVER_PARK || gpumem_target_pairs_polled(ps) ||
        now_ns - idle->last_work_ns < idle->spin_ns) {
        gpumem__cpu_relax(); /* a poll every few tens of nanoseconds */
        return 0;
    }
    return idle->park_ns;
}

int gpumem_target_pairs_rung(const gpumem_target_pairs *ps, uint32_t first, uint32_t stride) {
    uint32_t i;
    if (!ps) return 0;
    if (stride == 0) stride = 1;
    for (i = first; i < ps->n_pairs; i += stride) {
        const gpumem_target_queue *q = &ps->pairs[i]->queue;
        if (ps->pairs[i]->deleted) continue; /* between reset_begin and reset_end */
        /* Acquire, system scope, as gpumem_target_take_*_doorbell take them
         * (the ringer may be a GPU thread). After gpumem__event_begin's
         * seq_cst registration in gpumem_target_pairs_park: either this
         * load sees a doorbell rung before the ringer's notify looked for
         * waiters (its seq_cst fence), or that look saw us registered and
         * the notify ends the sleep. */
        if (gpumem_atomic_load_u32(q->sq_doorbell, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) != q->sq_db_seen ||
            gpumem_atomic_load_u32(q->cq_doorbell, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM) != q->cq_db_seen)
            return 1;
    }
    return 0;
}

void gpumem_target_pairs_park(gpumem_target_pairs *ps, uint32_t first, uint32_t stride, uint64_t wait_ns,
                              uint32_t *running) {
    uint32_t seen;
    if (!ps || wait_ns == 0) return;
    if (wait_ns > 1000000000ull) wait_ns = 1000000000ull;
    /* Register, then look (the eventcount's order, gpumem.h): a doorbell, or
     * a stop (the stopper stores running = 0, then notifies), that came
     * before our registration is seen by the looks below; one after it
     * wakes the sleep. Acquire on running: what the stopper wrote before
     * its store is visible once the loop ends. */
    seen = gpumem__event_begin(ps->doorbell_event);
    if (!gpumem_target_pairs_rung(ps, first, stride) &&
        (!running || gpumem_atomic_load_u32(running, GPUMEM_ORDER_ACQUIRE, GPUMEM_SCOPE_SYSTEM)))
        gpumem__event_sleep(ps->doorbell_event, seen, (long)wait_ns);
    gpumem__event_end(ps->doorbell_event);
}

#endif /* GPUMEM_IMPLEMENTATION */
#endif /* !GPUMEM_NO_HOST_SHIM */

#endif /* GPUMEM_TARGET_H */
