// Watchdogs for the CUDA tests, benchmarks and examples: GpuctlWatch on a
// GPU-resident controller, SwctlWatch on a host-thread one, CountWatch on any
// progress count. When the progress count stops moving for stall_ms, the
// watchdog prints every pair's client and controller state, stops the
// controller and ends the process with status 1, naming what stalled
// (gpumem_watchdog). While one lives, its stop and report hooks are also
// registered with abort_run (cuda_check.h), so that a wait_stream deadline or
// a failed CUDA call stops the controller before the process ends.
//
// Lifetime: make a watch after what it watches exists and destroy it (which
// stops and joins its thread) before that is freed or destroyed: the thread
// reads the controller's memory. A scope inside the controller's life, or
// new/delete around the run, never a watch that outlives its controller.
// Include after gpumem_nvme.h, in the file that defines GPUMEM_IMPLEMENTATION.
#ifndef GPUMEM_TEST_CUDA_WATCH_H
#define GPUMEM_TEST_CUDA_WATCH_H
#include <stdlib.h>
#include <string.h>
#include "gpumem_swctl.h"
#include "cuda_check.h"

/* The watchdog thread and the abort hook, for the life of the object. */
class Watch {
    gpumem_watchdog_config cfg_;
    gpumem_watchdog *wd_ = nullptr;
    AbortScope *hook_ = nullptr;

  protected:
    void begin(const gpumem_watchdog_config &c) {
        cfg_ = c;
        cfg_.exit_code = 1;
        if (gpumem_watchdog_start(&cfg_, &wd_) != GPUMEM_OK) {
            fprintf(stderr, "watchdog for %s: could not start\n", cfg_.what);
            abort_run("watchdog");
        }
        hook_ = new AbortScope(cfg_.stop, cfg_.report, cfg_.ctx);
    }
    Watch() = default;

  public:
    ~Watch() {
        delete hook_;
        gpumem_watchdog_finish(wd_); // joins the thread: nothing reads the controller after this
    }
    Watch(const Watch &) = delete;
    Watch &operator=(const Watch &) = delete;
};

/* A running GPU-resident controller: the progress count is its command count
 * (copied from GPU memory on a stream of its own); on a stall, its stop word
 * is set and every pair's client and controller state printed. */
class GpuctlWatch : public Watch {
    const gpumem_swctl_gpu *ctl_;
    const gpumem_swctl_gpu_desc *desc_;
    static uint64_t progress(void *p) {
        gpumem_target_stats s;
        return gpumem_swctl_gpu_get_stats_cuda(((GpuctlWatch *)p)->ctl_, &s) == GPUMEM_OK ? s.commands : 0;
    }
    static void stop(void *p) { gpumem_swctl_gpu_stop(((GpuctlWatch *)p)->desc_); }
    static size_t report(void *p, char *buf, size_t n) {
#if !defined(__CUDA_ARCH__) /* host code; the report exists in the host pass */
        return gpumem_swctl_gpu_report_cuda(((GpuctlWatch *)p)->ctl_, buf, n, 0);
#else
        return (void)p, (void)buf, n;
#endif
    }

  public:
    GpuctlWatch(const gpumem_swctl_gpu *c, const gpumem_swctl_gpu_desc *d, const char *what, uint32_t stall_ms)
        : ctl_(c), desc_(d) {
        begin(gpumem_watchdog_config_make(what, stall_ms, progress, stop, report, this));
    }
};

/* A watchdog on any progress count (a scripted controller's completions
 * posted): no controller to stop, no state to print; it names the run. */
class CountWatch : public Watch {
  public:
    CountWatch(uint64_t (*progress)(void *), void *ctx, const char *what, uint32_t stall_ms) {
        begin(gpumem_watchdog_config_make(what, stall_ms, progress, nullptr, nullptr, ctx));
    }
};

/* A watchdog on a host-thread controller serving GPU clients. */
class SwctlWatch : public Watch {
  public:
    SwctlWatch(gpumem_swctl *c, const char *what, uint32_t stall_ms) {
        begin(gpumem_swctl_watchdog_config(c, what, stall_ms));
    }
};
#endif
