/* array_sum: a data set several times larger than the cache, written and
 * read through NVMe queue pairs, then summed through the cache.
 *
 * A software NVMe controller (a host thread) serves a namespace backed by a
 * file. Many host threads, sharing a few queue pairs without locks, write a
 * data set of 64-bit values through the queues, flush, then read it all back
 * with a mix of blocking and asynchronous reads, check every block by content
 * and sum the values; the sum is compared with one computed in memory.
 * Then the same threads sum the data again through a software cache an
 * eighth of its size, in groups of 8 that share each line (as a warp's lanes
 * would): every line is wanted by 8 threads at once, and the cache turns
 * that into one read per line.
 *
 *   make examples && build/array_sum        (defaults below)
 *   build/array_sum [file] [MiB] [threads] [pairs] [depth]
 *
 * Exit status 0 only if every check passed. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"

#define BLOCK 4096u /* LBA size */
#define CHUNK 8u    /* blocks per command: 32 KiB, a PRP list of 8 pages */

typedef struct job {
    gpumem_nvme_qp **pairs;
    uint32_t n_pairs, id, n_threads;
    uint64_t n_blocks;
    int phase; /* 0 = write, 1 = read and sum, 2 = sum through the cache */
    gpumem_cache *cache;
    uint64_t sum, bad_blocks, ios, errors;
    uint64_t *progress; /* blocks done, all threads */
} job;

static uint64_t value_at(uint64_t i) { return i * 2654435761u ^ (i >> 3); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(uint64_t *words, uint64_t first_block, uint32_t n_blocks) {
    uint64_t i, per = BLOCK / 8, first = first_block * per;
    for (i = 0; i < (uint64_t)n_blocks * per; i++) words[i] = value_at(first + i);
}

/* Phase 2, through the cache: threads form groups of SHARE; group g takes
 * lines g, g + n_groups, ...; lane k of the group reads values k, k + SHARE,
 * ... of each, so SHARE threads want each line at the same time. The
 * reference keeps its line while the thread stays on it. Progress counts
 * (line, thread) pairs. */
#define SHARE 8u
static void cache_sum(job *j) {
    const uint64_t per_line = BLOCK / 8;
    uint32_t share = j->n_threads % SHARE == 0 ? SHARE : 1, lane = j->id % share;
    uint64_t n_groups = j->n_threads / share, line, w;
    gpumem_cache_array a = gpumem_cache_array_make(j->cache, 8, 0, j->n_blocks * per_line);
    gpumem_cache_ref r = gpumem_cache_ref_make(&a);
    for (line = j->id / share; line < j->n_blocks; line += n_groups) {
        for (w = line * per_line + lane; w < (line + 1) * per_line; w += share) {
            uint64_t v = 0;
            gpumem_status st;
            while ((st = gpumem_cache_ref_get(&r, w, &v)) == GPUMEM_EAGAIN) {} /* full: nothing held, retry */
            if (st != GPUMEM_OK) {
                j->errors++;
                continue;
            }
            if (v != value_at(w)) j->bad_blocks++;
            j->sum += v;
        }
        __atomic_fetch_add(j->progress, 1, __ATOMIC_RELAXED);
    }
    if (gpumem_cache_ref_drop(&r) != GPUMEM_OK) j->errors++;
}

/* Thread `id` owns chunks id, id + n_threads, ... and alternates blocking and
 * asynchronous (two in flight) commands. */
static void *worker(void *arg) {
    job *j = (job *)arg;
    if (j->phase == 2) {
        cache_sum(j);
        return NULL;
    }
    gpumem_nvme_qp *qp = j->pairs[j->id % j->n_pairs];
    uint64_t *buf[2];
    uint64_t n_chunks = (j->n_blocks + CHUNK - 1) / CHUNK, c;
    int k;
    for (k = 0; k < 2; k++) buf[k] = aligned_alloc(4096, (size_t)CHUNK * BLOCK);
    for (c = j->id; c < n_chunks; c += 2 * (uint64_t)j->n_threads) {
        gpumem_nvme_req req[2];
        uint64_t first[2] = {c * CHUNK, (c + j->n_threads) * CHUNK};
        int in_flight = 0;
        for (k = 0; k < 2; k++) {
            uint32_t nlb;
            uint8_t op = j->phase == 0 ? GPUMEM_NVME_OP_WRITE : GPUMEM_NVME_OP_READ;
            gpumem_status st;
            if (first[k] >= j->n_blocks) break;
            nlb = (uint32_t)(j->n_blocks - first[k] < CHUNK ? j->n_blocks - first[k] : CHUNK);
            if (j->phase == 0) fill(buf[k], first[k], nlb);
            else memset(buf[k], 0, (size_t)nlb * BLOCK);
            /* The pair builds PRP1, PRP2 and the PRP list (in the command
             * ID's own list page) from the buffer's address. */
            if (k == 0) { /* blocking */
                st = gpumem_nvme_qp_rw_buf(qp, op, first[k], nlb, buf[k], NULL);
            } else {      /* asynchronous: submitted now, collected below */
                while ((st = gpumem_nvme_qp_submit_buf(qp, op, first[k], nlb, buf[k], &req[1])) == GPUMEM_EAGAIN) {}
                if (st == GPUMEM_OK) in_flight = 1;
            }
            j->ios++;
            if (st != GPUMEM_OK) j->errors++;
        }
        if (in_flight && gpumem_nvme_qp_wait(qp, &req[1]) != GPUMEM_OK) j->errors++;
        for (k = 0; k < 2; k++) {
            uint64_t b, nlb, w;
            if (first[k] >= j->n_blocks) break;
            nlb = j->n_blocks - first[k] < CHUNK ? j->n_blocks - first[k] : CHUNK;
            if (j->phase == 1) {
                for (b = 0; b < nlb; b++) {
                    uint64_t base = (first[k] + b) * (BLOCK / 8), *blk = buf[k] + b * (BLOCK / 8);
                    int ok = 1;
                    for (w = 0; w < BLOCK / 8; w++) {
                        ok &= blk[w] == value_at(base + w);
                        j->sum += blk[w];
                    }
                    if (!ok) j->bad_blocks++;
                }
            }
            __atomic_fetch_add(j->progress, nlb, __ATOMIC_RELAXED);
        }
    }
    for (k = 0; k < 2; k++) free(buf[k]);
    return NULL;
}

/* Run a phase on all threads; progress reaches `units` when it is done. */
static int run_phase(job *jobs, uint32_t n, int phase, const char *what, uint64_t n_blocks, uint64_t units) {
    pthread_t *t = calloc(n, sizeof *t);
    uint64_t progress = 0, i;
    double t0 = now_s(), last = t0;
    for (i = 0; i < n; i++) {
        jobs[i].phase = phase;
        jobs[i].progress = &progress;
        pthread_create(&t[i], NULL, worker, &jobs[i]);
    }
    while (__atomic_load_n(&progress, __ATOMIC_RELAXED) < units) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        if (now_s() - last > 0.5) {
            last = now_s();
            printf("\r  %s: %5.1f %%", what, 100.0 * (double)progress / (double)units);
            fflush(stdout);
        }
    }
    for (i = 0; i < n; i++) pthread_join(t[i], NULL);
    {
        double dt = now_s() - t0;
        printf("\r  %s: 100.0 %%  %.1f MiB in %.2f s = %.0f MiB/s\n", what,
               (double)n_blocks * BLOCK / 1048576.0, dt, (double)n_blocks * BLOCK / 1048576.0 / dt);
    }
    free(t);
    return 0;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "build/array_sum.img";
    uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
    uint32_t threads = argc > 3 ? (uint32_t)atoi(argv[3]) : 64;
    uint32_t n_pairs = argc > 4 ? (uint32_t)atoi(argv[4]) : 4;
    uint32_t depth = argc > 5 ? (uint32_t)atoi(argv[5]) : 256;
    uint64_t n_blocks = mib * 1048576 / BLOCK, i, sum = 0, expect = 0, bad = 0, ios = 0, errors = 0;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl;
    gpumem_nvme_qp **pairs;
    gpumem_swctl_stats s;
    gpumem_cache_stats cs;
    gpumem_cache *cache;
    gpumem_status st;
    job *jobs;
    int fd;

    if (mib == 0 || threads == 0 || threads > 4096 || n_pairs == 0 || n_pairs > 64) {
        fprintf(stderr, "usage: %s [file] [MiB>0] [threads 1..4096] [pairs 1..64] [depth 2..65536, power of two]\n",
                argv[0]);
        return 2;
    }
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)(n_blocks * BLOCK)) != 0) {
        fprintf(stderr, "array_sum: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    cfg.lba_bytes = BLOCK;
    cfg.n_blocks = n_blocks;
    cfg.fd = fd;
    cfg.max_blocks = CHUNK;
    if ((st = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK) {
        fprintf(stderr, "array_sum: controller: %s\n", gpumem_status_str(st));
        return 1;
    }
    pairs = calloc(n_pairs, sizeof *pairs);
    for (i = 0; i < n_pairs; i++)
        if ((st = gpumem_swctl_add_qp(ctl, depth, &pairs[i])) != GPUMEM_OK) {
            fprintf(stderr, "array_sum: queue pair of depth %u: %s\n", depth, gpumem_status_str(st));
            return 2;
        }
    gpumem_swctl_start(ctl);
    printf("gpumem %s array_sum: %lu MiB file-backed namespace (%s), %u threads, %u queue pairs of depth %u\n",
           GPUMEM_VERSION_STRING, (unsigned long)mib, path, threads, n_pairs, depth);
    jobs = calloc(threads, sizeof *jobs);
    for (i = 0; i < threads; i++) {
        jobs[i].pairs = pairs;
        jobs[i].n_pairs = n_pairs;
        jobs[i].id = (uint32_t)i;
        jobs[i].n_threads = threads;
        jobs[i].n_blocks = n_blocks;
    }
    run_phase(jobs, threads, 0, "write", n_blocks, n_blocks);
    if (gpumem_nvme_qp_flush(pairs[0], NULL) != GPUMEM_OK) errors++;
    for (i = 0; i < threads; i++) jobs[i].sum = 0;
    run_phase(jobs, threads, 1, "read ", n_blocks, n_blocks);
    for (i = 0; i < n_blocks * (BLOCK / 8); i++) expect += value_at(i);
    {   /* the same data through a cache of an eighth of its size */
        gpumem_cache_desc d = gpumem_cache_desc_default();
        uint64_t cache_sum_total = 0, cache_bad = 0;
        d.n_lines = n_blocks;
        d.line_bytes = BLOCK;
        d.n_slots = (uint32_t)(n_blocks / 8 > 0 ? n_blocks / 8 : 1);
        gpumem_nvme_ns ns = gpumem_swctl_ns(ctl);
        d.backing = gpumem_cache_backing_nvme(pairs, 1, n_pairs, &ns, 0, GPUMEM_CACHE_STRIPE);
        if ((st = gpumem_cache_create(&d, &cache)) != GPUMEM_OK) {
            fprintf(stderr, "array_sum: cache: %s\n", gpumem_status_str(st));
            return 1;
        }
        printf("  cache: %u slots of %u B (%.1f MiB, 1/8 of the data), CLOCK replacement\n", d.n_slots, BLOCK,
               (double)d.n_slots * BLOCK / 1048576.0);
        for (i = 0; i < threads; i++) {
            jobs[i].cache = cache;
            jobs[i].sum = jobs[i].bad_blocks = 0;
        }
        run_phase(jobs, threads, 2, "cache", n_blocks, n_blocks * (threads % SHARE == 0 ? SHARE : 1));
        for (i = 0; i < threads; i++) {
            cache_sum_total += jobs[i].sum;
            cache_bad += jobs[i].bad_blocks;
            errors += jobs[i].errors;
            jobs[i].errors = 0;
        }
        gpumem_cache_get_stats(cache, &cs);
        {
            double acq = (double)(cs.hits + cs.misses);
            printf("  cache: %lu acquires: %.1f %% hits, %.1f %% joined a read in flight, %.1f %% read the line\n",
                   (unsigned long)(cs.hits + cs.misses), 100.0 * (double)cs.hits / acq,
                   100.0 * (double)(cs.misses - cs.fills) / acq, 100.0 * (double)cs.fills / acq);
            printf("  cache: %lu lines read, %lu evicted; I/O amplification %.3f (bytes read / bytes needed)\n",
                   (unsigned long)cs.fills, (unsigned long)cs.evictions,
                   (double)cs.bytes_read / ((double)n_blocks * BLOCK));
        }
        printf("  cache: values wrong: %lu; sum %016lx -> %s\n", (unsigned long)cache_bad,
               (unsigned long)cache_sum_total, cache_sum_total == expect ? "match" : "MISMATCH");
        if (cache_bad || cache_sum_total != expect || cs.violations || cs.io_errors) bad++;
        ios += cs.reads;
        gpumem_cache_destroy(cache);
    }
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    for (i = 0; i < threads; i++) {
        sum += jobs[i].sum;
        bad += jobs[i].bad_blocks;
        ios += jobs[i].ios;
        errors += jobs[i].errors;
    }
    printf("  commands: %lu issued, %lu completed by the controller, %lu errors, %lu protocol violations\n",
           (unsigned long)(ios + 1), (unsigned long)s.commands, (unsigned long)errors, (unsigned long)s.violations);
    printf("  doorbells: ");
    for (i = 0; i < n_pairs; i++)
        printf("%s%u SQ / %u CQ", i ? ", " : "", pairs[i]->sq_doorbell_writes.v, pairs[i]->cq_doorbell_writes.v);
    printf(" (batched: fewer doorbells than commands)\n");
    printf("  blocks checked by content: %lu, wrong: %lu\n", (unsigned long)n_blocks, (unsigned long)bad);
    printf("  sum of %lu values: %016lx, in-memory reference: %016lx -> %s\n", (unsigned long)(n_blocks * BLOCK / 8),
           (unsigned long)sum, (unsigned long)expect, sum == expect ? "match" : "MISMATCH");
    gpumem_swctl_destroy(ctl);
    close(fd);
    unlink(path);
    free(jobs);
    free(pairs);
    if (bad || errors || s.violations || sum != expect || s.commands != ios + 1) {
        fprintf(stderr, "array_sum: FAILED\n");
        return 1;
    }
    printf("array_sum: ok\n");
    return 0;
}
