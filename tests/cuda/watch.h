// Watchdogs for the CUDA tests, benchmarks and examples: GpuctlWatch on a
// GPU-resident controller, SwctlWatch on a host-thread one, CountWatch on any
// progress count. When the
// controller's command count stops moving for stall_ms, the watchdog prints
// every pair's client and controller state, stops the controller and ends the
// process with status 1, naming what stalled (gpumem_watchdog). Include after
// gpumem_nvme.h, in the file that defines GPUMEM_IMPLEMENTATION.
#ifndef GPUMEM_TEST_CUDA_WATCH_H
#define GPUMEM_TEST_CUDA_WATCH_H
#include <stdlib.h>
#include <string.h>
#include "gpumem_swctl.h"
/* A watchdog on a running GPU-resident controller (gpumem_watchdog): when
 * its command count stops for stall_ms it prints every pair's client and
 * controller state (copied from GPU memory), stops the controller and ends
 * the process with status 1, naming what stalled. For the life of the
 * object. */
struct GpuctlWatch {
    const gpumem_nvme_gpuctl *ctl;
    const gpumem_nvme_gpuctl_desc *desc;
    gpumem_watchdog *wd = nullptr;
    static uint64_t progress(void *p) {
        gpumem_nvme_sw_stats s;
        return gpumem_nvme_gpuctl_get_stats_cuda(((GpuctlWatch *)p)->ctl, &s) == GPUMEM_OK ? s.commands : 0;
    }
    static void stop(void *p) { gpumem_nvme_gpuctl_stop(((GpuctlWatch *)p)->desc); }
    static size_t report(void *p, char *buf, size_t n) {
#if !defined(__CUDA_ARCH__) /* host code; the report exists in the host pass */
        return gpumem_nvme_gpuctl_report_cuda(((GpuctlWatch *)p)->ctl, buf, n, 0);
#else
        return (void)p, (void)buf, n;
#endif
    }
    GpuctlWatch(const gpumem_nvme_gpuctl *c, const gpumem_nvme_gpuctl_desc *d, const char *what, uint32_t stall_ms)
        : ctl(c), desc(d) {
        gpumem_watchdog_config w = gpumem_watchdog_config_make(what, stall_ms, progress, stop, report, this);
        w.exit_code = 1;
        if (gpumem_watchdog_start(&w, &wd) != GPUMEM_OK) exit(1);
    }
    ~GpuctlWatch() { gpumem_watchdog_finish(wd); }
};

/* A watchdog on any progress count (a scripted controller's completions
 * posted): no controller to stop, no state to print; it names the run. */
struct CountWatch {
    gpumem_watchdog *wd = nullptr;
    CountWatch(uint64_t (*progress)(void *), void *ctx, const char *what, uint32_t stall_ms) {
        gpumem_watchdog_config w = gpumem_watchdog_config_make(what, stall_ms, progress, nullptr, nullptr, ctx);
        w.exit_code = 1;
        if (gpumem_watchdog_start(&w, &wd) != GPUMEM_OK) exit(1);
    }
    ~CountWatch() { gpumem_watchdog_finish(wd); }
};

/* A watchdog on a host-thread controller serving GPU clients. */
struct SwctlWatch {
    gpumem_watchdog *wd = nullptr;
    SwctlWatch(gpumem_swctl *c, const char *what, uint32_t stall_ms) {
        gpumem_watchdog_config w = gpumem_swctl_watchdog_config(c, what, stall_ms);
        w.exit_code = 1;
        if (gpumem_watchdog_start(&w, &wd) != GPUMEM_OK) exit(1);
    }
    ~SwctlWatch() { gpumem_watchdog_finish(wd); }
};
#endif
