/* own_kernel, on host threads: what examples/cuda/own_kernel.cu does on a GPU
 * (docs/cuda.md), here with threads standing for the warps, so that it runs
 * anywhere (make test runs it). A file of 4-byte floats is served by the
 * software controller; each thread reads element i through the cache with
 * gpumem_cache_ref_get, writes 2 x + 1 to element n + i with
 * gpumem_cache_ref_put, retrying GPUMEM_EAGAIN with nothing held; then the
 * host flushes (here it can: the pairs' client state is host memory) and
 * every output value is read back from the file and checked.
 *
 *   build/own_kernel [MiB of input, default 8] [threads, default 8]
 * Exit status 0 when every value is right, 1 otherwise, 2 for bad arguments. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "gpumem_cache.h"
#include "gpumem_swctl.h"
#include "examples/own_kernel.h"

typedef struct worker {
    const gpumem_cache_array *in, *out;
    uint64_t n, first, stride;
    uint64_t done, eagain, errors;
    pthread_t thread;
} worker;

/* Sleep between tries of a refused access; 0 once OWN_RETRY_NS have passed. */
static int pause_retry(uint64_t *waited_ns) {
    struct timespec ts = {0, 20000};
    if (*waited_ns > OWN_RETRY_NS) return 0;
    nanosleep(&ts, NULL);
    *waited_ns += 20000;
    return 1;
}

/* Elements first, first + stride, ...: the kernel's grid-stride loop. On
 * EAGAIN the refused reference holds nothing; the other is dropped too
 * before waiting, so that no thread holds a line while it waits for a slot. */
static void *work(void *arg) {
    worker *w = (worker *)arg;
    gpumem_cache_ref src = gpumem_cache_ref_make(w->in), dst = gpumem_cache_ref_make(w->out);
    uint64_t i;
    for (i = w->first; i < w->n; i += w->stride) {
        float x = 0, y;
        uint64_t waited = 0;
        gpumem_status st;
        while ((st = gpumem_cache_ref_get(&src, i, &x)) == GPUMEM_EAGAIN && pause_retry(&waited)) {
            w->eagain++;
            gpumem_cache_ref_drop(&dst);
        }
        y = own_output(x);
        waited = 0;
        while (st == GPUMEM_OK && (st = gpumem_cache_ref_put(&dst, i, &y)) == GPUMEM_EAGAIN && pause_retry(&waited)) {
            w->eagain++;
            gpumem_cache_ref_drop(&src);
        }
        if (st == GPUMEM_OK) w->done++;
        else w->errors++;
    }
    if (gpumem_cache_ref_drop(&src) != GPUMEM_OK || gpumem_cache_ref_drop(&dst) != GPUMEM_OK) w->errors++;
    return NULL;
}

int main(int argc, char **argv) {
    const char *path = "build/own_kernel.img";
    uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 8, threads = argc > 2 ? strtoull(argv[2], NULL, 10) : 8;
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_nvme_qp *pairs[OWN_PAIRS];
    gpumem_swctl *ctl;
    gpumem_cache *cache;
    gpumem_cache_array in, out;
    gpumem_cache_stats cs;
    gpumem_swctl_stats s;
    gpumem_nvme_ns ns;
    gpumem_status flushed;
    worker *w;
    uint64_t n, n_lines, i, done = 0, eagain = 0, errors = 0, wrong, written = 0;
    int fd, k, ok;
    if (mib < 1 || mib > 4096 || threads < 1 || threads > 256) {
        fprintf(stderr, "usage: %s [MiB of input, 1..4096] [threads, 1..256]\n", argv[0]);
        return 2;
    }
    n = mib * 1048576 / 4;
    n_lines = 2 * n * 4 / OWN_LINE;
    if ((fd = own_write_input(path, n)) < 0) return 1;
    cfg.lba_bytes = OWN_LINE; /* host threads drive the pairs: the default configuration */
    cfg.n_blocks = n_lines;
    cfg.fd = fd;
    if (gpumem_swctl_create(&cfg, &ctl) != GPUMEM_OK) return 1;
    for (k = 0; k < OWN_PAIRS; k++)
        if (gpumem_swctl_add_qp(ctl, 256, &pairs[k]) != GPUMEM_OK) return 1;
    d.n_lines = n_lines;
    d.line_bytes = OWN_LINE;
    d.n_slots = own_slots(threads, n_lines);
    ns = gpumem_swctl_ns(ctl);
    d.backing = gpumem_cache_backing_nvme(pairs, 1, OWN_PAIRS, &ns, 0, GPUMEM_CACHE_STRIPE);
    if (gpumem_cache_create(&d, &cache) != GPUMEM_OK || gpumem_swctl_start(ctl) != GPUMEM_OK) {
        fprintf(stderr, "own_kernel: a cache of %u lines, or the controller: failed\n", d.n_slots);
        return 1;
    }
    in = gpumem_cache_array_make(cache, 4, 0, n);
    out = gpumem_cache_array_make(cache, 4, n * 4, n);
    w = (worker *)calloc(threads, sizeof *w);
    for (i = 0; w && i < threads; i++) {
        w[i].in = &in;
        w[i].out = &out;
        w[i].n = n;
        w[i].first = i;
        w[i].stride = threads;
        if (pthread_create(&w[i].thread, NULL, work, &w[i]) != 0) return 1;
    }
    for (i = 0; w && i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        done += w[i].done, eagain += w[i].eagain, errors += w[i].errors;
    }
    free(w);
    flushed = gpumem_cache_flush(cache, &written); /* every thread has dropped its lines */
    gpumem_cache_get_stats(cache, &cs);
    gpumem_swctl_stop(ctl);
    gpumem_swctl_get_stats(ctl, &s);
    wrong = own_check_output(fd, n);
    printf("own_kernel (host): %llu floats through %u slots by %llu threads: %llu done, %llu EAGAIN retries, %llu"
           " errors;\n  flush: %s, %llu lines written; %llu lines read; %llu protocol violations; %llu output values"
           " wrong in the file\n",
           (unsigned long long)n, d.n_slots, (unsigned long long)threads, (unsigned long long)done,
           (unsigned long long)eagain, (unsigned long long)errors, gpumem_status_str(flushed),
           (unsigned long long)written, (unsigned long long)cs.fills, (unsigned long long)s.violations,
           (unsigned long long)wrong);
    ok = done == n && errors == 0 && flushed == GPUMEM_OK && s.violations == 0 && wrong == 0;
    if (gpumem_cache_destroy(cache) != GPUMEM_OK) ok = 0;
    gpumem_swctl_destroy(ctl);
    close(fd);
    unlink(path);
    printf("own_kernel: %s\n", ok ? "ok" : "FAILED");
    return !ok;
}
