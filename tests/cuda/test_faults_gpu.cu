// The queue pair's fault handling with GPU threads as the clients (issue 19):
// the scripted faulty controller of the host tests (tests/fault_ctl.h) runs
// in a host thread on a pair in mapped pinned memory, while a kernel's
// threads do blocking reads through the same pair. One fault mode a run:
// every completion sent twice, a stray before each true completion, a
// premature completion before each fetch, an impossible SQ head before each
// true completion, the first command never answered (it times out on the
// device by %globaltimer, and its late completion comes after), the first
// completion with the wrong phase (fixed after the device timed out). Each
// run checks every read's data on the device, counts statuses, reads the
// fault flag in device code, then has one device thread hold every ID
// (retrying EAGAIN, as a caller must, until the late completions have freed
// the IDs the given-up commands kept) and checks that data too.
// Bounded by the watchdog of tests/cuda/watch.h's kind (gpumem_watchdog on
// the controller's posted count). Needs a GPU: make gpu-test.
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpumem_nvme.h"
#include "watch.h"
#include "cuda_check.h"

/* The scripted controller's checks end the run (after cuda_check.h's message). */
#define FCTL_ASSERT(cond, ...)          \
    do {                                \
        if (!(cond)) {                  \
            EXPECT(0, __VA_ARGS__);     \
            exit(1);                    \
        }                               \
    } while (0)
#include "../fault_ctl.h"

enum Mode { TWICE, STRAY, EARLY, BAD_HEAD, SILENT_FIRST, WRONG_PHASE, N_MODES };
static const char *const mode_name[N_MODES] = {"every completion twice", "a stray before each completion",
                                               "a premature completion before each fetch",
                                               "an impossible SQ head before each completion",
                                               "the first command unanswered, then late",
                                               "the first completion with the wrong phase"};

#define THREADS 6u /* fewer than the pair's IDs: blocking calls never wait for one */
#define READS 8u
// The pair's command timeout. --small (the compute-sanitizer runs) makes it
// 1 s: instrumented device code is many times slower, and a correct command
// that outlived 200 ms there would count as one more timeout than expected.
static uint32_t timeout_ms = 200;

struct Counts {
    uint32_t ok, timed_out, other, bad_data, faults;
};

__device__ int block_right(const unsigned char *b, uint64_t lba) {
    for (uint32_t k = 0; k < FCTL_LBA; k++)
        if (b[k] != fctl_disk_byte(lba, k)) return 0;
    return 1;
}

__global__ void readers(fctl *r, unsigned char *bufs, Counts *c) {
    const uint32_t t = threadIdx.x;
    unsigned char *buf = bufs + (size_t)t * 4096;
    for (uint32_t i = 0; i < READS; i++) {
        const uint64_t lba = t * READS + i;
        gpumem_status st = gpumem_nvme_qp_read(&r->qp, lba, 1, (uint64_t)(uintptr_t)buf, 0, NULL);
        if (st == GPUMEM_OK) {
            atomicAdd(&c->ok, 1u);
            if (!block_right(buf, lba)) atomicAdd(&c->bad_data, 1u);
        } else if (st == GPUMEM_ETIMEDOUT) {
            atomicAdd(&c->timed_out, 1u);
        } else {
            atomicAdd(&c->other, 1u);
        }
    }
}

// The pair's fault flag, read on the device once every reader is done: a
// reader of its own could look before another reader's command times out.
__global__ void read_faults(fctl *r, Counts *c) { c->faults = gpumem_nvme_qp_faults(&r->qp); }

// One thread holds every ID of the pair at once (the full budget), then
// collects them all and checks the data. An ID whose command the readers
// gave up stays reserved until its late completion comes (SILENT_FIRST,
// WRONG_PHASE): a submit finds no ID (EAGAIN), harvests, and is tried
// again, within DeviceRetry's bound.
__global__ void hold_every_id(fctl *r, unsigned char *bufs, Counts *c) {
    gpumem_nvme_req req[FCTL_CIDS];
    const uint32_t n = r->qp.cid_limit;
    for (uint32_t i = 0; i < n; i++) {
        gpumem_nvme_cmd cmd;
        gpumem_status st;
        DeviceRetry retry;
        gpumem_nvme_cmd_read(&cmd, &r->qp.ns, 100 + i, 1, (uint64_t)(uintptr_t)(bufs + (size_t)i * 4096), 0);
        while ((st = gpumem__qp_submit_within(&r->qp, &cmd, (const gpumem_nvme_iomap *)0, &req[i], n)) ==
                   GPUMEM_EAGAIN &&
               retry.pause()) {
        }
        if (st != GPUMEM_OK) {
            atomicAdd(&c->other, 1u);
            return;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        gpumem_status st = gpumem_nvme_qp_wait(&r->qp, &req[i]);
        if (st != GPUMEM_OK) atomicAdd(&c->other, 1u);
        else if (!block_right(bufs + (size_t)i * 4096, 100 + i)) atomicAdd(&c->bad_data, 1u);
        else atomicAdd(&c->ok, 1u);
    }
}

struct Script {
    fctl *r;
    Mode mode;
    uint32_t stop;
    uint32_t holding;      /* hold_every_id runs: BAD_HEAD posts no bad head */
    gpumem_nvme_cmd first; /* SILENT_FIRST: the command held back */
    uint64_t first_due;    /* when its late completion goes out (0: none held) */
};

// The faulty controller: serves everything the doorbell brings, with the
// run's fault, until told to stop.
static const struct timespec pause_20us = {0, 20000};

static void *script_main(void *arg) {
    Script *s = (Script *)arg;
    fctl *r = s->r;
    uint32_t served = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        if (s->first_due && gpumem_clock_ns() >= s->first_due) { /* the late one */
            fctl_exec(r, &s->first);
            fctl_post(r, (uint16_t)(s->first.cdw0 >> 16), 0, r->sq_head);
            s->first_due = 0;
        }
        if (s->mode == EARLY && r->n_held == 0) {
            uint32_t db = __atomic_load_n(&r->doorbells[0], __ATOMIC_ACQUIRE);
            if (db != r->sq_head) fctl_post(r, fctl_peek_cid(r, 0), 0, r->sq_head); /* before the fetch */
        }
        if (!fctl_fetch(r, 1)) {
            nanosleep(&pause_20us, NULL);
            continue;
        }
        gpumem_nvme_cmd c = r->held[0];
        uint16_t cid = (uint16_t)(c.cdw0 >> 16);
        switch (s->mode) {
        case TWICE:
            fctl_complete(r, 0);
            fctl_post(r, cid, 0, r->sq_head);
            break;
        case STRAY:
            fctl_post(r, (uint16_t)(cid + 3u * FCTL_CIDS), 0, r->sq_head);
            fctl_complete(r, 0);
            break;
        case EARLY:
            fctl_complete(r, 0);
            break;
        case BAD_HEAD:
            /* 7 past the head is past every entry the 6 readers can have
             * submitted, so always a fault; with hold_every_id's 8 commands
             * in flight it can be a true head, and a completion taken
             * before the data is copied: that phase is served cleanly. */
            if (!__atomic_load_n(&s->holding, __ATOMIC_ACQUIRE)) fctl_post(r, cid, 0, r->sq_head + 7);
            fctl_complete(r, 0);
            break;
        case SILENT_FIRST:
            if (served == 0) { /* held back past the device's timeout, the others served meanwhile */
                s->first = fctl_pop(r);
                s->first_due = gpumem_clock_ns() + 3ull * timeout_ms * 1000000ull;
            } else {
                fctl_complete(r, 0);
            }
            break;
        case WRONG_PHASE:
            if (served == 0) {
                fctl_pop(r);
                fctl_exec(r, &c);
                fctl_post_phase(r, cid, 0, r->sq_head, 0);
                const struct timespec past_timeout = {(time_t)(3u * timeout_ms / 1000u),
                                                      (long)(3u * timeout_ms % 1000u) * 1000000l}; /* the device gives up */
                nanosleep(&past_timeout, NULL);
                fctl_fix_phase(r, 1);
            } else {
                fctl_complete(r, 0);
            }
            break;
        default: break;
        }
        served++;
    }
    return NULL;
}

static uint64_t script_progress(void *p) { return __atomic_load_n(&((fctl *)p)->posted, __ATOMIC_RELAXED); }

static int run_mode(Mode mode) {
    fctl *r;
    unsigned char *bufs;
    Counts *c;
    Script s;
    memset(&s, 0, sizeof s);
    s.mode = mode;
    pthread_t th;
    gpumem_nvme_qp_stats st;
    Counts first;
    int fail = 0;
    CHECK(cudaHostAlloc((void **)&r, sizeof(fctl), cudaHostAllocMapped));
    CHECK(cudaHostAlloc((void **)&bufs, (size_t)FCTL_CIDS * 4096, cudaHostAllocMapped));
    CHECK(cudaHostAlloc((void **)&c, sizeof(Counts), cudaHostAllocMapped));
    memset(c, 0, sizeof *c);
    fctl_init(r, timeout_ms);
    r->harvest = 0; /* device threads harvest; a host thread must not share their device-scope atomics */
    s.r = r;
    pthread_create(&th, NULL, script_main, &s);
    {   // the watchdog reads r: it lives inside r's life (and the script thread's)
        CountWatch watch(script_progress, r, mode_name[mode], 20000);
        readers<<<1, THREADS>>>(r, bufs, c);
        CHECK(cudaGetLastError());
        wait_kernels(kTestWaitS, mode_name[mode]);
        read_faults<<<1, 1>>>(r, c);
        CHECK(cudaGetLastError());
        wait_kernels(kTestWaitS, mode_name[mode]);
        first = *c;
        memset(c, 0, sizeof *c);
        __atomic_store_n(&s.holding, 1, __ATOMIC_RELEASE);
        hold_every_id<<<1, 1>>>(r, bufs, c);
        CHECK(cudaGetLastError());
        wait_kernels(kTestWaitS, mode_name[mode]);
    }
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    gpumem_nvme_qp_get_stats(&r->qp, &st);
    /* SILENT_FIRST: exactly the held-back read; WRONG_PHASE: every read whose
     * completion sat behind the bad entry (at least the first). */
    printf("%-46s ok %u, timed out %u, other %u, wrong data %u, device fault flag 0x%x; dropped %u (stray %u, "
           "stale %u, duplicate %u, early %u, SQ head %u), late %u; then one thread held %u IDs: ok %u, other %u, "
           "wrong data %u\n",
           mode_name[mode], first.ok, first.timed_out, first.other, first.bad_data, first.faults, st.dropped,
           st.stray, st.stale, st.duplicate, st.early, st.bad_sq_head, st.late, r->qp.cid_limit, c->ok, c->other,
           c->bad_data);
    fail |= first.ok + first.timed_out != THREADS * READS || first.other || first.bad_data;
    if (mode == SILENT_FIRST) fail |= first.timed_out != 1;
    else if (mode == WRONG_PHASE) fail |= first.timed_out < 1;
    else fail |= first.timed_out != 0;
    fail |= st.late != first.timed_out || st.orphans != 0;
    fail |= (mode == TWICE || mode == STRAY || mode == EARLY || mode == BAD_HEAD) && st.dropped == 0;
    fail |= first.faults != gpumem_nvme_qp_faults(&r->qp) && mode != TWICE; /* a late repeat may follow the read */
    fail |= c->ok != r->qp.cid_limit || c->other || c->bad_data;
    cudaFreeHost(c);
    cudaFreeHost(bufs);
    cudaFreeHost(r);
    return fail;
}

int main(int argc, char **argv) {
    int fail = 0, m;
    // 6 threads, 8 reads each, already small: --small lengthens only the timeout
    if (parse_args(argc, argv, false).small) timeout_ms = 1000;
    if (no_gpu("test_faults_gpu")) return 0;
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    for (m = 0; m < N_MODES; m++) fail |= run_mode((Mode)m);
    printf("%s\n", fail ? "FAIL" : "PASS: every fault, GPU clients");
    return fail;
}
