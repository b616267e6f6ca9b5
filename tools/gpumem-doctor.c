/* gpumem-doctor: why this machine cannot run GPU-initiated storage, and how
 * to fix it (issue 33; the checks are gpumem_doctor.h's, docs/doctor.md).
 *
 *   build/gpumem-doctor [--path host|gpu-clients|gpu-controller|vfio|p2p|uring|all]
 *                       [--pci ADDR] [--gpu N] [--pairs N] [--depth N] [--io-kib N]
 *                       [--uid N] [--gid N] [--noiommu] [--open] [--root DIR] [--json]
 *
 * Exit status: 0 when no check of the path fails (warnings and checks not
 * run or not judged included: the last line says which; it says "every
 * check passes" only when each did), 1 when any fails, 2 for bad arguments, a malformed snapshot
 * file under --root, or a --snapshot that could not be written (then
 * nothing is printed on stdout). The host path runs the software controller
 * here: a write and a read back on one pair. --snapshot OUT.tgz also writes
 * what the checks read (gpumem_doctor_snapshot), for --root elsewhere. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpumem_doctor.h"
#include "gpumem_swctl.h"

/* What the build targets, from the Makefile (CUDA_ARCH, nvcc --version). */
#ifndef GPUMEM_DOCTOR_BUILD_ARCH
#define GPUMEM_DOCTOR_BUILD_ARCH 0
#endif
#ifndef GPUMEM_DOCTOR_BUILD_CUDA
#define GPUMEM_DOCTOR_BUILD_CUDA 0
#endif

static const char usage[] =
    "usage: gpumem-doctor [--path host|gpu-clients|gpu-controller|vfio|p2p|uring|all] [--pci ADDR] [--gpu N]\n"
    "                     [--pairs N] [--depth N] [--io-kib N] [--uid N] [--gid N] [--noiommu] [--open] [--root DIR]\n"
    "                     [--json] [--snapshot OUT.tgz]\n";

/* --help: every path and every option, one line each (docs/doctor.md has the checks). */
static const char help[] =
    "gpumem-doctor: why this machine cannot run GPU-initiated storage, and the fix for each finding\n"
    "\n"
    "paths (--path P; default all):\n"
    "  host            the software controller on host threads: a write and a read back on one queue pair\n"
    "  gpu-clients     GPU threads as clients of the host controller: the NVIDIA driver, the device, BAR1, ...\n"
    "  gpu-controller  the GPU-resident controller: as gpu-clients, and module loading must be eager\n"
    "  vfio            a real NVMe SSD from user space (VFIO, or uio): device, IOMMU, driver, group, memlock, BAR0\n"
    "  p2p             the SSD's DMA to GPU memory: the PCIe path between them, ACS, IOMMU, GPUDirect RDMA\n"
    "  uring           io_uring: kernel, io_uring_disabled, /dev/ngXnY for NVMe passthrough, nvme-fabrics\n"
    "  all             host, gpu-controller, vfio, p2p and uring, then one line per path: what runs here\n"
    "\n"
    "options:\n"
    "  --path P        one of the paths above\n"
    "  --pci ADDR      the SSD, as under /sys/bus/pci/devices (lspci -D); without it vfio and p2p list the\n"
    "                  NVMe controllers here and run nothing else\n"
    "  --gpu N         the CUDA device (default 0)\n"
    "  --pairs N       queue pairs the program will create (default 16): memlock and BAR1 are judged for them\n"
    "  --depth N       entries per pair (default 1024)\n"
    "  --io-kib N      the largest transfer of one command, KiB (default 128)\n"
    "  --uid N         the user who runs the program (default: this process's), for /dev/vfio/N, /dev/ngXnY,\n"
    "  --gid N         io_uring and memlock\n"
    "  --noiommu       the program will use vfio-pci in no-IOMMU mode\n"
    "  --open          vfio.open: open the controller once every other vfio check passes (it is reset)\n"
    "  --root DIR      read sys/, proc/, dev/ under DIR: a machine in a directory (a --snapshot unpacked)\n"
    "  --json          the report as JSON (schema gpumem-doctor/1)\n"
    "  --snapshot OUT.tgz  also write what the checks read, for --root on another machine\n"
    "  --help, -h      this text\n"
    "\n"
    "marks: \xE2\x9C\x93 pass, ! warn (works, at the cost named), ? not run or not judged (with why),\n"
    "\xE2\x9C\x97 fail (the path will not work until fixed). Exit status: 0 no check failed, 1 one did,\n"
    "2 bad arguments or a malformed snapshot file. More: docs/doctor.md.\n";

static int bad_args(const char *why, const char *arg) {
    fprintf(stderr, "gpumem-doctor: %s%s%s\n%s", why, arg ? ": " : "", arg ? arg : "", usage);
    return 2;
}

/* A whole decimal number in [lo, hi]. */
static int parse_number(const char *text, long lo, long hi, long *out) {
    char *end;
    long v;
    if (!text || !*text) return 0;
    v = strtol(text, &end, 10);
    if (*end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* The software controller on this machine: one pair, a write and a read
 * back, compared by content, and no protocol violation. */
static gpumem_status check_host(gpumem_doctor_report *rep) {
    gpumem_swctl_config cfg = gpumem_swctl_config_default();
    gpumem_swctl *ctl = NULL;
    gpumem_nvme_qp *qp = NULL;
    gpumem_nvme_cpl cpl;
    gpumem_swctl_stats stats;
    unsigned char out[4096], in[4096];
    gpumem_status st;
    const char *step = "create";
    char found[160];
    size_t i;
    for (i = 0; i < sizeof out; i++) out[i] = (unsigned char)(i * 7 + 3);
    memset(in, 0, sizeof in);
    memset(&stats, 0, sizeof stats);
    cfg.lba_bytes = 512;
    cfg.n_blocks = 1024;
    if ((st = gpumem_swctl_create(&cfg, &ctl)) != GPUMEM_OK) goto done;
    step = "add_qp";
    if ((st = gpumem_swctl_add_qp(ctl, 64, &qp)) != GPUMEM_OK) goto done;
    step = "start";
    if ((st = gpumem_swctl_start(ctl)) != GPUMEM_OK) goto done;
    step = "write";
    if ((st = gpumem_nvme_qp_write_buf(qp, 8, 8, out, &cpl)) != GPUMEM_OK) goto done;
    step = "read";
    if ((st = gpumem_nvme_qp_read_buf(qp, 8, 8, in, &cpl)) != GPUMEM_OK) goto done;
    step = "stop";
    if ((st = gpumem_swctl_stop(ctl)) != GPUMEM_OK) goto done;
    step = "stats";
    st = gpumem_swctl_get_stats(ctl, &stats);
done:
    if (ctl) gpumem_swctl_destroy(ctl);
    if (st != GPUMEM_OK)
        snprintf(found, sizeof found, "the software controller failed at %s: %s", step, gpumem_status_str(st));
    else if (memcmp(in, out, sizeof in) != 0 || stats.violations != 0)
        snprintf(found, sizeof found, "the software controller %s (%llu protocol violations)",
                 memcmp(in, out, sizeof in) ? "read back other data than was written" : "ran",
                 (unsigned long long)stats.violations);
    else
        return gpumem_doctor_add(rep, "host.swctl", GPUMEM_DOCTOR_PASS,
                                 "software controller: 4 KiB written and read back on one pair, no violation", "");
    return gpumem_doctor_add(rep, "host.swctl", GPUMEM_DOCTOR_FAIL, found,
                             "report it as a gpumem issue with this output (make test shows more)");
}

/* The last line of a path's report. A check not run or not judged is never
 * counted as passing (issue 45): "every check passes" only when each did. */
static void print_verdict(const gpumem_doctor_report *rep, const char *path) {
    size_t i, count[4] = {0, 0, 0, 0};
    for (i = 0; i < rep->n; i++) count[rep->findings[i].verdict]++;
    if (count[GPUMEM_DOCTOR_FAIL])
        printf("%s: FAIL (fix the lines marked \xE2\x9C\x97)", path);
    else if (count[GPUMEM_DOCTOR_SKIP])
        printf("%s: NOT A PASS: nothing failed, but checks were not run or not judged", path);
    else
        printf("%s: every check passes", path);
    if (count[GPUMEM_DOCTOR_SKIP]) printf("; %zu not run or not judged (marked ?)", count[GPUMEM_DOCTOR_SKIP]);
    if (count[GPUMEM_DOCTOR_WARN]) printf("; %zu with a warning (marked !)", count[GPUMEM_DOCTOR_WARN]);
    printf("\n");
}

/* What each path is for, and which findings judge it (their check names
 * start with `prefix`, or are exactly `check`). */
typedef struct path_summary {
    const char *name, *what, *prefix, *check;
} path_summary;
static const path_summary summaries[] = {
    {"host", "host threads drive queue pairs to the software controller (make demo)", "host.", NULL},
    {"uring files", "io_uring on files: gpumem_uring.h serving pairs from a regular file", NULL, "uring.disabled"},
    {"uring", "io_uring NVMe passthrough: an SSD the kernel keeps (/dev/ngXnY)", "uring.", NULL},
    {"gpu", "GPU threads drive the queue pairs (gpu-clients, gpu-controller)", "gpu.", NULL},
    {"vfio", "an NVMe SSD driven from user space (VFIO or uio)", "vfio.", NULL},
    {"p2p", "the SSD's DMA straight into GPU memory", "p2p.", NULL},
};

/* `all`'s last lines: one per path, what runs here and, for what does not,
 * the first finding that stops it, with its fix; then what GPU-initiated
 * storage (gpu, vfio and p2p together) lacks. */
static void print_summary(const gpumem_doctor_report *rep) {
    static const char *const marks[] = {"\xE2\x9C\x93", "?", "!", "\xE2\x9C\x97"};
    char lacks[512] = "";
    size_t k, i;
    printf("what runs here:\n");
    for (k = 0; k < sizeof summaries / sizeof summaries[0]; k++) {
        const path_summary *s = &summaries[k];
        const gpumem_doctor_finding *first = NULL;
        gpumem_doctor_verdict worst = GPUMEM_DOCTOR_PASS;
        for (i = 0; i < rep->n; i++) {
            const gpumem_doctor_finding *f = &rep->findings[i];
            if (s->prefix ? strncmp(f->check, s->prefix, strlen(s->prefix)) != 0 : strcmp(f->check, s->check) != 0)
                continue;
            if (!first || f->verdict > worst) first = f, worst = f->verdict;
        }
        if (!first) {
            printf("  ? %-12s %s: not checked\n", s->name, s->what);
            continue;
        }
        if (worst <= GPUMEM_DOCTOR_PASS || worst == GPUMEM_DOCTOR_WARN)
            printf("  %s %-12s %s: runs here%s\n", marks[worst], s->name, s->what,
                   worst == GPUMEM_DOCTOR_WARN ? " (with the warnings above)" : "");
        else
            printf("  %s %-12s %s: %s %s: %s%s%s\n", marks[worst], s->name, s->what,
                   worst == GPUMEM_DOCTOR_FAIL ? "does not run here," : "not judged here,", first->check, first->found,
                   first->fix[0] ? " -- fix: " : "", first->fix);
        if (worst == GPUMEM_DOCTOR_FAIL && (!strcmp(s->name, "gpu") || !strcmp(s->name, "vfio") || !strcmp(s->name, "p2p")))
            snprintf(lacks + strlen(lacks), sizeof lacks - strlen(lacks), "%s%s", lacks[0] ? ", " : "", first->check);
    }
    if (lacks[0])
        printf("GPU-initiated storage (gpu, vfio and p2p together) lacks here: %s (each fix above)\n", lacks);
    else
        printf("GPU-initiated storage (gpu, vfio and p2p together): nothing failed; see the lines marked ? and !\n");
}

int main(int argc, char **argv) {
    static const char *const paths[] = {"host", "gpu-clients", "gpu-controller", "vfio", "p2p", "uring", "all"};
    gpumem_doctor_config cfg = gpumem_doctor_config_default();
    gpumem_doctor_report rep;
    gpumem_doctor_record record;
    const char *path = "all", *snapshot = NULL;
    int json = 0, i, known = 0;
    gpumem_status st = GPUMEM_OK;
    long v;
    size_t k;
    struct stat sb;
    memset(&rep, 0, sizeof rep);
    memset(&record, 0, sizeof record);
    cfg.build_arch = GPUMEM_DOCTOR_BUILD_ARCH;
    cfg.build_cuda = GPUMEM_DOCTOR_BUILD_CUDA;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--noiommu")) cfg.noiommu = 1;
        else if (!strcmp(a, "--open")) cfg.open = 1; /* vfio.open: resets the controller */
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            fputs("\n", stdout);
            fputs(help, stdout);
            return 0;
        } else if (!next) return bad_args("missing value after", a);
        else if (!strcmp(a, "--path")) path = next, i++;
        else if (!strcmp(a, "--pci")) cfg.pci_addr = next, i++;
        else if (!strcmp(a, "--root")) cfg.root = next, i++;
        else if (!strcmp(a, "--snapshot")) snapshot = next, i++;
        else if (!strcmp(a, "--gpu") && parse_number(next, 0, 1023, &v)) cfg.gpu = (int)v, i++;
        else if (!strcmp(a, "--pairs") && parse_number(next, 1, 65535, &v)) cfg.pairs = (uint32_t)v, i++;
        else if (!strcmp(a, "--depth") && parse_number(next, 2, 65536, &v)) cfg.depth = (uint32_t)v, i++;
        else if (!strcmp(a, "--io-kib") && parse_number(next, 4, 1 << 20, &v)) cfg.io_bytes = (uint32_t)v << 10, i++;
        else if (!strcmp(a, "--uid") && parse_number(next, 0, 0x7FFFFFFF, &v)) cfg.uid = gpumem_doctor_id((uint32_t)v), i++;
        else if (!strcmp(a, "--gid") && parse_number(next, 0, 0x7FFFFFFF, &v)) cfg.gid = gpumem_doctor_id((uint32_t)v), i++;
        else return bad_args("unknown option or bad value", a);
    }
    for (k = 0; k < sizeof paths / sizeof paths[0]; k++) known |= !strcmp(path, paths[k]);
    if (!known) return bad_args("unknown --path", path);
    if (cfg.root && stat(cfg.root, &sb) != 0) return bad_args("no such --root directory", cfg.root);

    if (snapshot) cfg.record = &record;
#define WANT(name) (!strcmp(path, name) || !strcmp(path, "all"))
    if (st == GPUMEM_OK && WANT("host")) st = check_host(&rep);
    if (st == GPUMEM_OK && !strcmp(path, "gpu-clients")) st = gpumem_doctor_gpu(&cfg, 0, &rep);
    if (st == GPUMEM_OK && WANT("gpu-controller")) st = gpumem_doctor_gpu(&cfg, 1, &rep);
    if (st == GPUMEM_OK && WANT("vfio")) st = gpumem_doctor_ssd(&cfg, &rep);
    if (st == GPUMEM_OK && WANT("p2p")) st = gpumem_doctor_p2p(&cfg, &rep);
    if (st == GPUMEM_OK && WANT("uring")) st = gpumem_doctor_uring(&cfg, &rep);
#undef WANT
    if (st == GPUMEM_OK && snapshot) st = gpumem_doctor_snapshot(&cfg, snapshot, &rep);
    gpumem_doctor_record_free(&record);
    if (st != GPUMEM_OK) {
        fprintf(stderr, "gpumem-doctor: %s\n", rep.error[0] ? rep.error : gpumem_status_str(st));
        gpumem_doctor_report_free(&rep);
        return 2;
    }
    if (json) gpumem_doctor_print_json(&rep, path, cfg.root, stdout);
    else gpumem_doctor_print(&rep, stdout);
    i = gpumem_doctor_worst(&rep) == GPUMEM_DOCTOR_FAIL;
    if (!json && !strcmp(path, "all")) print_summary(&rep);
    if (!json) print_verdict(&rep, path);
    gpumem_doctor_report_free(&rep);
    return i;
}
