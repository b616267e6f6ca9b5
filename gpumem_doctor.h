/* SPDX-License-Identifier: MIT
 * Copyright (c) 2026 The gpumem authors. gpumem is free software under the
 * MIT license: use, copy, modify and vendor it, keeping this notice; it comes
 * with no warranty. Full text: the LICENSE file that comes with gpumem. */
/* gpumem_doctor.h - why this machine cannot run GPU-initiated storage, and
 * what to change (host only, Linux, optional).
 *
 * Each check returns findings: a verdict (pass, warn, fail, skip), what was
 * found, and the fix in words a user can act on, with the exact command
 * where there is one. The checks only read: sysfs, procfs, /dev, and the
 * CUDA driver and NVML, which are loaded at run time (dlopen), so that a
 * program with the doctor builds and runs on a machine without them and says
 * "no NVIDIA driver" there. build/gpumem-doctor (tools/gpumem-doctor.c,
 * `make doctor`) prints them; docs/doctor.md lists every check.
 *
 * USAGE
 *   #define _POSIX_C_SOURCE 200809L
 *   #define GPUMEM_IMPLEMENTATION           // in exactly one .c file
 *   #include "gpumem_doctor.h"              // link with -ldl before glibc 2.34
 *
 *   gpumem_doctor_config cfg = gpumem_doctor_config_default();
 *   cfg.pci_addr = "0000:65:00.0";          // the SSD, as under /sys/bus/pci/devices
 *   cfg.pairs = 32;                         // what the program will ask for
 *   gpumem_doctor_report rep = {0};
 *   gpumem_doctor_ssd(&cfg, &rep);          // the SSD through VFIO or uio
 *   gpumem_doctor_gpu(&cfg, 1, &rep);       // the GPU, for a GPU-resident controller
 *   gpumem_doctor_print(&rep, stdout);      // or gpumem_doctor_print_json
 *   int failed = gpumem_doctor_worst(&rep) == GPUMEM_DOCTOR_FAIL;   // a path that will not work
 *   gpumem_doctor_report_free(&rep);
 *
 * A check function returns GPUMEM_OK once it has added its findings (a
 * failing machine is a finding, not an error); another status means it
 * could not judge: GPUMEM_EINVAL for a malformed snapshot file, with the
 * file, line and what was expected in rep.error; GPUMEM_ENOMEM.
 *
 * A FAKE MACHINE: cfg.root ("/" by default) is where sys/, proc/ and dev/
 * are read, so that a test, or a user sending the state of their machine,
 * can describe one in a directory. Under any root other than "/" the CUDA
 * driver and NVML are not asked (they would describe this machine); what
 * they would say is read from ROOT/gpumem-doctor/cuda instead, one
 * `key=value` a line (docs/doctor.md lists the keys); without that file and
 * without ROOT/proc/driver/nvidia/version the machine has no NVIDIA driver.
 *
 * The user: checks of permissions (/dev/vfio/N, /dev/ngXnY, io_uring) judge
 * for cfg.uid and cfg.gid, this process's by default, so that root can ask
 * on behalf of the user who will run the program. The memlock limit is read
 * from ROOT/proc/self/limits: run the doctor the way the program runs
 * (same shell, same service unit), and its environment (CUDA_MODULE_LOADING)
 * is the program's too.
 */
#ifndef GPUMEM_DOCTOR_H
#define GPUMEM_DOCTOR_H

#include "gpumem_nvmectl.h" /* the shim, for vfio.open; through it gpumem_nvme.h: ring entry sizes, PRP-list bytes */

#if !defined(GPUMEM_NO_HOST_SHIM) && defined(__linux__) && !GPUMEM_ON_DEVICE

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ordered by severity: gpumem_doctor_worst returns the highest. */
typedef enum gpumem_doctor_verdict {
    GPUMEM_DOCTOR_PASS = 0,
    GPUMEM_DOCTOR_SKIP = 1, /* could not be judged here (not asked, no permission to read) */
    GPUMEM_DOCTOR_WARN = 2, /* works, at a cost the text names */
    GPUMEM_DOCTOR_FAIL = 3  /* the path will not work until the fix is applied */
} gpumem_doctor_verdict;

typedef struct gpumem_doctor_finding {
    char check[32];  /* stable name, "vfio.driver" (docs/doctor.md) */
    gpumem_doctor_verdict verdict;
    char found[400]; /* what was found */
    char fix[480];   /* what to do; "" when nothing is to be done */
} gpumem_doctor_finding;

typedef struct gpumem_doctor_report {
    gpumem_doctor_finding *findings;
    size_t n, capacity_;
    char error[320]; /* why a check function returned a status other than GPUMEM_OK */
} gpumem_doctor_report;

/* Zero means default in every field (docs/headers.md);
 * gpumem_doctor_config_resolved shows the values a config stands for. */
typedef struct gpumem_doctor_config {
    const char *root;      /* where sys/, proc/, dev/ are; "/" (default, or NULL) is this machine */
    const char *pci_addr;  /* the SSD, "0000:65:00.0"; NULL: SSD checks are skipped */
    int gpu;               /* CUDA device ordinal (default 0) */
    uint32_t pairs;        /* I/O queue pairs the program will create (default 16) */
    uint32_t depth;        /* entries per pair (default 1024) */
    uint32_t io_bytes;     /* largest transfer of one command (default 128 KiB) */
    uint32_t uid, gid;     /* the user who runs the program; 0 (default): this process's effective ids.
                              For root (id 0) give GPUMEM_DOCTOR_ROOT_ID */
    int noiommu;           /* 1: the program will use vfio-pci in no-IOMMU mode */
    int open;              /* 1: vfio.open opens the controller when every other vfio check passes (it is
                              reset, then Identify read, then shut down); root "/" only. 0 (default): skipped */
    int build_arch;        /* compute capability the build targets, x10 (90 for sm_90); 0: unknown */
    int build_cuda;        /* CUDA version the build needs, 1000 * major + 10 * minor; 0: unknown */
    const char *cuda_lib;  /* dlopen names (NULL: libcuda.so.1, libnvidia-ml.so.1) */
    const char *nvml_lib;
    struct gpumem_doctor_record *record; /* NULL (default); or where the checks note every path they read and what
                                            the live driver said, for gpumem_doctor_snapshot */
} gpumem_doctor_config;

/* uid or gid: root's (0), where 0 itself means "this process's". */
#define GPUMEM_DOCTOR_ROOT_ID 0xFFFFFFFEu
/* A user or group id as a config takes it: id, or GPUMEM_DOCTOR_ROOT_ID for 0. */
uint32_t gpumem_doctor_id(uint32_t id);

/* What the CUDA driver and NVML say about one GPU (or a snapshot says they
 * said). Integers are -1 where unknown, sizes 0. */
typedef struct gpumem_doctor_gpu_facts {
    int driver;               /* 1: an NVIDIA driver is there */
    char why_not[200];        /* when driver is 0: what failed */
    char driver_version[32];  /* "570.86.15" */
    int cuda_version;         /* the newest CUDA the driver supports, 1000 * major + 10 * minor */
    int devices;              /* CUDA devices */
    char name[96];
    char pci[32];             /* "0000:17:00.0" */
    int cc_major, cc_minor;
    int lazy;                 /* module loading: 1 lazy, 0 eager */
    int host_atomics;         /* CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED */
    int pageable;             /* CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS */
    int compute_mode;         /* 0 default, 2 prohibited, 3 exclusive process */
    int rdma;                 /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED */
    int mig;                  /* MIG mode on */
    int persistence;          /* persistence mode on */
    uint64_t bar1_total, bar1_free;
} gpumem_doctor_gpu_facts;

/* What checks read (cfg.record): zero it, run the checks, then
 * gpumem_doctor_snapshot writes it, gpumem_doctor_record_free frees it. */
typedef struct gpumem_doctor_record {
    char **paths_;                   /* relative to the root; the first byte says how it was read */
    size_t n_, capacity_;
    int lost_;                       /* a path could not be kept (no memory): the snapshot would be short */
    int have_facts_;                 /* root "/": what the CUDA driver and NVML said */
    gpumem_doctor_gpu_facts facts_;
} gpumem_doctor_record;

/* A zeroed config resolved. */
gpumem_doctor_config gpumem_doctor_config_default(void);
/* The config with its defaults filled in: what every check uses (NULL: the
 * zeroed config). uid and gid come out as numbers, GPUMEM_DOCTOR_ROOT_ID
 * as it is (so that resolving again changes nothing). */
gpumem_doctor_config gpumem_doctor_config_resolved(const gpumem_doctor_config *in);
const char *gpumem_doctor_verdict_str(gpumem_doctor_verdict v); /* "pass", "warn", "fail", "skip" */

/* The SSD for the user-space shim (vfio path): device and class code,
 * driver, IOMMU state, IOMMU group, /dev/vfio/N, memlock, no-IOMMU mode,
 * huge pages, BAR0; then, where cfg->open asks and nothing above fails,
 * the shim opens the controller (vfio.open: MDTS, queue entries and the
 * pairs granted, against what cfg asks for). */
gpumem_status gpumem_doctor_ssd(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep);
/* The GPU: driver, CUDA version, device and compute capability, module
 * loading (judged for a persistent GPU-resident controller when
 * gpu_controller is 1), host atomics, pageable access, BAR1, MIG, compute and
 * persistence modes. */
gpumem_status gpumem_doctor_gpu(const gpumem_doctor_config *cfg, int gpu_controller, gpumem_doctor_report *rep);
/* GPU memory as the SSD's DMA target: PCI path, ACS redirect on the bridges
 * between them, the IOMMU, GPUDirect RDMA and the kernel's support. */
gpumem_status gpumem_doctor_p2p(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep);
/* The kernel path (io_uring NVMe passthrough): kernel version,
 * io_uring_disabled, /dev/ngXnY, nvme-fabrics. */
gpumem_status gpumem_doctor_uring(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep);

/* The facts gpumem_doctor_gpu judges: from the driver under root "/", from
 * ROOT/gpumem-doctor/cuda otherwise (GPUMEM_EINVAL, rep->error, when that
 * file is malformed; rep may be NULL, then the reason is lost). */
gpumem_status gpumem_doctor_gpu_probe(const gpumem_doctor_config *cfg, gpumem_doctor_gpu_facts *out,
                                      gpumem_doctor_report *rep);

/* Add a finding of the caller's own (a runtime's check). */
gpumem_status gpumem_doctor_add(gpumem_doctor_report *rep, const char *check, gpumem_doctor_verdict v,
                                const char *found, const char *fix);
gpumem_doctor_verdict gpumem_doctor_worst(const gpumem_doctor_report *rep);
/* One line a finding: a mark (pass ✓, fail ✗, warn !, skip ?), the check,
 * what was found, and "fix:" with the fix. */
void gpumem_doctor_print(const gpumem_doctor_report *rep, FILE *out);
/* The same as one JSON object, schema "gpumem-doctor/1" (docs/doctor.md). */
void gpumem_doctor_print_json(const gpumem_doctor_report *rep, const char *path, const char *root, FILE *out);
void gpumem_doctor_report_free(gpumem_doctor_report *rep);

/* A SNAPSHOT of what the checks read, for someone else to judge with
 * --root: with cfg->record set while the checks ran, writes OUT (a .tgz:
 * gzip'd ustar, unpacked by any tar) holding those files under the same
 * names as under cfg->root, symbolic links as links (made relative),
 * device files as empty files, the owner and mode of those whose owner a
 * check judges in gpumem-doctor/owners, and what the live CUDA driver and
 * NVML said in gpumem-doctor/cuda. Nothing else: of /proc/cmdline only the
 * words naming the IOMMU, of /dev only the ng* names. `--root DIR` on the
 * unpacked snapshot reproduces the verdicts, except vfio.open (never tried
 * under a root) and host.swctl (run wherever the doctor runs). OUT appears
 * whole or not at all (a temporary file beside it, then rename); mode 0600.
 * GPUMEM_ESYS or GPUMEM_ENOMEM with rep->error on failure. */
gpumem_status gpumem_doctor_snapshot(const gpumem_doctor_config *cfg, const char *out_tgz, gpumem_doctor_report *rep);
void gpumem_doctor_record_free(gpumem_doctor_record *rec);

#ifdef __cplusplus
}
#endif

#if defined(GPUMEM_IMPLEMENTATION)

#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(__cplusplus)
#error "gpumem doctor: define _POSIX_C_SOURCE 200809L before the first #include (see gpumem_doctor.h)"
#endif

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- report ------------------------------------------------------------- */

gpumem_doctor_config gpumem_doctor_config_default(void) { return gpumem_doctor_config_resolved(NULL); }

uint32_t gpumem_doctor_id(uint32_t id) { return id ? id : GPUMEM_DOCTOR_ROOT_ID; }

gpumem_doctor_config gpumem_doctor_config_resolved(const gpumem_doctor_config *in) {
    gpumem_doctor_config c;
    memset(&c, 0, sizeof c);
    if (in) c = *in;
    if (!c.root || !c.root[0]) c.root = "/";
    if (!c.pairs) c.pairs = 16;
    if (!c.depth) c.depth = 1024;
    if (!c.io_bytes) c.io_bytes = 128u << 10;
    if (!c.uid) c.uid = (uint32_t)geteuid();
    if (!c.gid) c.gid = (uint32_t)getegid();
    return c;
}

/* Each public check runs on the resolved config (zero means default);
 * the internal steps take it as resolved. */
#define GPUMEM__DOCTOR_RESOLVE(cfg)                                                 \
    gpumem_doctor_config cfg##_resolved = gpumem_doctor_config_resolved(cfg); \
    cfg = &cfg##_resolved

/* A resolved config's ids as numbers (GPUMEM_DOCTOR_ROOT_ID: 0). */
static uint32_t gpumem__doctor_uid(const gpumem_doctor_config *cfg) {
    return cfg->uid == GPUMEM_DOCTOR_ROOT_ID ? 0 : cfg->uid;
}

static uint32_t gpumem__doctor_gid(const gpumem_doctor_config *cfg) {
    return cfg->gid == GPUMEM_DOCTOR_ROOT_ID ? 0 : cfg->gid;
}

const char *gpumem_doctor_verdict_str(gpumem_doctor_verdict v) {
    switch (v) {
    case GPUMEM_DOCTOR_PASS: return "pass";
    case GPUMEM_DOCTOR_SKIP: return "skip";
    case GPUMEM_DOCTOR_WARN: return "warn";
    case GPUMEM_DOCTOR_FAIL: return "fail";
    }
    return "?";
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: shortest
 * form, no surrogates, at most U+10FFFF), or 0 when the bytes there are
 * none. s is NUL terminated: a continuation test fails at the NUL, so no
 * byte past it is read. */
static size_t gpumem__doctor_utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF; /* no overlong form, no surrogate */
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF; /* no overlong form, <= U+10FFFF */
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* Where to cut s[0..n) so that no UTF-8 sequence is left half (a name cut
 * to fit a field, a message cut by vsnprintf): n, or the start of the
 * sequence that n would split. Bytes that were never UTF-8 stay as they
 * are; the JSON writer replaces them. */
static size_t gpumem__doctor_utf8_cut(const char *s, size_t n) {
    size_t j = n, need;
    unsigned lead;
    while (j > 0 && n - j < 3 && ((unsigned char)s[j - 1] & 0xC0) == 0x80) j--;
    if (j == 0) return n;
    lead = (unsigned char)s[j - 1];
    need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return n - (j - 1) < need ? j - 1 : n;
}

static void gpumem__doctor_copy(char *dst, size_t bytes, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n >= bytes) n = gpumem__doctor_utf8_cut(src, bytes - 1);
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
}

gpumem_status gpumem_doctor_add(gpumem_doctor_report *rep, const char *check, gpumem_doctor_verdict v,
                                const char *found, const char *fix) {
    gpumem_doctor_finding *f;
    if (!rep || !check) return GPUMEM_ENULL;
    if (rep->n == rep->capacity_) {
        size_t cap = rep->capacity_ ? rep->capacity_ * 2 : 16;
        gpumem_doctor_finding *grown = (gpumem_doctor_finding *)GPUMEM_MALLOC(cap * sizeof *grown);
        if (!grown) return GPUMEM_ENOMEM;
        if (rep->n) memcpy(grown, rep->findings, rep->n * sizeof *grown);
        GPUMEM_FREE(rep->findings);
        rep->findings = grown;
        rep->capacity_ = cap;
    }
    f = &rep->findings[rep->n++];
    gpumem__doctor_copy(f->check, sizeof f->check, check);
    f->verdict = v;
    gpumem__doctor_copy(f->found, sizeof f->found, found);
    gpumem__doctor_copy(f->fix, sizeof f->fix, fix);
    return GPUMEM_OK;
}

/* A finding with printf-style text: `found` and `fix` are formatted from the
 * same argument list, fix first, so that a command can name what was found
 * (fix may be "" or use none of the arguments). Checks call this. */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static gpumem_status gpumem__doctor_say(gpumem_doctor_report *rep, const char *check, gpumem_doctor_verdict v,
                                        const char *fix, const char *found, ...) {
    char found_text[sizeof(((gpumem_doctor_finding *)0)->found)];
    va_list ap;
    int n;
    va_start(ap, found);
    n = vsnprintf(found_text, sizeof found_text, found, ap);
    va_end(ap);
    if (n >= (int)sizeof found_text) /* cut: not inside a character of a name it holds */
        found_text[gpumem__doctor_utf8_cut(found_text, sizeof found_text - 1)] = 0;
    return gpumem_doctor_add(rep, check, v, found_text, fix);
}

gpumem_doctor_verdict gpumem_doctor_worst(const gpumem_doctor_report *rep) {
    gpumem_doctor_verdict w = GPUMEM_DOCTOR_PASS;
    size_t i;
    for (i = 0; rep && i < rep->n; i++)
        if (rep->findings[i].verdict > w) w = rep->findings[i].verdict;
    return w;
}

void gpumem_doctor_print(const gpumem_doctor_report *rep, FILE *out) {
    static const char *const mark[] = {"\xE2\x9C\x93", "?", "!", "\xE2\x9C\x97"}; /* ✓ ? ! ✗ */
    size_t i;
    if (!out) return; /* nowhere to print (the generated NULL table, issue 30) */
    for (i = 0; rep && i < rep->n; i++) {
        const gpumem_doctor_finding *f = &rep->findings[i];
        fprintf(out, "%s %-18s %s%s%s\n", mark[f->verdict], f->check, f->found, f->fix[0] ? " -- fix: " : "",
                f->fix);
    }
}

/* A JSON string (RFC 8259): control characters escaped, well-formed UTF-8
 * passed through, and every byte that is not part of one replaced by
 * U+FFFD. What the checks found comes from sysfs, procfs, a snapshot or a
 * driver's message, in whatever bytes they hold (a device name in Latin-1,
 * a name cut to its field): passed through, one such byte made the whole
 * output something no JSON parser reads. */
static void gpumem__doctor_json_string(FILE *out, const char *s) {
    fputc('"', out);
    while (s && *s) {
        unsigned char c = (unsigned char)*s;
        size_t n = gpumem__doctor_utf8_len((const unsigned char *)s);
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else if (n == 0) fputs("\\ufffd", out);
        else fwrite(s, 1, n, out);
        s += n ? n : 1;
    }
    fputc('"', out);
}

void gpumem_doctor_print_json(const gpumem_doctor_report *rep, const char *path, const char *root, FILE *out) {
    size_t i;
    if (!out) return; /* nowhere to print (the generated NULL table, issue 30) */
    fprintf(out, "{\n  \"schema\": \"gpumem-doctor/1\",\n  \"gpumem\": \"%s\",\n  \"path\": ", GPUMEM_VERSION_STRING);
    gpumem__doctor_json_string(out, path ? path : "");
    fputs(",\n  \"root\": ", out);
    gpumem__doctor_json_string(out, root ? root : "/");
    fprintf(out, ",\n  \"verdict\": \"%s\",\n  \"findings\": [", gpumem_doctor_verdict_str(gpumem_doctor_worst(rep)));
    for (i = 0; rep && i < rep->n; i++) {
        const gpumem_doctor_finding *f = &rep->findings[i];
        fprintf(out, "%s\n    {\"check\": ", i ? "," : "");
        gpumem__doctor_json_string(out, f->check);
        fprintf(out, ", \"verdict\": \"%s\", \"found\": ", gpumem_doctor_verdict_str(f->verdict));
        gpumem__doctor_json_string(out, f->found);
        fputs(", \"fix\": ", out);
        gpumem__doctor_json_string(out, f->fix);
        fputc('}', out);
    }
    fputs(rep && rep->n ? "\n  ]\n}\n" : "]\n}\n", out);
}

void gpumem_doctor_report_free(gpumem_doctor_report *rep) {
    if (!rep) return;
    GPUMEM_FREE(rep->findings);
    rep->findings = NULL;
    rep->n = rep->capacity_ = 0;
}

/* ---- reading the machine, under cfg->root --------------------------------- */

/* How much of a path made by gpumem__doctor_path is the root: "dir/" is
 * "dir", and "/" is "" (the paths below it start with '/'). */
static size_t gpumem__doctor_root_len(const gpumem_doctor_config *cfg) {
    const char *root = cfg->root && cfg->root[0] ? cfg->root : "/";
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    return n == 1 && root[0] == '/' ? 0 : n;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void gpumem__doctor_path(const gpumem_doctor_config *cfg, char *out, size_t bytes, const char *fmt, ...) {
    size_t n = gpumem__doctor_root_len(cfg);
    va_list ap;
    if (n >= bytes) n = bytes - 1;
    memcpy(out, cfg->root, n);
    va_start(ap, fmt);
    vsnprintf(out + n, bytes - n, fmt, ap);
    va_end(ap);
}

static int gpumem__doctor_live(const gpumem_doctor_config *cfg) {
    return !cfg->root || !cfg->root[0] || strcmp(cfg->root, "/") == 0;
}

/* How a check read a path (the first byte of a recorded path). */
enum {
    GPUMEM__DOCTOR_FILE = 'F',    /* its content */
    GPUMEM__DOCTOR_LINK = 'L',    /* the symbolic link itself (readlink) */
    GPUMEM__DOCTOR_STAT = 'S',    /* whether it exists */
    GPUMEM__DOCTOR_OWNER = 'O',   /* its owner, group and mode */
    GPUMEM__DOCTOR_LIST = 'D',    /* the names in a directory */
    GPUMEM__DOCTOR_LIST_NG = 'N'  /* the ng* names in a directory */
};

/* Note a path a check reads, for a snapshot (cfg->record; once each). */
static void gpumem__doctor_note(const gpumem_doctor_config *cfg, const char *path, char kind) {
    gpumem_doctor_record *rec = cfg->record;
    const char *rel = path + gpumem__doctor_root_len(cfg);
    size_t i, n;
    char *copy;
    if (!rec) return;
    while (*rel == '/') rel++;
    for (i = 0; i < rec->n_; i++)
        if (rec->paths_[i][0] == kind && !strcmp(rec->paths_[i] + 1, rel)) return;
    if (rec->n_ == rec->capacity_) {
        size_t cap = rec->capacity_ ? rec->capacity_ * 2 : 64;
        char **grown = (char **)GPUMEM_MALLOC(cap * sizeof *grown);
        if (!grown) {
            rec->lost_ = 1;
            return;
        }
        if (rec->n_) memcpy(grown, rec->paths_, rec->n_ * sizeof *grown);
        GPUMEM_FREE(rec->paths_);
        rec->paths_ = grown;
        rec->capacity_ = cap;
    }
    n = strlen(rel);
    if (!(copy = (char *)GPUMEM_MALLOC(n + 2))) {
        rec->lost_ = 1;
        return;
    }
    copy[0] = kind;
    memcpy(copy + 1, rel, n + 1);
    rec->paths_[rec->n_++] = copy;
}

void gpumem_doctor_record_free(gpumem_doctor_record *rec) {
    size_t i;
    if (!rec) return;
    for (i = 0; i < rec->n_; i++) GPUMEM_FREE(rec->paths_[i]);
    GPUMEM_FREE(rec->paths_);
    memset(rec, 0, sizeof *rec);
}

static FILE *gpumem__doctor_fopen(const gpumem_doctor_config *cfg, const char *path, const char *mode) {
    gpumem__doctor_note(cfg, path, GPUMEM__DOCTOR_FILE);
    return fopen(path, mode);
}

/* readlink, NUL terminated (at most bytes - 1); its length, or -1. */
static ssize_t gpumem__doctor_readlink(const gpumem_doctor_config *cfg, const char *path, char *out, size_t bytes) {
    ssize_t n;
    gpumem__doctor_note(cfg, path, GPUMEM__DOCTOR_LINK);
    n = readlink(path, out, bytes - 1);
    out[n > 0 ? n : 0] = 0;
    return n;
}

/* The next line of one of the doctor's own files (gpumem-doctor/cuda and
 * owners) into line, without its end ("\n", or "\r\n"): 1; 0 at the end;
 * -1 for a line holding a NUL byte or longer than bytes - 1, with `why`.
 * Not fgets: a NUL ended the line for the parser and the rest was taken
 * unread, a long line's rest was read as the next line (a message naming
 * the wrong one), and a carriage return anywhere cut the value there. */
static int gpumem__doctor_own_line(FILE *f, char *line, size_t bytes, char *why, size_t why_bytes) {
    size_t n = 0;
    int c = getc(f);
    if (c == EOF) return 0;
    for (; c != EOF && c != '\n'; c = getc(f)) {
        if (c == 0 || n + 1 == bytes) {
            if (c == 0) snprintf(why, why_bytes, "a NUL byte at column %zu", n + 1);
            else snprintf(why, why_bytes, "a line of more than %zu bytes", bytes - 1);
            return -1;
        }
        line[n++] = (char)c;
    }
    if (n && line[n - 1] == '\r') n--;
    line[n] = 0;
    return 1;
}

/* PATH in an owners line: a byte that is white space, a control character
 * or a backslash is written \ooo (three octal digits, as /proc/mounts
 * writes a mount point with a space), so that every name a directory can
 * hold is one word of the line; a snapshot of a /dev entry named with a
 * space could not be read back before. Decoded in place. */
static void gpumem__doctor_owner_escape(const char *in, char *out, size_t bytes) {
    size_t o = 0;
    for (; *in && o + 5 < bytes; in++) {
        unsigned char c = (unsigned char)*in;
        if (c <= ' ' || c == '\\' || c == 0x7F) o += (size_t)snprintf(out + o, bytes - o, "\\%03o", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}
static void gpumem__doctor_owner_unescape(char *s) {
    char *o = s;
    for (; *s; s++)
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
            s += 3;
        } else
            *o++ = *s;
    *o = 0;
}

/* stat for a check that judges the owner (/dev/vfio/N, /dev/ngXnY): under a
 * root other than "/", ROOT/gpumem-doctor/owners (lines "PATH UID GID MODE",
 * PATH relative to the root, MODE octal) overrides the owner, group and
 * permission bits, which a snapshot unpacked by another user has lost.
 * 0 found, -1 no such file, -2 a malformed owners file (rep->error). */
static int gpumem__doctor_stat_owned(const gpumem_doctor_config *cfg, const char *path, struct stat *sb,
                                     gpumem_doctor_report *rep) {
    char owners[512], line[1400], name[1100];
    const char *rel = path + gpumem__doctor_root_len(cfg);
    unsigned uid, gid, mode;
    int lineno = 0, rc = 0;
    FILE *f;
    gpumem__doctor_note(cfg, path, GPUMEM__DOCTOR_OWNER);
    if (stat(path, sb) != 0) return -1;
    if (gpumem__doctor_live(cfg)) return 0;
    while (*rel == '/') rel++;
    gpumem__doctor_path(cfg, owners, sizeof owners, "/gpumem-doctor/owners");
    if (!(f = fopen(owners, "r"))) return 0;
    while (rc == 0) {
        char extra, why[64];
        int got = gpumem__doctor_own_line(f, line, sizeof line, why, sizeof why);
        if (got == 0) break;
        lineno++;
        if (got < 0) {
            if (rep)
                snprintf(rep->error, sizeof rep->error, "%.160s:%d: expected \"PATH UID GID MODE\" (mode octal), "
                         "found %s", owners, lineno, why);
            rc = -2;
            break;
        }
        if (!line[0] || line[0] == '#') continue;
        if (sscanf(line, "%1099s %u %u %o %c", name, &uid, &gid, &mode, &extra) != 4 || mode > 07777) {
            if (rep)
                snprintf(rep->error, sizeof rep->error, "%.160s:%d: expected \"PATH UID GID MODE\" (mode octal), "
                         "found \"%.60s\"", owners, lineno, line);
            rc = -2;
        } else if ((gpumem__doctor_owner_unescape(name), !strcmp(name, rel))) {
            sb->st_uid = (uid_t)uid;
            sb->st_gid = (gid_t)gid;
            sb->st_mode = (sb->st_mode & ~(mode_t)07777) | (mode_t)mode;
        }
    }
    fclose(f);
    return rc;
}

/* The first line of a small file, without its newline; 0 if unreadable. */
static int gpumem__doctor_read_line(const gpumem_doctor_config *cfg, const char *path, char *out, size_t bytes) {
    FILE *f = gpumem__doctor_fopen(cfg, path, "r");
    out[0] = 0;
    if (!f) return 0;
    if (!fgets(out, (int)bytes, f)) out[0] = 0;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    return 1;
}

/* The whole of a small file (at most bytes - 1), NUL terminated; its length or -1. */
static long gpumem__doctor_read_file(const gpumem_doctor_config *cfg, const char *path, char *out, size_t bytes) {
    FILE *f = gpumem__doctor_fopen(cfg, path, "rb");
    size_t n;
    out[0] = 0;
    if (!f) return -1;
    n = fread(out, 1, bytes - 1, f);
    fclose(f);
    out[n] = 0;
    return (long)n;
}

/* The last component of a symbolic link's target ("vfio-pci" for a driver link). */
static int gpumem__doctor_link_name(const gpumem_doctor_config *cfg, const char *path, char *out, size_t bytes) {
    char link[512];
    ssize_t n = gpumem__doctor_readlink(cfg, path, link, sizeof link);
    const char *name;
    out[0] = 0;
    if (n <= 0) return 0;
    link[n] = 0;
    name = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
    gpumem__doctor_copy(out, bytes, name);
    return 1;
}

static int gpumem__doctor_exists(const gpumem_doctor_config *cfg, const char *path) {
    struct stat sb;
    gpumem__doctor_note(cfg, path, GPUMEM__DOCTOR_STAT);
    return stat(path, &sb) == 0;
}

/* Entries of a directory, without . and .., in name order; caller frees
 * with gpumem__doctor_names_free. The _ng variant lists only what could be
 * a generic NVMe namespace device, "ng" names (a snapshot of /dev then
 * holds nothing else). */
static int gpumem__doctor_skip_dots(const struct dirent *e) { return e->d_name[0] != '.'; }
static int gpumem__doctor_only_ng(const struct dirent *e) { return strncmp(e->d_name, "ng", 2) == 0; }
static int gpumem__doctor_list(const gpumem_doctor_config *cfg, const char *dir, struct dirent ***out, int ng) {
    int n;
    gpumem__doctor_note(cfg, dir, ng ? GPUMEM__DOCTOR_LIST_NG : GPUMEM__DOCTOR_LIST);
    n = scandir(dir, out, ng ? gpumem__doctor_only_ng : gpumem__doctor_skip_dots, alphasort);
    if (n < 0) *out = NULL;
    return n < 0 ? 0 : n;
}
static void gpumem__doctor_names_free(struct dirent **names, int n) {
    int i;
    for (i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Read-write access for the configured user by mode bits (root always):
 * judged on the file's owner, group and mode, not by access(), so that the
 * answer is for gpumem__doctor_uid(cfg) and not for whoever runs the doctor. */
static int gpumem__doctor_user_rw(const gpumem_doctor_config *cfg, const struct stat *sb) {
    if (gpumem__doctor_uid(cfg) == 0) return 1;
    if ((uint32_t)sb->st_uid == gpumem__doctor_uid(cfg)) return (sb->st_mode & 0600) == 0600;
    if ((uint32_t)sb->st_gid == gpumem__doctor_gid(cfg)) return (sb->st_mode & 0060) == 0060;
    return (sb->st_mode & 0006) == 0006;
}

/* Size of a PCI device's BAR `bar` from sysfs `resource` (one "start end
 * flags" line per resource); 0 if absent. */
static uint64_t gpumem__doctor_bar_bytes(const gpumem_doctor_config *cfg, const char *pci, int bar) {
    char path[512], line[128];
    unsigned long long start = 0, end = 0, flags = 0;
    FILE *f;
    int i;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/resource", pci);
    if (!(f = gpumem__doctor_fopen(cfg, path, "r"))) return 0;
    for (i = 0; i <= bar; i++)
        if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
    if (sscanf(line, "%llx %llx %llx", &start, &end, &flags) != 3 || end <= start) return 0;
    return (uint64_t)(end - start + 1);
}

static void gpumem__doctor_bytes_str(uint64_t b, char *out, size_t bytes) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0) snprintf(out, bytes, "%llu GiB", (unsigned long long)(b >> 30));
    else if (b >= (1ull << 20)) snprintf(out, bytes, "%llu MiB", (unsigned long long)((b + (1ull << 20) - 1) >> 20));
    else snprintf(out, bytes, "%llu KiB", (unsigned long long)((b + 1023) >> 10));
}

/* A decimal number of at most `max` at *s (digits only: no sign, no
 * space), *s moved past it; 0 when there is none or it is larger. What
 * sysfs, procfs or a snapshot says is parsed with bounds: sscanf's %d on
 * "99999999999" is undefined behaviour, and so was the product it fed. */
static int gpumem__doctor_decimal(const char **s, long max, long *out) {
    const char *p = *s;
    long v = 0;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (*p - '0')) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    *s = p;
    *out = v;
    return 1;
}

/* Kernel release as major * 1000 + minor (6.1.0-18-amd64 is 6001); 0 if
 * unknown, or not MAJOR.MINOR with MINOR below 1000 (5.1019 would read as
 * 6.19) and MAJOR below 10^6 (the product fits an int). */
static int gpumem__doctor_kernel(const gpumem_doctor_config *cfg, char *release, size_t bytes) {
    char path[512];
    const char *p = release;
    long major, minor;
    gpumem__doctor_path(cfg, path, sizeof path, "/proc/sys/kernel/osrelease");
    if (!gpumem__doctor_read_line(cfg, path, release, bytes) || !gpumem__doctor_decimal(&p, 999999, &major) ||
        *p++ != '.' || !gpumem__doctor_decimal(&p, 999, &minor))
        return 0;
    return (int)(major * 1000 + minor);
}

/* ---- IOMMU ---------------------------------------------------------------- */

typedef enum { GPUMEM__IOMMU_OFF, GPUMEM__IOMMU_PASSTHROUGH, GPUMEM__IOMMU_TRANSLATING } gpumem__doctor_iommu;

/* How much of /proc/cmdline the IOMMU check reads (a kernel's command line
 * is at most 2048 bytes on x86 and arm64, 4096 on some others); a snapshot
 * keeps the words of exactly that much. */
#define GPUMEM__DOCTOR_CMDLINE_BYTES 4096

/* The IOMMU as a device sees it: its group's domain type where the device
 * has a group (identity: passthrough; DMA, DMA-FQ: translating), otherwise
 * from whether the machine has IOMMU groups at all and the kernel command
 * line. `why` says which of these decided. */
static gpumem__doctor_iommu gpumem__doctor_iommu_state(const gpumem_doctor_config *cfg, const char *pci,
                                                      char *group, size_t group_bytes, char *why, size_t why_bytes) {
    char path[512], type[64] = "", cmdline[GPUMEM__DOCTOR_CMDLINE_BYTES] = "";
    struct dirent **names;
    int n_groups, n_units;
    group[0] = 0;
    /* All of it, not its first line: a snapshot keeps the IOMMU words of
     * every line (gpumem__doctor_snap_content), so that --root on it reads
     * what this read. */
    gpumem__doctor_path(cfg, path, sizeof path, "/proc/cmdline");
    gpumem__doctor_read_file(cfg, path, cmdline, sizeof cmdline);
    if (pci) {
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/iommu_group", pci);
        gpumem__doctor_link_name(cfg, path, group, group_bytes);
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/iommu_group/type", pci);
        gpumem__doctor_read_line(cfg, path, type, sizeof type);
    }
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/kernel/iommu_groups");
    n_groups = gpumem__doctor_list(cfg, path, &names, 0);
    gpumem__doctor_names_free(names, n_groups);
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/class/iommu");
    n_units = gpumem__doctor_list(cfg, path, &names, 0);
    gpumem__doctor_names_free(names, n_units);
    if (type[0]) {
        snprintf(why, why_bytes, "IOMMU group %s, domain type %s", group, type);
        return strcmp(type, "identity") == 0 ? GPUMEM__IOMMU_PASSTHROUGH : GPUMEM__IOMMU_TRANSLATING;
    }
    if (n_groups == 0 || (pci && !group[0])) {
        snprintf(why, why_bytes, "%s; %d IOMMU unit(s) in /sys/class/iommu%s%s", n_groups ? "the device has no IOMMU group"
                                                                         : "no IOMMU groups",
                 n_units, strstr(cmdline, "iommu=off") ? "; the kernel command line turns it off" : "",
                 strstr(cmdline, "intel_iommu=off") || strstr(cmdline, "amd_iommu=off") ? " (..._iommu=off)" : "");
        return GPUMEM__IOMMU_OFF;
    }
    if (strstr(cmdline, "iommu=pt") || strstr(cmdline, "iommu.passthrough=1")) {
        snprintf(why, why_bytes, "%d IOMMU groups; the kernel command line asks for passthrough", n_groups);
        return GPUMEM__IOMMU_PASSTHROUGH;
    }
    snprintf(why, why_bytes, "%d IOMMU groups, no passthrough on the kernel command line", n_groups);
    return GPUMEM__IOMMU_TRANSLATING;
}

static const char *gpumem__doctor_iommu_str(gpumem__doctor_iommu s) {
    return s == GPUMEM__IOMMU_TRANSLATING ? "translating" : s == GPUMEM__IOMMU_PASSTHROUGH ? "passthrough" : "off";
}

/* ---- the SSD (vfio path) ---------------------------------------------------- */

/* Bytes the shim pins for the configured pairs: the admin queue (three
 * pages: SQ, CQ, Identify scratch), and per pair its rings (64-byte
 * commands, 16-byte completions, each at least a page) and the PRP-list
 * pages of its command IDs (4 per entry, as gpumem_nvmectl_add_qp makes),
 * plus one largest transfer per entry as data buffers. */
static uint64_t gpumem__doctor_pinned_bytes(const gpumem_doctor_config *cfg) {
    gpumem_nvme_ns ns;
    uint64_t page = GPUMEM_NVME_PAGE_BYTES, per_pair;
    uint32_t n_cids = cfg->depth * 4 < GPUMEM_NVME_MAX_CIDS ? cfg->depth * 4 : GPUMEM_NVME_MAX_CIDS;
    memset(&ns, 0, sizeof ns);
    ns.lba_shift = 12;
    ns.max_blocks = cfg->io_bytes >> 12 ? cfg->io_bytes >> 12 : 1;
    per_pair = GPUMEM_ALIGN_UP((uint64_t)cfg->depth * sizeof(gpumem_nvme_cmd), page) +
               GPUMEM_ALIGN_UP((uint64_t)cfg->depth * sizeof(gpumem_nvme_cpl), page) +
               gpumem_nvme_qp_prp_bytes(n_cids, &ns) + (uint64_t)cfg->depth * cfg->io_bytes;
    return 3 * page + (uint64_t)cfg->pairs * per_pair;
}

/* "Max locked memory" of ROOT/proc/self/limits in bytes; UINT64_MAX for
 * unlimited; 0 with *known = 0 if unreadable. */
static uint64_t gpumem__doctor_memlock(const gpumem_doctor_config *cfg, int *known) {
    char path[512], line[256], soft[32];
    FILE *f;
    *known = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/proc/self/limits");
    if (!(f = gpumem__doctor_fopen(cfg, path, "r"))) return 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Max locked memory", 17) != 0) continue;
        if (sscanf(line + 17, "%31s", soft) != 1) break;
        fclose(f);
        *known = 1;
        if (strcmp(soft, "unlimited") == 0) return UINT64_MAX;
        return strtoull(soft, NULL, 10);
    }
    fclose(f);
    return 0;
}

/* Group members not on vfio-pci or no driver, "0000:00:1f.3 (snd_hda_intel)"
 * each, into `bad`; their count. VFIO also accepts pci-stub, and bridges
 * (a header type other than normal: class 0x0604 or 0x0607) on any driver. */
static int gpumem__doctor_group_blockers(const gpumem_doctor_config *cfg, const char *group, char *bad,
                                         size_t bytes) {
    char path[512], driver[64], cls[32];
    struct dirent **names;
    int n, i, count = 0;
    size_t used = 0;
    bad[0] = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/kernel/iommu_groups/%s/devices", group);
    n = gpumem__doctor_list(cfg, path, &names, 0);
    for (i = 0; i < n; i++) {
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/kernel/iommu_groups/%s/devices/%s/driver", group,
                            names[i]->d_name);
        if (!gpumem__doctor_link_name(cfg, path, driver, sizeof driver)) continue;
        if (!strcmp(driver, "vfio-pci") || !strcmp(driver, "pci-stub")) continue;
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/kernel/iommu_groups/%s/devices/%s/class", group,
                            names[i]->d_name);
        if (gpumem__doctor_read_line(cfg, path, cls, sizeof cls) &&
            (strtoul(cls, NULL, 16) >> 8 == 0x0604 || strtoul(cls, NULL, 16) >> 8 == 0x0607))
            continue;
        count++;
        if (used < bytes)
            used += (size_t)snprintf(bad + used, bytes - used, "%s%s (%s)", count > 1 ? ", " : "", names[i]->d_name,
                                     driver);
    }
    gpumem__doctor_names_free(names, n);
    return count;
}

/* The NVMe controllers of this machine ("0000:65:00.0 (nvme)" each), for a
 * finding that asks which one. */
static void gpumem__doctor_list_nvme(const gpumem_doctor_config *cfg, char *out, size_t bytes) {
    char path[512], cls[32], driver[64];
    struct dirent **names;
    int n, i;
    size_t used = 0;
    out[0] = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices");
    n = gpumem__doctor_list(cfg, path, &names, 0);
    for (i = 0; i < n; i++) {
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/class", names[i]->d_name);
        if (!gpumem__doctor_read_line(cfg, path, cls, sizeof cls) || strtoul(cls, NULL, 16) != 0x010802) continue;
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/driver", names[i]->d_name);
        if (!gpumem__doctor_link_name(cfg, path, driver, sizeof driver)) strcpy(driver, "no driver");
        if (used < bytes)
            used += (size_t)snprintf(out + used, bytes - used, "%s%s (%s)", used ? ", " : "", names[i]->d_name, driver);
    }
    gpumem__doctor_names_free(names, n);
}

#define GPUMEM__DOCTOR_TRY(call)                                                                                       \
    do {                                                                                                               \
        gpumem_status try_st_ = (call);                                                                                \
        if (try_st_ != GPUMEM_OK) return try_st_;                                                                      \
    } while (0)

/* Each check of `checks` (NULL-ended) as not run, and why: a check that
 * could not run is listed, never left out, so that a report cannot read as
 * a pass for what was never looked at (issue 45). */
static gpumem_status gpumem__doctor_not_run(gpumem_doctor_report *rep, const char *const *checks, const char *why) {
    for (; *checks; checks++)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, *checks, GPUMEM_DOCTOR_SKIP, "", "not run: %s", why));
    return GPUMEM_OK;
}
/* The checks after the first of each path, for gpumem__doctor_not_run. */
static const char *const gpumem__doctor_vfio_rest[] = {"vfio.iommu", "vfio.driver", "vfio.group", "vfio.dev",
                                                       "vfio.memlock", "vfio.bar0", "vfio.open", NULL};
static const char *const gpumem__doctor_gpu_rest[] = {"gpu.device", "gpu.loading", "gpu.host_atomics", "gpu.pageable",
                                                      "gpu.bar1", "gpu.mig", "gpu.compute_mode", "gpu.persistence",
                                                      NULL};
static const char *const gpumem__doctor_p2p_rest[] = {"p2p.acs", "p2p.iommu", "p2p.rdma", "p2p.kernel", NULL};

/* No SSD named: a skip that names the NVMe controllers to choose from; where
 * there are none, the finding is that (the path cannot work on this machine).
 * The path's other checks are then listed as not run. */
static gpumem_status gpumem__doctor_no_ssd(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep,
                                           const char *check, const char *const *rest) {
    char text[480];
    gpumem__doctor_list_nvme(cfg, text, sizeof text);
    if (!text[0])
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, check, GPUMEM_DOCTOR_FAIL,
            "this path needs an NVMe SSD on this machine's PCI bus (on a VM, pass one through; make qemu-test runs "
            "the shim against QEMU's NVMe controller instead)",
            "no NVMe controller on this machine (no PCI device of class 0x010802)"));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, check, GPUMEM_DOCTOR_SKIP, "name one of them: --pci ADDR",
                                              "no SSD named; NVMe controllers here: %s", text));
    return gpumem__doctor_not_run(rep, rest, text[0] ? "no SSD named (--pci)" : "no NVMe controller on this machine");
}

/* The commands that bind the SSD to vfio-pci (docs/ssd.md). */
static void gpumem__doctor_bind_fix(char *fix, size_t bytes, const char *pci, const char *driver) {
    char unbind[128] = "";
    if (driver[0]) snprintf(unbind, sizeof unbind, " echo %s > /sys/bus/pci/devices/%s/driver/unbind;", pci, pci);
    snprintf(fix, bytes,
             "as root: modprobe vfio-pci; echo vfio-pci > /sys/bus/pci/devices/%s/driver_override;%s "
             "echo %s > /sys/bus/pci/drivers_probe (docs/ssd.md; the disk's data is at risk)",
             pci, unbind, pci);
}

/* vfio.open: what the shim itself says, where the caller asked for it and
 * nothing above already fails. Opening resets the controller (and stops
 * anyone else's use of it), so it is never done unasked, and never under a
 * root other than "/": the controller would be this machine's, not the
 * described one's. The shim runs as this process: root asking on behalf of
 * gpumem__doctor_uid(cfg) is told so. Against the program's needs: pairs granted (Set
 * Features, Number of Queues), queue entries (CAP.MQES) and the largest
 * transfer (MDTS), each of which the shim refuses beyond (ERANGE, EINVAL,
 * E2BIG). */
static gpumem_status gpumem__doctor_open(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep, size_t first) {
    gpumem_nvmectl_config ncfg = gpumem_nvmectl_config_default();
    gpumem_nvmectl *ctl = NULL;
    const gpumem_nvmectl_info *in;
    gpumem_status st;
    char error[320] = "", who[96] = "", mdts[32], fix[480], found[400];
    size_t i;
    int short_pairs, short_depth, short_mdts;
    if (!gpumem__doctor_live(cfg))
        return gpumem__doctor_say(rep, "vfio.open", GPUMEM_DOCTOR_SKIP, "",
                                  "not opened under --root %s: the controller there would be this machine's", cfg->root);
    if (!cfg->open)
        return gpumem__doctor_say(rep, "vfio.open", GPUMEM_DOCTOR_SKIP,
                                  "--open (gpumem_doctor_config.open) tries it, once nothing uses the SSD",
                                  "not tried: opening resets the controller (MDTS and the queue count come from Identify)");
    for (i = first; i < rep->n; i++)
        if (rep->findings[i].verdict == GPUMEM_DOCTOR_FAIL)
            return gpumem__doctor_say(rep, "vfio.open", GPUMEM_DOCTOR_SKIP, "fix the lines marked fail first",
                                      "not tried: %s fails", rep->findings[i].check);
    if ((uint32_t)geteuid() != gpumem__doctor_uid(cfg))
        snprintf(who, sizeof who, " (as uid %u, not the program's uid %u)", (unsigned)geteuid(), gpumem__doctor_uid(cfg));
    ncfg.pci_addr = cfg->pci_addr;
    ncfg.max_pairs = cfg->pairs;
    ncfg.error = error;
    ncfg.error_bytes = sizeof error;
    st = gpumem_nvmectl_open(&ncfg, &ctl);
    if (st != GPUMEM_OK)
        return gpumem__doctor_say(rep, "vfio.open", GPUMEM_DOCTOR_FAIL,
                                  "the message names the cause (docs/ssd.md); a check above that passes should not have",
                                  "gpumem_nvmectl_open%s: %s: %s", who, gpumem_status_str(st), error);
    in = gpumem_nvmectl_get_info(ctl);
    short_pairs = in->pairs_granted < cfg->pairs;
    short_depth = in->max_queue_entries < cfg->depth;
    short_mdts = in->max_transfer_bytes && in->max_transfer_bytes < cfg->io_bytes;
    if (in->max_transfer_bytes) gpumem__doctor_bytes_str(in->max_transfer_bytes, mdts, sizeof mdts);
    else strcpy(mdts, "no limit");
    snprintf(found, sizeof found, "opened%s: %.40s, firmware %.8s, NVMe %u.%u; MDTS %s (the program: %u KiB), %u of %u "
             "pairs granted, at most %u entries a queue (the program: %u)", who, in->model, in->firmware,
             (unsigned)(in->version >> 16), (unsigned)(in->version >> 8 & 0xFF), mdts, cfg->io_bytes >> 10,
             in->pairs_granted, cfg->pairs, in->max_queue_entries, cfg->depth);
    snprintf(fix, sizeof fix, "ask for what the controller allows:%s%s%s",
             short_pairs ? " fewer pairs (--pairs)" : "", short_depth ? " shallower pairs (--depth)" : "",
             short_mdts ? " smaller transfers (--io-kib), or split them" : "");
    st = gpumem_nvmectl_close(ctl);
    if (st != GPUMEM_OK)
        return gpumem__doctor_say(rep, "vfio.open", GPUMEM_DOCTOR_FAIL, "the controller did not shut down cleanly: "
                                  "reset it (echo 1 > /sys/bus/pci/devices/ADDR/reset) before use",
                                  "%s; close: %s", found, gpumem_status_str(st));
    return gpumem__doctor_say(rep, "vfio.open",
                              short_pairs || short_depth || short_mdts ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_PASS,
                              short_pairs || short_depth || short_mdts ? fix : "", "%s", found);
}

gpumem_status gpumem_doctor_ssd(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep) {
    char path[512], text[480], fix[480], cls[32], driver[64], group[64], why[256], need_s[32], have_s[32];
    const char *pci;
    gpumem__doctor_iommu iommu;
    struct stat sb;
    uint64_t need, have, bar0;
    int known, uio, vfio, owned;
    size_t first;
    if (!cfg || !rep) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    first = rep->n; /* this SSD's findings start here (vfio.open looks at them) */
    pci = cfg->pci_addr;
    if (!pci || !pci[0]) return gpumem__doctor_no_ssd(cfg, rep, "vfio.device", gpumem__doctor_vfio_rest);
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s", pci);
    if (!gpumem__doctor_exists(cfg, path)) {
        gpumem__doctor_list_nvme(cfg, text, sizeof text);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.device", GPUMEM_DOCTOR_FAIL,
                                              "check the address: lspci -D | grep -i nvme",
                                              "no PCI device %s; NVMe controllers here: %s", pci,
                                              text[0] ? text : "none"));
        return gpumem__doctor_not_run(rep, gpumem__doctor_vfio_rest, "no such PCI device (vfio.device)");
    }
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/class", pci);
    gpumem__doctor_read_line(cfg, path, cls, sizeof cls);
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.device",
                                          strtoul(cls, NULL, 16) == 0x010802 ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
                                          strtoul(cls, NULL, 16) == 0x010802 ? ""
                                                                              : "name an NVMe controller (class 0x010802): lspci -D | grep -i nvme",
                                          "%s, class %s%s", pci, cls[0] ? cls : "unreadable",
                                          strtoul(cls, NULL, 16) == 0x010802 ? " (NVMe)" : ", not an NVMe controller"));

    iommu = gpumem__doctor_iommu_state(cfg, pci, group, sizeof group, why, sizeof why);
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/driver", pci);
    gpumem__doctor_link_name(cfg, path, driver, sizeof driver);
    uio = strcmp(driver, "uio_pci_generic") == 0;
    vfio = strcmp(driver, "vfio-pci") == 0;

    /* The IOMMU: what it means for the route the driver picks. */
    if (iommu == GPUMEM__IOMMU_OFF && !uio && !cfg->noiommu)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "vfio.iommu", GPUMEM_DOCTOR_FAIL,
            "turn the IOMMU on (BIOS: VT-d / AMD-Vi; kernel: intel_iommu=on) for vfio-pci, or bind to "
            "uio_pci_generic and run as root (docs/ssd.md, 'Without an IOMMU'), or use vfio no-IOMMU mode (--noiommu)",
            "off (%s): vfio-pci has no group to give a user", why));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.iommu", GPUMEM_DOCTOR_PASS, "", "%s (%s)",
                                              gpumem__doctor_iommu_str(iommu), why));

    /* The driver. */
    if (vfio)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.driver", GPUMEM_DOCTOR_PASS, "", "vfio-pci"));
    else if (uio && iommu == GPUMEM__IOMMU_TRANSLATING) {
        gpumem__doctor_bind_fix(fix, sizeof fix, pci, driver);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.driver", GPUMEM_DOCTOR_FAIL, fix,
                                              "uio_pci_generic under a translating IOMMU (%s): the controller "
                                              "could reach none of its queues, uio maps nothing in the IOMMU",
                                              why));
    } else if (uio)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.driver", GPUMEM_DOCTOR_PASS, "",
                                              "uio_pci_generic with the IOMMU %s: the physical-address route, as "
                                              "root", gpumem__doctor_iommu_str(iommu)));
    else {
        gpumem__doctor_bind_fix(fix, sizeof fix, pci, driver);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.driver", GPUMEM_DOCTOR_FAIL, fix,
                                              "bound to %s%s: the shim needs vfio-pci (or uio_pci_generic "
                                              "without an IOMMU)", driver[0] ? driver : "no driver",
                                              strcmp(driver, "nvme") == 0 ? " (the kernel's driver owns it)" : ""));
    }

    /* The group and /dev/vfio/N (vfio-pci with a group). */
    if (group[0] && !uio) {
        int blockers = gpumem__doctor_group_blockers(cfg, group, text, sizeof text);
        if (blockers)
            snprintf(fix, sizeof fix, "bind each to vfio-pci (echo vfio-pci > /sys/bus/pci/devices/ADDR/driver_override, "
                     "unbind, drivers_probe) or unbind it; ls /sys/kernel/iommu_groups/%s/devices", group);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.group", blockers ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_PASS,
                                              blockers ? fix : "",
                                              blockers ? "IOMMU group %s is not viable: %s still on a driver"
                                                       : "IOMMU group %s: every device on vfio-pci or no driver%s",
                                              group, blockers ? text : ""));
        gpumem__doctor_path(cfg, path, sizeof path, "/dev/vfio/%s", group);
        if ((owned = gpumem__doctor_stat_owned(cfg, path, &sb, rep)) == -2) return GPUMEM_EINVAL;
        if (owned != 0)
            GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.dev", vfio ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_SKIP,
                                                  vfio ? "modprobe vfio-pci; rebind the device to vfio-pci" : "",
                                                  "no /dev/vfio/%s%s", group,
                                                  vfio ? "" : " (appears once the device is on vfio-pci)"));
        else if (!gpumem__doctor_user_rw(cfg, &sb)) {
            snprintf(fix, sizeof fix, "as root: chown %u /dev/vfio/%s, or a udev rule: SUBSYSTEM==\"vfio\", "
                     "KERNEL==\"%s\", OWNER=\"USER\", MODE=\"0600\" (docs/ssd.md)", gpumem__doctor_uid(cfg), group, group);
            GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.dev", GPUMEM_DOCTOR_FAIL, fix,
                                                  "/dev/vfio/%s is owned by %u:%u mode %03o: user %u cannot open it",
                                                  group, (unsigned)sb.st_uid, (unsigned)sb.st_gid,
                                                  (unsigned)(sb.st_mode & 0777), gpumem__doctor_uid(cfg)));
        } else
            GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.dev", GPUMEM_DOCTOR_PASS, "",
                                                  "/dev/vfio/%s: user %u can open it", group, gpumem__doctor_uid(cfg)));
    }

    /* Memlock: VFIO pins and counts every mapping (root, with CAP_IPC_LOCK,
     * is not limited). */
    need = gpumem__doctor_pinned_bytes(cfg);
    have = gpumem__doctor_memlock(cfg, &known);
    gpumem__doctor_bytes_str(need, need_s, sizeof need_s);
    if (!known)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.memlock", GPUMEM_DOCTOR_SKIP, "",
                                              "proc/self/limits unreadable; about %s needed", need_s));
    else if (gpumem__doctor_uid(cfg) == 0 || have == UINT64_MAX || have >= need) {
        if (have == UINT64_MAX) strcpy(have_s, "unlimited");
        else gpumem__doctor_bytes_str(have, have_s, sizeof have_s);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.memlock", GPUMEM_DOCTOR_PASS, "",
                                              "limit %s%s; %u pairs of %u entries need about %s", have_s,
                                              gpumem__doctor_uid(cfg) == 0 ? " (root: not limited)" : "", cfg->pairs, cfg->depth,
                                              need_s));
    } else {
        unsigned long long kib = (unsigned long long)((need + 1023) >> 10);
        gpumem__doctor_bytes_str(have, have_s, sizeof have_s);
        snprintf(fix, sizeof fix, "ulimit -l %llu (KiB, up to the hard limit); for good: 'USER - memlock %llu' in "
                 "/etc/security/limits.conf, or LimitMEMLOCK= in a systemd unit", kib, kib);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "vfio.memlock", GPUMEM_DOCTOR_FAIL, fix,
                                              "RLIMIT_MEMLOCK is %s; %u pairs of %u entries (%u KiB transfers) pin "
                                              "about %s",
                                              have_s, cfg->pairs, cfg->depth, cfg->io_bytes >> 10, need_s));
    }

    /* vfio no-IOMMU mode, where asked. */
    if (cfg->noiommu) {
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode");
        if (!gpumem__doctor_read_line(cfg, path, text, sizeof text)) text[0] = 0;
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "vfio.noiommu", text[0] == 'Y' ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
            text[0] == 'Y' ? "" : "as root: modprobe vfio enable_unsafe_noiommu_mode=1 (kernels built with "
                                  "CONFIG_VFIO_NOIOMMU; Debian 12's is not)",
            "no-IOMMU mode %s", text[0] == 'Y' ? "on" : text[0] ? "off" : "not available (no such vfio parameter)"));
    }

    /* Huge pages: the physical-address route needs contiguous rings. */
    if (uio || cfg->noiommu || iommu == GPUMEM__IOMMU_OFF) {
        long pages;
        gpumem__doctor_path(cfg, path, sizeof path, "/proc/sys/vm/nr_hugepages");
        gpumem__doctor_read_line(cfg, path, text, sizeof text);
        pages = strtol(text, NULL, 10);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "vfio.hugepages",
            pages > 0 || (uint64_t)cfg->depth * sizeof(gpumem_nvme_cmd) <= GPUMEM_NVME_PAGE_BYTES ? GPUMEM_DOCTOR_PASS
                                                                                                    : GPUMEM_DOCTOR_FAIL,
            pages > 0 ? "" : "as root: echo 64 > /proc/sys/vm/nr_hugepages; echo 0 > /proc/sys/vm/compact_unevictable_allowed",
            "%ld huge pages reserved; without an IOMMU a ring over 4 KiB (%u entries) must be physically contiguous",
            pages, cfg->depth));
    }

    /* BAR0: registers (4 KiB) and a doorbell pair per queue. */
    bar0 = gpumem__doctor_bar_bytes(cfg, pci, 0);
    gpumem__doctor_bytes_str(bar0, have_s, sizeof have_s);
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
        rep, "vfio.bar0", bar0 >= 0x2000 ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
        bar0 >= 0x2000 ? "" : "BIOS: enable the slot, or Above 4G Decoding where the BAR was not assigned (dmesg | grep BAR)",
        bar0 ? "BAR0 %s" : "BAR0 not assigned (%s)", bar0 ? have_s : "resource line 0 empty or unreadable"));

    return gpumem__doctor_open(cfg, rep, first);
}

/* ---- the GPU ------------------------------------------------------------------- */

/* dlsym into a function pointer without the object-to-function cast that
 * ISO C forbids: POSIX guarantees the representations agree. */
static int gpumem__doctor_sym(void *lib, const char *name, void *fn_ptr, size_t fn_bytes) {
    void *sym = dlsym(lib, name);
    if (!sym) return 0;
    memcpy(fn_ptr, &sym, fn_bytes);
    return 1;
}
#define GPUMEM__DOCTOR_SYM(lib, name, fn) gpumem__doctor_sym(lib, name, &(fn), sizeof(fn))

static void gpumem__doctor_facts_clear(gpumem_doctor_gpu_facts *f) {
    memset(f, 0, sizeof *f);
    f->cuda_version = f->devices = f->cc_major = f->cc_minor = -1;
    f->lazy = f->host_atomics = f->pageable = f->compute_mode = f->rdma = f->mig = f->persistence = -1;
}

/* The live driver: libcuda (device attributes, loading mode) and NVML (BAR1,
 * MIG, persistence, driver version). No CUDA header: the few entry points
 * and enumerators used are declared here with their documented values. */
static void gpumem__doctor_probe_live(const gpumem_doctor_config *cfg, gpumem_doctor_gpu_facts *f) {
    typedef int (*cu_int_fn)(int *);
    typedef int (*cu_init_fn)(unsigned);
    typedef int (*cu_get_fn)(int *, int);
    typedef int (*cu_attr_fn)(int *, int, int);
    typedef int (*cu_str_fn)(char *, int, int);
    typedef int (*nvml_void_fn)(void);
    typedef int (*nvml_handle_fn)(const char *, void **);
    typedef int (*nvml_bar1_fn)(void *, unsigned long long *);
    typedef int (*nvml_mig_fn)(void *, unsigned *, unsigned *);
    typedef int (*nvml_mode_fn)(void *, int *);
    typedef int (*nvml_version_fn)(char *, unsigned);
    enum { ATTR_COMPUTE_MODE = 20, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, ATTR_HOST_NATIVE_ATOMIC = 86,
           ATTR_PAGEABLE = 88, ATTR_RDMA = 116, LAZY_LOADING = 2 };
    cu_int_fn version = NULL, count = NULL, loading = NULL;
    cu_init_fn init = NULL;
    cu_get_fn get = NULL;
    cu_attr_fn attr = NULL;
    cu_str_fn name = NULL, bus_id = NULL;
    const char *cuda = cfg->cuda_lib ? cfg->cuda_lib : "libcuda.so.1";
    void *lib = dlopen(cuda, RTLD_NOW | RTLD_LOCAL);
    int dev = 0, rc, v;
    char path[512];
    gpumem__doctor_path(cfg, path, sizeof path, "/proc/driver/nvidia/version");
    if (!lib) {
        const char *e = dlerror();
        snprintf(f->why_not, sizeof f->why_not, "%s", e ? e : cuda);
        return;
    }
    if (!GPUMEM__DOCTOR_SYM(lib, "cuInit", init) || !GPUMEM__DOCTOR_SYM(lib, "cuDriverGetVersion", version) ||
        !GPUMEM__DOCTOR_SYM(lib, "cuDeviceGetCount", count) || !GPUMEM__DOCTOR_SYM(lib, "cuDeviceGet", get) ||
        !GPUMEM__DOCTOR_SYM(lib, "cuDeviceGetAttribute", attr) || !GPUMEM__DOCTOR_SYM(lib, "cuDeviceGetName", name) ||
        !GPUMEM__DOCTOR_SYM(lib, "cuDeviceGetPCIBusId", bus_id)) {
        snprintf(f->why_not, sizeof f->why_not, "%s lacks the CUDA driver entry points", cuda);
        dlclose(lib);
        return;
    }
    if ((rc = init(0)) != 0) {
        snprintf(f->why_not, sizeof f->why_not, "cuInit failed with CUresult %d (%s)", rc,
                 rc == 100  ? "no CUDA device"
                 : rc == 34 ? "a stub library: the driver's libcuda is not installed"
                 : rc == 35 ? "driver older than libcuda"
                            : "see cuda.h");
        dlclose(lib);
        return;
    }
    f->driver = 1;
    if (version(&v) == 0) f->cuda_version = v;
    if (count(&v) == 0) f->devices = v;
    if (cfg->gpu >= 0 && cfg->gpu < f->devices && get(&dev, cfg->gpu) == 0) {
        if (name(f->name, (int)sizeof f->name, dev) != 0) f->name[0] = 0;
        if (bus_id(f->pci, (int)sizeof f->pci, dev) != 0) f->pci[0] = 0;
        for (v = 0; f->pci[v]; v++) /* CUDA says 0000:17:00.0 in capitals; sysfs in lower case */
            if (f->pci[v] >= 'A' && f->pci[v] <= 'F') f->pci[v] = (char)(f->pci[v] - 'A' + 'a');
        if (attr(&v, ATTR_CC_MAJOR, dev) == 0) f->cc_major = v;
        if (attr(&v, ATTR_CC_MINOR, dev) == 0) f->cc_minor = v;
        if (attr(&v, ATTR_HOST_NATIVE_ATOMIC, dev) == 0) f->host_atomics = v;
        if (attr(&v, ATTR_PAGEABLE, dev) == 0) f->pageable = v;
        if (attr(&v, ATTR_COMPUTE_MODE, dev) == 0) f->compute_mode = v;
        if (attr(&v, ATTR_RDMA, dev) == 0) f->rdma = v;
    }
    /* cuModuleGetLoadingMode came with CUDA 11.7; before it loading was
     * eager unless CUDA_MODULE_LOADING=LAZY. */
    if (GPUMEM__DOCTOR_SYM(lib, "cuModuleGetLoadingMode", loading) && loading(&v) == 0) f->lazy = v == LAZY_LOADING;
    else f->lazy = getenv("CUDA_MODULE_LOADING") && strcmp(getenv("CUDA_MODULE_LOADING"), "LAZY") == 0;
    /* libcuda stays loaded: unloading a driver library mid-process is not
     * worth the risk for a diagnostic. */

    lib = dlopen(cfg->nvml_lib ? cfg->nvml_lib : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        nvml_void_fn nvml_init = NULL, nvml_shutdown = NULL;
        nvml_handle_fn handle = NULL;
        nvml_bar1_fn bar1 = NULL;
        nvml_mig_fn mig = NULL;
        nvml_mode_fn persistence = NULL;
        nvml_version_fn driver_version = NULL;
        void *h = NULL;
        if (GPUMEM__DOCTOR_SYM(lib, "nvmlInit_v2", nvml_init) && GPUMEM__DOCTOR_SYM(lib, "nvmlShutdown", nvml_shutdown) &&
            nvml_init() == 0) {
            if (GPUMEM__DOCTOR_SYM(lib, "nvmlSystemGetDriverVersion", driver_version) &&
                driver_version(f->driver_version, (unsigned)sizeof f->driver_version) != 0)
                f->driver_version[0] = 0;
            /* By PCI address: NVML's order need not be CUDA's. */
            if (f->pci[0] && GPUMEM__DOCTOR_SYM(lib, "nvmlDeviceGetHandleByPciBusId_v2", handle) &&
                handle(f->pci, &h) == 0) {
                unsigned long long b[3]; /* nvmlBAR1Memory_t: total, free, used */
                unsigned cur = 0, pending = 0;
                int mode = 0;
                if (GPUMEM__DOCTOR_SYM(lib, "nvmlDeviceGetBAR1MemoryInfo", bar1) && bar1(h, b) == 0) {
                    f->bar1_total = b[0];
                    f->bar1_free = b[1];
                }
                if (GPUMEM__DOCTOR_SYM(lib, "nvmlDeviceGetMigMode", mig)) /* fails where MIG is not supported */
                    f->mig = mig(h, &cur, &pending) == 0 ? cur == 1 : 0;
                if (GPUMEM__DOCTOR_SYM(lib, "nvmlDeviceGetPersistenceMode", persistence) && persistence(h, &mode) == 0)
                    f->persistence = mode == 1;
            }
            nvml_shutdown();
        }
    }
    if (!f->driver_version[0]) { /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ..." */
        char line[256];
        const char *at;
        if (gpumem__doctor_read_line(cfg, path, line, sizeof line) && (at = strstr(line, "Kernel Module")) != NULL)
            sscanf(at + 13, "%31s", f->driver_version);
    }
}

/* A compute capability is MAJOR.MINOR with one digit of minor (the build's
 * sm_XY is MAJOR * 10 + MINOR); beyond these it is not one. */
#define GPUMEM__DOCTOR_CC_MAJOR_MAX 99
#define GPUMEM__DOCTOR_CC_MINOR_MAX 9
static int gpumem__doctor_cc_known(const gpumem_doctor_gpu_facts *f) {
    return f->cc_major >= 0 && f->cc_major <= GPUMEM__DOCTOR_CC_MAJOR_MAX && f->cc_minor >= 0 &&
           f->cc_minor <= GPUMEM__DOCTOR_CC_MINOR_MAX;
}

/* ROOT/gpumem-doctor/cuda: key=value lines, '#' comments. Any malformed
 * line makes the whole file an error (file, line, expected, found). */
static gpumem_status gpumem__doctor_probe_file(const gpumem_doctor_config *cfg, gpumem_doctor_gpu_facts *f,
                                               gpumem_doctor_report *rep) {
    static const char *const int_keys[] = {"cuda_version", "devices", "host_atomics", "pageable", "compute_mode",
                                           "rdma", "mig", "persistence"};
    int *const int_fields[] = {&f->cuda_version, &f->devices, &f->host_atomics, &f->pageable, &f->compute_mode,
                               &f->rdma, &f->mig, &f->persistence};
    char path[512], vpath[512], line[256];
    FILE *in;
    int lineno = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/gpumem-doctor/cuda");
    gpumem__doctor_path(cfg, vpath, sizeof vpath, "/proc/driver/nvidia/version");
    if (!(in = gpumem__doctor_fopen(cfg, path, "r"))) {
        if (gpumem__doctor_exists(cfg, vpath)) {
            f->driver = 1; /* the kernel module is there; nobody asked CUDA */
            snprintf(f->why_not, sizeof f->why_not, "the snapshot has no gpumem-doctor/cuda");
        } else
            snprintf(f->why_not, sizeof f->why_not, "the root has no proc/driver/nvidia/version and no gpumem-doctor/cuda");
        return GPUMEM_OK;
    }
    f->driver = 1;
    for (;;) {
        char *eq, *key = line, *val, *end, why[64];
        size_t k;
        int matched = 0, got = gpumem__doctor_own_line(in, line, sizeof line, why, sizeof why);
        if (got == 0) break;
        lineno++;
        if (got < 0) {
            if (rep) snprintf(rep->error, sizeof rep->error, "%.200s:%d: expected key=value, found %s", path, lineno, why);
            fclose(in);
            return GPUMEM_EINVAL;
        }
        if (!line[0] || line[0] == '#') continue;
        if (!(eq = strchr(line, '='))) {
            if (rep)
                snprintf(rep->error, sizeof rep->error, "%.200s:%d: expected key=value, found \"%.60s\"", path, lineno,
                         line);
            fclose(in);
            return GPUMEM_EINVAL;
        }
        *eq = 0;
        val = eq + 1;
        if (!strcmp(key, "driver_version")) gpumem__doctor_copy(f->driver_version, sizeof f->driver_version, val), matched = 1;
        else if (!strcmp(key, "why_not")) gpumem__doctor_copy(f->why_not, sizeof f->why_not, val), matched = 1;
        else if (!strcmp(key, "driver") && (!strcmp(val, "0") || !strcmp(val, "1"))) f->driver = val[0] == '1', matched = 1;
        else if (!strcmp(key, "name")) gpumem__doctor_copy(f->name, sizeof f->name, val), matched = 1;
        else if (!strcmp(key, "pci")) gpumem__doctor_copy(f->pci, sizeof f->pci, val), matched = 1;
        else if (!strcmp(key, "loading") && (!strcmp(val, "lazy") || !strcmp(val, "eager")))
            f->lazy = !strcmp(val, "lazy"), matched = 1;
        else if (!strcmp(key, "cc")) {
            const char *p = val;
            long major, minor;
            if (gpumem__doctor_decimal(&p, GPUMEM__DOCTOR_CC_MAJOR_MAX, &major) && *p++ == '.' &&
                gpumem__doctor_decimal(&p, GPUMEM__DOCTOR_CC_MINOR_MAX, &minor) && !*p)
                f->cc_major = (int)major, f->cc_minor = (int)minor, matched = 1;
        }
        else if (!strcmp(key, "bar1_total") || !strcmp(key, "bar1_free")) {
            unsigned long long b = strtoull(val, &end, 10);
            if (end != val && !*end) *(key[5] == 't' ? &f->bar1_total : &f->bar1_free) = b, matched = 1;
        } else
            for (k = 0; k < sizeof int_keys / sizeof int_keys[0]; k++)
                if (!strcmp(key, int_keys[k])) {
                    long x;
                    errno = 0;
                    x = strtol(val, &end, 10);
                    if (end != val && !*end && errno == 0 && x >= INT_MIN && x <= INT_MAX)
                        *int_fields[k] = (int)x, matched = 1;
                    break;
                }
        if (!matched) {
            if (rep)
                snprintf(rep->error, sizeof rep->error,
                         "%.120s:%d: expected a known key with a value of its kind (docs/doctor.md), found "
                         "\"%.40s=%.40s\"", path, lineno, key, val);
            fclose(in);
            return GPUMEM_EINVAL;
        }
    }
    fclose(in);
    return GPUMEM_OK;
}

gpumem_status gpumem_doctor_gpu_probe(const gpumem_doctor_config *cfg, gpumem_doctor_gpu_facts *out,
                                      gpumem_doctor_report *rep) {
    gpumem_status st = GPUMEM_OK;
    if (!cfg || !out) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    gpumem__doctor_facts_clear(out);
    if (gpumem__doctor_live(cfg)) gpumem__doctor_probe_live(cfg, out);
    else st = gpumem__doctor_probe_file(cfg, out, rep);
    /* BAR1 from sysfs where NVML did not say: the same size, less what the
     * driver keeps for itself. */
    if (st == GPUMEM_OK && out->pci[0] && !out->bar1_total) out->bar1_total = gpumem__doctor_bar_bytes(cfg, out->pci, 1);
    if (st == GPUMEM_OK && cfg->record && gpumem__doctor_live(cfg)) { /* a snapshot keeps what the driver said */
        cfg->record->facts_ = *out;
        cfg->record->have_facts_ = 1;
    }
    return st;
}

/* Bytes of BAR1 the configured pairs need when their rings and data buffers
 * are in GPU memory for an SSD: BAR1 maps GPU memory in 64 KiB pages. */
static uint64_t gpumem__doctor_bar1_need(const gpumem_doctor_config *cfg) {
    const uint64_t gpu_page = 64u << 10;
    uint64_t per_pair = GPUMEM_ALIGN_UP((uint64_t)cfg->depth * sizeof(gpumem_nvme_cmd), gpu_page) +
                        GPUMEM_ALIGN_UP((uint64_t)cfg->depth * sizeof(gpumem_nvme_cpl), gpu_page) +
                        GPUMEM_ALIGN_UP((uint64_t)cfg->depth * cfg->io_bytes, gpu_page);
    return (uint64_t)cfg->pairs * per_pair;
}

static gpumem_status gpumem__doctor_judge_bar1(const gpumem_doctor_config *cfg, const gpumem_doctor_gpu_facts *f,
                                               gpumem_doctor_report *rep) {
    char need_s[32], have_s[32], fix[480];
    uint64_t need = gpumem__doctor_bar1_need(cfg), have = f->bar1_free ? f->bar1_free : f->bar1_total;
    gpumem__doctor_bytes_str(need, need_s, sizeof need_s);
    gpumem__doctor_bytes_str(have, have_s, sizeof have_s);
    if (!have)
        return gpumem__doctor_say(rep, "gpu.bar1", GPUMEM_DOCTOR_SKIP, "", "BAR1 size unknown; %u pairs need %s",
                                  cfg->pairs, need_s);
    if (have >= need)
        return gpumem__doctor_say(rep, "gpu.bar1", GPUMEM_DOCTOR_PASS, "",
                                  "BAR1 %s %s; %u pairs of %u entries in GPU memory need %s", have_s,
                                  f->bar1_free ? "free" : "in all", cfg->pairs, cfg->depth, need_s);
    snprintf(fix, sizeof fix, "fewer or shallower pairs (at most %llu of these fit), or a larger BAR1: BIOS: Above 4G "
             "Decoding and Resizable BAR on; datacenter GPUs expose all their memory (a T4's or a consumer card's "
             "256 MiB is too small)", (unsigned long long)(have / (need / cfg->pairs)));
    return gpumem__doctor_say(rep, "gpu.bar1", GPUMEM_DOCTOR_FAIL, fix,
                              "BAR1 %s %s; %u pairs of %u entries (%u KiB buffers each) in GPU memory need %s", have_s,
                              f->bar1_free ? "free" : "in all", cfg->pairs, cfg->depth, cfg->io_bytes >> 10, need_s);
}

static gpumem_status gpumem__doctor_no_driver(const gpumem_doctor_gpu_facts *f, gpumem_doctor_report *rep) {
    return gpumem__doctor_say(rep, "gpu.driver", GPUMEM_DOCTOR_FAIL,
                              "install the NVIDIA driver (nvidia-smi must list the GPU); on a VM, pass the GPU "
                              "through first",
                              "no NVIDIA driver (%s)", f->why_not);
}

gpumem_status gpumem_doctor_gpu(const gpumem_doctor_config *cfg, int gpu_controller, gpumem_doctor_report *rep) {
    gpumem_doctor_gpu_facts f;
    char fix[480];
    int cc;
    if (!cfg || !rep) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    GPUMEM__DOCTOR_TRY(gpumem_doctor_gpu_probe(cfg, &f, rep));
    if (!f.driver) {
        GPUMEM__DOCTOR_TRY(gpumem__doctor_no_driver(&f, rep));
        return gpumem__doctor_not_run(rep, gpumem__doctor_gpu_rest, "no NVIDIA driver to ask (gpu.driver)");
    }
    if (f.cuda_version < 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.driver", GPUMEM_DOCTOR_SKIP, "",
                                              "NVIDIA driver %s; its CUDA version unknown (%s)",
                                              f.driver_version[0] ? f.driver_version : "(version unknown)",
                                              f.why_not[0] ? f.why_not : "not in the snapshot"));
    else {
        int old = cfg->build_cuda && f.cuda_version < cfg->build_cuda;
        int old_major = cfg->build_cuda && f.cuda_version / 1000 < cfg->build_cuda / 1000;
        char needs[32] = "(unknown)";
        if (cfg->build_cuda) snprintf(needs, sizeof needs, "CUDA %d.%d", cfg->build_cuda / 1000, cfg->build_cuda % 1000 / 10);
        snprintf(fix, sizeof fix, "update the NVIDIA driver to one for %s or later", needs);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.driver", old_major ? GPUMEM_DOCTOR_FAIL : old ? GPUMEM_DOCTOR_WARN : GPUMEM_DOCTOR_PASS,
            old ? fix : "", "NVIDIA driver %s, CUDA %d.%d; the build needs %s%s",
            f.driver_version[0] ? f.driver_version : "(version unknown)", f.cuda_version / 1000,
            f.cuda_version % 1000 / 10, needs,
            old && !old_major ? " (same major: runs by minor-version compatibility unless PTX must be JIT-compiled)"
                              : ""));
    }
    if (f.devices >= 0 && cfg->gpu >= f.devices) {
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.device", GPUMEM_DOCTOR_FAIL, "pick one with --gpu N (nvidia-smi -L)",
                                              "no CUDA device %d (%d present)", cfg->gpu, f.devices));
        return gpumem__doctor_not_run(rep, gpumem__doctor_gpu_rest + 1, "no such CUDA device (gpu.device)");
    }

    /* Compute capability: an sm_XY build carries SASS for X.Y and PTX that
     * newer GPUs compile at load; older GPUs cannot run it. */
    if (f.cc_major < 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.device", GPUMEM_DOCTOR_SKIP, "",
                                              "device %d %s: compute capability unknown", cfg->gpu, f.name));
    else if (!gpumem__doctor_cc_known(&f)) /* a driver's number no GPU has: judged as unknown, said as it came */
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.device", GPUMEM_DOCTOR_SKIP, "",
                                              "device %d %s: compute capability %d.%d not understood (expected "
                                              "0..%d.0..%d)", cfg->gpu, f.name, f.cc_major, f.cc_minor,
                                              GPUMEM__DOCTOR_CC_MAJOR_MAX, GPUMEM__DOCTOR_CC_MINOR_MAX));
    else {
        cc = f.cc_major * 10 + f.cc_minor;
        snprintf(fix, sizeof fix, "rebuild for this GPU: make CUDA_ARCH=sm_%d", cc);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.device", cfg->build_arch && cc < cfg->build_arch ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_PASS,
            cfg->build_arch && cc < cfg->build_arch ? fix : "", "device %d %s (%s), compute capability %d.%d; the build targets %s%d%s",
            cfg->gpu, f.name[0] ? f.name : "(no name)", f.pci[0] ? f.pci : "PCI address unknown", f.cc_major, f.cc_minor,
            cfg->build_arch ? "sm_" : "", cfg->build_arch,
            cfg->build_arch && cc > cfg->build_arch ? " (its PTX is compiled for this GPU at first load)" : ""));
    }

    /* Module loading: a persistent controller never lets the device go
     * idle, and a lazily loaded module waits for exactly that. */
    if (f.lazy < 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.loading", GPUMEM_DOCTOR_SKIP, "", "module loading mode unknown"));
    else if (f.lazy && gpu_controller)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.loading", GPUMEM_DOCTOR_FAIL,
            "export CUDA_MODULE_LOADING=EAGER before the program starts, or pass every client kernel to "
            "gpumem_swctl_gpu_start (gpumem_cuda_preload); docs/gpu.md",
            "lazy module loading: a kernel first launched while the GPU-resident controller runs waits for an idle "
            "device forever (gpumem_swctl_gpu_start refuses without the client kernels)"));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.loading", GPUMEM_DOCTOR_PASS, "", "%s module loading%s",
                                              f.lazy ? "lazy" : "eager",
                                              f.lazy ? " (fine without a persistent controller)" : ""));

    /* Host atomics: client state in pinned host memory makes every client
     * atomic a PCIe round trip without them. */
    if (f.host_atomics < 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.host_atomics", GPUMEM_DOCTOR_SKIP, "", "unknown"));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.host_atomics", f.host_atomics || gpu_controller ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_WARN,
            f.host_atomics || gpu_controller ? ""
                                             : "keep the pairs' client state in GPU memory: gpumem_swctl_config_gpu_clients",
            "%s native host atomics%s", f.host_atomics ? "has" : "no",
            f.host_atomics ? "" : ": a system-scope atomic on host memory crosses PCIe each time"));

    if (f.pageable < 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "gpu.pageable", GPUMEM_DOCTOR_SKIP, "", "unknown"));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.pageable", f.pageable ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_WARN,
            f.pageable ? "" : "give GPU threads buffers from cudaMalloc, cudaHostAlloc or cudaMallocManaged",
            "%s pageable memory (malloc'd buffers are %sreachable from GPU threads)", f.pageable ? "accesses" : "cannot access",
            f.pageable ? "" : "not "));

    GPUMEM__DOCTOR_TRY(gpumem__doctor_judge_bar1(cfg, &f, rep));

    if (f.mig >= 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.mig", f.mig ? GPUMEM_DOCTOR_WARN : GPUMEM_DOCTOR_PASS,
            f.mig ? "for GPU-initiated storage use the whole GPU: nvidia-smi -i N -mig 0 (as root, GPU idle)" : "",
            "MIG %s%s", f.mig ? "on" : "off",
            f.mig ? ": an instance has a slice of the SMs and no peer-to-peer DMA from an SSD" : ""));
    if (f.compute_mode >= 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.compute_mode", f.compute_mode == 2 ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_PASS,
            f.compute_mode == 2 ? "as root: nvidia-smi -i N -c DEFAULT" : "", "compute mode %s",
            f.compute_mode == 0 ? "default" : f.compute_mode == 2 ? "prohibited: no context can be made"
                                            : f.compute_mode == 3 ? "exclusive process (one program at a time)"
                                                                  : "unknown"));
    if (f.persistence >= 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "gpu.persistence", f.persistence ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_WARN,
            f.persistence ? "" : "as root: nvidia-smi -i N -pm 1 (or the nvidia-persistenced service)",
            "persistence mode %s", f.persistence ? "on" : "off: the driver tears the GPU down between programs, and "
                                                          "each start pays for bringing it up"));
    return GPUMEM_OK;
}

/* ---- peer to peer ------------------------------------------------------------ */

/* A device's place in the PCI tree: the elements after "devices/" in its
 * sysfs link ("pci0000:00", "0000:00:01.0", ..., the device); their count. */
static int gpumem__doctor_pci_chain(const gpumem_doctor_config *cfg, const char *pci, char chain[][32], int max) {
    char path[512], link[512], *at, *save = NULL, *tok;
    ssize_t n;
    int count = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s", pci);
    n = gpumem__doctor_readlink(cfg, path, link, sizeof link);
    if (n <= 0) return 0;
    if (!(at = strstr(link, "devices/pci"))) return 0;
    for (tok = strtok_r(at + strlen("devices/"), "/", &save); tok && count < max; tok = strtok_r(NULL, "/", &save))
        gpumem__doctor_copy(chain[count++], sizeof chain[0], tok);
    return count;
}

/* ACS control of a bridge from its config space (extended capability 0x0D,
 * control word at +6): -1 unreadable (beyond 64 bytes needs root), 0 no
 * ACS capability, otherwise the control word | 0x10000. */
static long gpumem__doctor_acs_control(const gpumem_doctor_config *cfg, const char *chain_dir) {
    char path[512];
    unsigned char cs[4096];
    FILE *f;
    size_t n;
    unsigned at = 0x100, hops;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/devices/%s/config", chain_dir);
    if (!(f = gpumem__doctor_fopen(cfg, path, "rb"))) return -1;
    n = fread(cs, 1, sizeof cs, f);
    fclose(f);
    if (n < 0x104) return -1;
    for (hops = 0; hops < 64 && at >= 0x100 && at + 8 <= n; hops++) {
        uint32_t h = (uint32_t)cs[at] | (uint32_t)cs[at + 1] << 8 | (uint32_t)cs[at + 2] << 16 | (uint32_t)cs[at + 3] << 24;
        if (h == 0 || h == 0xFFFFFFFFu) break;
        if ((h & 0xFFFFu) == 0x000D) return 0x10000L | (long)(cs[at + 6] | cs[at + 7] << 8);
        at = (h >> 20) & 0xFFCu;
    }
    return 0;
}

/* The GPU's PCI address: what CUDA said, or the cfg->gpu-th NVIDIA display
 * device in PCI order (CUDA's order can differ: say so). */
static void gpumem__doctor_gpu_pci(const gpumem_doctor_config *cfg, const gpumem_doctor_gpu_facts *f, char *out,
                                   size_t bytes, int *guessed) {
    char path[512], text[32];
    struct dirent **names;
    int n, i, k = 0;
    *guessed = 0;
    gpumem__doctor_copy(out, bytes, f->pci);
    if (out[0]) return;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices");
    n = gpumem__doctor_list(cfg, path, &names, 0);
    for (i = 0; i < n && !out[0]; i++) {
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/vendor", names[i]->d_name);
        if (!gpumem__doctor_read_line(cfg, path, text, sizeof text) || strtoul(text, NULL, 16) != 0x10de) continue;
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/class", names[i]->d_name);
        if (!gpumem__doctor_read_line(cfg, path, text, sizeof text) || (strtoul(text, NULL, 16) >> 16) != 0x03) continue;
        if (k++ == cfg->gpu) {
            gpumem__doctor_copy(out, bytes, names[i]->d_name);
            *guessed = 1;
        }
    }
    gpumem__doctor_names_free(names, n);
}

gpumem_status gpumem_doctor_p2p(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep) {
    enum { MAX_DEPTH = 16 };
    char gpu[32], chain_g[MAX_DEPTH][32], chain_s[MAX_DEPTH][32], dir[MAX_DEPTH * 33 + 16], path[512], group[64],
        why[256], text[480], fix[480], release[128];
    gpumem_doctor_gpu_facts f;
    int guessed, ng, ns, common, side, i, redirect = 0, unreadable = 0;
    size_t used = 0;
    gpumem__doctor_iommu iommu;
    if (!cfg || !rep) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    GPUMEM__DOCTOR_TRY(gpumem_doctor_gpu_probe(cfg, &f, rep));
    if (!cfg->pci_addr || !cfg->pci_addr[0]) return gpumem__doctor_no_ssd(cfg, rep, "p2p.path", gpumem__doctor_p2p_rest);
    gpumem__doctor_gpu_pci(cfg, &f, gpu, sizeof gpu, &guessed);
    if (!gpu[0]) {
        if (!f.driver) {
            GPUMEM__DOCTOR_TRY(gpumem__doctor_no_driver(&f, rep));
            return gpumem__doctor_not_run(rep, gpumem__doctor_p2p_rest, "no GPU to trace the path to (gpu.driver)");
        }
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.path", GPUMEM_DOCTOR_FAIL, "check --gpu N against nvidia-smi -L",
                                              "GPU %d not found (no PCI address from CUDA, no NVIDIA display device "
                                              "in sysfs)", cfg->gpu));
        return gpumem__doctor_not_run(rep, gpumem__doctor_p2p_rest, "no GPU to trace the path to (p2p.path)");
    }
    ng = gpumem__doctor_pci_chain(cfg, gpu, chain_g, MAX_DEPTH);
    ns = gpumem__doctor_pci_chain(cfg, cfg->pci_addr, chain_s, MAX_DEPTH);
    if (!ng || !ns) {
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.path", GPUMEM_DOCTOR_FAIL, "check the addresses: lspci -tv",
                                              "no sysfs entry for %s", !ng ? gpu : cfg->pci_addr));
        return gpumem__doctor_not_run(rep, gpumem__doctor_p2p_rest, "no PCI path to trace (p2p.path)");
    }
    for (common = 0; common < ng - 1 && common < ns - 1 && !strcmp(chain_g[common], chain_s[common]); common++) {
    }
    if (common == 0)
        snprintf(text, sizeof text, "across the CPU: the GPU (%s) is under %s, the SSD (%s) under %s", gpu, chain_g[0],
                 cfg->pci_addr, chain_s[0]);
    else if (common == 1)
        snprintf(text, sizeof text, "through the root complex %s: the GPU (%s) and the SSD (%s) are on different root "
                 "ports", chain_g[0], gpu, cfg->pci_addr);
    else
        snprintf(text, sizeof text, "behind one PCIe switch (%s): the GPU (%s) and the SSD (%s)", chain_g[common - 1],
                 gpu, cfg->pci_addr);
    if (guessed) strncat(text, "; the GPU's address was guessed from PCI order", sizeof text - strlen(text) - 1);
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
        rep, "p2p.path", common == 0 ? GPUMEM_DOCTOR_FAIL : common == 1 ? GPUMEM_DOCTOR_WARN : GPUMEM_DOCTOR_PASS,
        common == 0 ? "put the SSD in a slot on the GPU's CPU socket, best behind the same PCIe switch (lspci -tv)"
        : common == 1 ? "works on many CPUs, slower than a switch; a slot behind the GPU's switch is better (lspci -tv)"
                      : "",
        "%s", text));

    /* ACS request redirect on the bridges below the common ancestor: it
     * sends peer requests up to the root complex. */
    fix[0] = text[0] = 0;
    for (side = 0; side < 2; side++) {
        char (*chain)[32] = side ? chain_s : chain_g;
        int len = side ? ns : ng;
        for (i = common > 1 ? common : 1; i < len - 1; i++) {
            long acs;
            int k;
            size_t at = 0;
            for (k = 0; k <= i; k++) at += (size_t)snprintf(dir + at, sizeof dir - at, "%s%s", k ? "/" : "", chain[k]);
            acs = gpumem__doctor_acs_control(cfg, dir);
            if (acs < 0) unreadable++;
            else if (acs & 0x4) {
                redirect++;
                if (used < sizeof text)
                    used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", redirect > 1 ? ", " : "", chain[i]);
                if (strlen(fix) < sizeof fix - 80)
                    snprintf(fix + strlen(fix), sizeof fix - strlen(fix), "%ssetpci -s %s ECAP_ACS+0x6.w=0000",
                             fix[0] ? "; " : "as root: ", chain[i]);
            }
        }
    }
    if (redirect) {
        if (strlen(fix) < sizeof fix - 120)
            strncat(fix, " (until reboot; for good, the BIOS's ACS setting, or pci=disable_acs_redir= on the kernel command line)",
                    sizeof fix - strlen(fix) - 1);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.acs", GPUMEM_DOCTOR_FAIL, fix,
                                              "ACS request redirect on %s: peer traffic between the SSD and the GPU "
                                              "goes through the root complex, which often drops it",
                                              text));
    } else if (unreadable)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.acs", GPUMEM_DOCTOR_SKIP,
                                              "run the doctor as root (extended config space)",
                                              "%d bridge(s) between them unreadable (config space past 64 bytes "
                                              "needs root)", unreadable));
    else
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.acs", GPUMEM_DOCTOR_PASS, "",
                                              "no ACS request redirect on the bridges between them"));

    iommu = gpumem__doctor_iommu_state(cfg, cfg->pci_addr, group, sizeof group, why, sizeof why);
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
        rep, "p2p.iommu", iommu == GPUMEM__IOMMU_TRANSLATING ? GPUMEM_DOCTOR_WARN : GPUMEM_DOCTOR_PASS,
        iommu == GPUMEM__IOMMU_TRANSLATING
            ? "register the GPU buffers (a GDRCopy mapping of BAR1) with gpumem_nvmectl_dma_register so that the IOMMU "
              "maps them (docs/ssd.md, 'GPU memory with the IOMMU on')"
            : "",
        "the IOMMU is %s (%s)%s", gpumem__doctor_iommu_str(iommu), why,
        iommu == GPUMEM__IOMMU_TRANSLATING ? ": the SSD reaches GPU memory only at IOVAs mapped for it" : ""));

    if (f.rdma == 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.rdma", GPUMEM_DOCTOR_FAIL,
                                              "a datacenter (or workstation) GPU: GeForce cards lack GPUDirect RDMA",
                                              "the GPU does not support GPUDirect RDMA (nvidia_p2p_get_pages)"));
    else if (f.rdma > 0)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "p2p.rdma", GPUMEM_DOCTOR_PASS, "", "GPUDirect RDMA supported"));

    /* The kernel side: GDRCopy's gdrdrv (the route the shim documents),
     * nvidia-peermem, P2PDMA and dma-buf in the kernel's configuration. */
    gpumem__doctor_kernel(cfg, release, sizeof release);
    {
        char config[512], conf[1 << 16];
        int gdr, peermem, p2pdma = -1, dmabuf = -1;
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/module/gdrdrv");
        gdr = gpumem__doctor_exists(cfg, path);
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/module/nvidia_peermem");
        peermem = gpumem__doctor_exists(cfg, path);
        gpumem__doctor_path(cfg, config, sizeof config, "/boot/config-%s", release);
        /* The release names a file only when it is one name: under a root,
         * "../../home/x" would read (and a snapshot pack) a file no check
         * is about. */
        if (release[0] && !strchr(release, '/') && gpumem__doctor_read_file(cfg, config, conf, sizeof conf) > 0) {
            p2pdma = strstr(conf, "CONFIG_PCI_P2PDMA=y") != NULL;
            dmabuf = strstr(conf, "CONFIG_DMA_SHARED_BUFFER=y") != NULL;
        }
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "p2p.kernel", gdr ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
            gdr ? "" : "install GDRCopy and load its module (insmod gdrdrv.ko, or its packages' service)",
            "kernel %s; gdrdrv %s, nvidia-peermem %s; P2PDMA %s, dma-buf %s", release[0] ? release : "unknown",
            gdr ? "loaded" : "not loaded", peermem ? "loaded" : "not loaded",
            p2pdma < 0 ? "unknown" : p2pdma ? "built in" : "not built in",
            dmabuf < 0 ? "unknown" : dmabuf ? "built in" : "not built in"));
    }
    return GPUMEM_OK;
}

/* ---- io_uring -------------------------------------------------------------- */

/* printf at out + *used, never past bytes; *used grows by what was written. */
static void gpumem__doctor_append(char *out, size_t bytes, size_t *used, const char *fmt, ...) {
    va_list ap;
    int n;
    if (*used >= bytes) return;
    va_start(ap, fmt);
    n = vsnprintf(out + *used, bytes - *used, fmt, ap);
    va_end(ap);
    *used = n < 0 ? bytes : *used + (size_t)n < bytes ? *used + (size_t)n : bytes;
}

/* A controller's transport and state from sysfs (dir: .../nvmeK, under
 * cfg's root already), "tcp live"; returns whether it is live. */
static int gpumem__doctor_ctrl_state(const gpumem_doctor_config *cfg, const char *dir, char *out, size_t bytes) {
    char path[600], transport[32], state[32];
    size_t used = 0;
    gpumem__doctor_append(path, sizeof path, &used, "%s/transport", dir);
    if (!gpumem__doctor_read_line(cfg, path, transport, sizeof transport) || !transport[0]) strcpy(transport, "?");
    used = 0;
    gpumem__doctor_append(path, sizeof path, &used, "%s/state", dir);
    if (!gpumem__doctor_read_line(cfg, path, state, sizeof state) || !state[0]) strcpy(state, "?");
    used = 0;
    gpumem__doctor_append(out, bytes, &used, "%s %s", transport, state);
    return strcmp(state, "live") == 0;
}

/* How a generic device reaches its namespace (uring.transport), appended
 * to out. Its sysfs parent (nvme-generic/ngXnY/device) is a controller,
 * nvmeK (one path, no multipath: a PCIe SSD that is not multi-controller,
 * or nvme_core.multipath=N), or a subsystem, nvme-subsysN: the
 * native-multipath head, whose every controller is a path. Returns the
 * device's live paths (-1: nothing in sysfs); *paths gets how many. */
static int gpumem__doctor_ng_paths(const gpumem_doctor_config *cfg, const char *ng, char *out, size_t bytes,
                                   size_t *used, int *paths) {
    char path[600], parent[64], dir[512], one[80], list[256] = "";
    struct dirent **names;
    int n, i, live = 0;
    size_t at = 0, k;
    *paths = 0;
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/class/nvme-generic/%s/device", ng);
    if (!gpumem__doctor_link_name(cfg, path, parent, sizeof parent)) {
        gpumem__doctor_append(out, bytes, used, "/dev/%s: not in sysfs", ng);
        return -1;
    }
    if (strncmp(parent, "nvme-subsys", 11) != 0) {
        gpumem__doctor_path(cfg, dir, sizeof dir, "/sys/class/nvme/%s", parent);
        live = gpumem__doctor_ctrl_state(cfg, dir, one, sizeof one);
        *paths = 1;
        gpumem__doctor_append(out, bytes, used, "/dev/%s: %s (%s), multipath off", ng, one, parent);
        return live;
    }
    gpumem__doctor_path(cfg, dir, sizeof dir, "/sys/class/nvme-subsystem/%s", parent);
    n = gpumem__doctor_list(cfg, dir, &names, 0);
    for (i = 0; i < n; i++) {
        const char *d = names[i]->d_name;
        /* the controllers, nvmeK; not the head's block device nvmeKnM */
        if (strncmp(d, "nvme", 4) != 0 || !d[4] || strspn(d + 4, "0123456789") != strlen(d + 4)) continue;
        k = 0;
        gpumem__doctor_append(path, sizeof path, &k, "%s/%s", dir, d);
        live += gpumem__doctor_ctrl_state(cfg, path, one, sizeof one);
        ++*paths;
        gpumem__doctor_append(list, sizeof list, &at, "%s%s %s", at ? ", " : "", d, one);
    }
    gpumem__doctor_names_free(names, n);
    gpumem__doctor_append(out, bytes, used, "/dev/%s: multipath on, %d path%s (%s)", ng, *paths,
                          *paths == 1 ? "" : "s", list);
    return live;
}

gpumem_status gpumem_doctor_uring(const gpumem_doctor_config *cfg, gpumem_doctor_report *rep) {
    char path[512], release[128], text[64], ctl_names[256] = "", found[400] = "", fix[480];
    char ngs[16][32];
    struct dirent **names;
    int kernel, n, i, devices = 0, writable = 0, only_controller = 0, n_ngs = 0;
    size_t used = 0;
    if (!cfg || !rep) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    kernel = gpumem__doctor_kernel(cfg, release, sizeof release);
    /* NVMe passthrough over io_uring (IORING_OP_URING_CMD on /dev/ngXnY) came in 5.19. */
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
        rep, "uring.kernel", !kernel ? GPUMEM_DOCTOR_SKIP : kernel < 5019 ? GPUMEM_DOCTOR_FAIL : GPUMEM_DOCTOR_PASS,
        kernel && kernel < 5019 ? "a kernel of 5.19 or later (NVMe passthrough over io_uring)" : "",
        "kernel %s", kernel ? release : "release unknown (proc/sys/kernel/osrelease)"));

    gpumem__doctor_path(cfg, path, sizeof path, "/proc/sys/kernel/io_uring_disabled");
    if (!gpumem__doctor_read_line(cfg, path, text, sizeof text))
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "uring.disabled", GPUMEM_DOCTOR_PASS, "",
                                              "io_uring on (the kernel has no io_uring_disabled switch)"));
    else {
        long mode = strtol(text, NULL, 10), group = -1;
        int allowed;
        char gtext[32];
        gpumem__doctor_path(cfg, path, sizeof path, "/proc/sys/kernel/io_uring_group");
        if (gpumem__doctor_read_line(cfg, path, gtext, sizeof gtext)) group = strtol(gtext, NULL, 10);
        allowed = mode == 0 || (mode == 1 && (gpumem__doctor_uid(cfg) == 0 || (group >= 0 && (uint32_t)group == gpumem__doctor_gid(cfg))));
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "uring.disabled", allowed ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
            allowed ? "" : mode == 1 ? "as root: sysctl -w kernel.io_uring_disabled=0, or put the user in the group "
                                       "kernel.io_uring_group names"
                                     : "as root: sysctl -w kernel.io_uring_disabled=0 (kernel.io_uring_disabled=0 in "
                                       "/etc/sysctl.d/ for good)",
            "kernel.io_uring_disabled=%ld%s", mode,
            mode == 0 ? "" : mode == 1 ? " (only root and kernel.io_uring_group)" : " (off for everyone)"));
    }

    /* Generic namespace devices: those of the named controller (its
     * instance numbers, ",0,3,", from sysfs nvme/nvmeX), or all. */
    if (cfg->pci_addr && cfg->pci_addr[0]) {
        strcpy(ctl_names, ",");
        gpumem__doctor_path(cfg, path, sizeof path, "/sys/bus/pci/devices/%s/nvme", cfg->pci_addr);
        n = gpumem__doctor_list(cfg, path, &names, 0);
        for (i = 0; i < n; i++)
            if (!strncmp(names[i]->d_name, "nvme", 4) && strlen(ctl_names) + strlen(names[i]->d_name) < sizeof ctl_names)
                strcat(strcat(ctl_names, names[i]->d_name + 4), ",");
        gpumem__doctor_names_free(names, n);
        only_controller = 1;
    }
    gpumem__doctor_path(cfg, path, sizeof path, "/dev");
    n = gpumem__doctor_list(cfg, path, &names, 1);
    for (i = 0; i < n; i++) {
        const char *d = names[i]->d_name;
        char instance[32];
        struct stat sb;
        int owned;
        size_t k = strspn(d + 2, "0123456789");
        if (strncmp(d, "ng", 2) != 0 || !k || d[2 + k] != 'n' || k > 8) continue;
        snprintf(instance, sizeof instance, ",%.*s,", (int)k, d + 2);
        if (only_controller && !strstr(ctl_names, instance)) continue;
        gpumem__doctor_path(cfg, path, sizeof path, "/dev/%s", d);
        if ((owned = gpumem__doctor_stat_owned(cfg, path, &sb, rep)) == -2) {
            gpumem__doctor_names_free(names, n);
            return GPUMEM_EINVAL;
        }
        if (owned != 0) continue;
        devices++;
        if (n_ngs < 16) gpumem__doctor_copy(ngs[n_ngs++], sizeof ngs[0], d);
        if (gpumem__doctor_user_rw(cfg, &sb)) writable++;
        if (used < sizeof found)
            used += (size_t)snprintf(found + used, sizeof found - used, "%s/dev/%s (%u:%u %03o)", devices > 1 ? ", " : "",
                                     d, (unsigned)sb.st_uid, (unsigned)sb.st_gid, (unsigned)(sb.st_mode & 0777));
    }
    gpumem__doctor_names_free(names, n);
    if (!devices)
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "uring.ngdev", GPUMEM_DOCTOR_FAIL,
            "the SSD must be on the kernel's nvme driver (kernel 5.13+ makes /dev/ngXnY); lspci -k shows its driver",
            "no /dev/ngXnY%s%s", only_controller ? " for " : "", only_controller ? cfg->pci_addr : ""));
    else {
        snprintf(fix, sizeof fix, "as root: chown %u /dev/ngXnY, or a udev rule: KERNEL==\"ng*\", OWNER=\"USER\"",
                 gpumem__doctor_uid(cfg));
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(rep, "uring.ngdev", writable == devices ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_FAIL,
                                              writable == devices ? "" : fix, "%s; user %u can open %d of %d", found,
                                              gpumem__doctor_uid(cfg), writable, devices));
    }

    gpumem__doctor_path(cfg, path, sizeof path, "/sys/module/nvme_fabrics");
    GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
        rep, "uring.fabrics", gpumem__doctor_exists(cfg, path) ? GPUMEM_DOCTOR_PASS : GPUMEM_DOCTOR_SKIP,
        gpumem__doctor_exists(cfg, path) ? "" : "for remote namespaces (NVMe over TCP/RDMA): modprobe nvme-fabrics",
        "nvme-fabrics %s", gpumem__doctor_exists(cfg, path) ? "loaded" : "not loaded (local SSDs do not need it)"));

    /* What each generic device goes over, one finding a device: the
     * transport of each path (pcie, tcp, rdma, fc, loop) and whether it is
     * a multipath head. A lost path's commands in flight end "command
     * aborted by host" (the kernel requeues no passthrough command on
     * another path); new ones take the live paths (docs/uring.md). */
    gpumem__doctor_path(cfg, path, sizeof path, "/sys/module/nvme_core/parameters/multipath");
    if (!gpumem__doctor_read_line(cfg, path, text, sizeof text) || !text[0]) strcpy(text, "unknown");
    if (!n_ngs)
        return gpumem__doctor_say(rep, "uring.transport", GPUMEM_DOCTOR_SKIP, "",
                                  "no /dev/ngXnY to judge (nvme_core.multipath=%s)", text);
    for (i = 0; i < n_ngs; i++) {
        char how[360];
        int paths, live;
        used = 0;
        live = gpumem__doctor_ng_paths(cfg, ngs[i], how, sizeof how, &used, &paths);
        GPUMEM__DOCTOR_TRY(gpumem__doctor_say(
            rep, "uring.transport", live <= 0 ? GPUMEM_DOCTOR_FAIL : live < paths ? GPUMEM_DOCTOR_WARN : GPUMEM_DOCTOR_PASS,
            live < 0 ? "the kernel's nvme driver shows no controller for it: ls -l /sys/class/nvme-generic/"
            : live == 0 ? "no live path: every command fails (host pathing error); nvme list-subsys shows the "
                          "controllers; reconnect (nvme connect) or wait for the kernel's reconnect"
            : live < paths ? "a path is down: I/O takes the others, and what it held ended \"command aborted by host\"; "
                             "reconnect it (nvme connect) or wait for the kernel's reconnect"
                           : "",
            "%s (nvme_core.multipath=%s)", how, text));
    }
    return GPUMEM_OK;
}

/* ---- snapshot ------------------------------------------------------------------------ */

/* One entry of the archive: a directory, a file (content read from the
 * root when it is written, or `data` made here) or a symbolic link. */
typedef struct gpumem__doctor_entry {
    char *path;      /* relative to the root */
    char type;       /* 'd', 'f', 'l' */
    char *target;    /* link target, or made content (data_bytes) */
    size_t data_bytes;
    int read;        /* 'f': the content is the root's file */
    int owner;       /* uid, gid and mode go to gpumem-doctor/owners */
    unsigned uid, gid, mode;
    char *owner_key; /* the path as the check named it */
} gpumem__doctor_entry;

typedef struct gpumem__doctor_snap {
    const gpumem_doctor_config *cfg;
    size_t root_len;
    gpumem__doctor_entry *e;
    size_t n, cap;
    unsigned char *tar; /* the archive, before compression */
    size_t tar_n, tar_cap;
    int oom;
} gpumem__doctor_snap;

static char *gpumem__doctor_strdup(const char *s, size_t n) {
    char *c = (char *)GPUMEM_MALLOC(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = 0;
    }
    return c;
}

/* The entry for `path`, made as `type` if new. An existing entry keeps its
 * type: a path is one thing on one machine. */
static gpumem__doctor_entry *gpumem__doctor_entry_at(gpumem__doctor_snap *sn, const char *path, char type) {
    size_t i;
    gpumem__doctor_entry *e;
    for (i = 0; i < sn->n; i++)
        if (!strcmp(sn->e[i].path, path)) return &sn->e[i];
    if (sn->n == sn->cap) {
        size_t cap = sn->cap ? sn->cap * 2 : 128;
        gpumem__doctor_entry *grown = (gpumem__doctor_entry *)GPUMEM_MALLOC(cap * sizeof *grown);
        if (!grown) return sn->oom = 1, (gpumem__doctor_entry *)NULL;
        if (sn->n) memcpy(grown, sn->e, sn->n * sizeof *grown);
        GPUMEM_FREE(sn->e);
        sn->e = grown;
        sn->cap = cap;
    }
    e = &sn->e[sn->n];
    memset(e, 0, sizeof *e);
    if (!(e->path = gpumem__doctor_strdup(path, strlen(path)))) return sn->oom = 1, (gpumem__doctor_entry *)NULL;
    e->type = type;
    sn->n++;
    return e;
}

/* The symbolic link at `rel` (relative to the root) into the archive, made
 * relative where it pointed into the root by an absolute path, so that it
 * works wherever the snapshot is unpacked. Where it leads, relative to the
 * root, in `to` (bytes); 0 if it leads out of the root. */
static int gpumem__doctor_snap_link(gpumem__doctor_snap *sn, const char *rel, char *to, size_t bytes) {
    char full[1024], target[1024], made[1024];
    const char *root = sn->cfg->root;
    size_t used = 0;
    ssize_t n;
    const char *p;
    gpumem__doctor_entry *e;
    snprintf(full, sizeof full, "%.*s/%s", (int)sn->root_len, root, rel);
    n = readlink(full, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    if (target[0] != '/') {
        gpumem__doctor_copy(made, sizeof made, target);
        snprintf(to, bytes, "%s", target); /* relative to the link's directory: the caller joins */
    } else {
        if (sn->root_len && (strncmp(target, root, sn->root_len) != 0 || target[sn->root_len] != '/')) return 0;
        for (p = rel; *p; p++) /* up from the link's directory to the root */
            if (*p == '/' && used + 4 < sizeof made) used += (size_t)snprintf(made + used, sizeof made - used, "../");
        snprintf(made + used, sizeof made - used, "%s", target + sn->root_len + 1);
        snprintf(to, bytes, "/%s", target + sn->root_len + 1); /* from the root */
    }
    e = gpumem__doctor_entry_at(sn, rel, 'l');
    if (e && e->type == 'l' && !e->target && !(e->target = gpumem__doctor_strdup(made, strlen(made)))) sn->oom = 1;
    return 1;
}

/* a, sep and b one after the other in out; 0 if they do not fit. */
static int gpumem__doctor_join(char *out, size_t bytes, const char *a, const char *sep, const char *b) {
    size_t na = strlen(a), ns = strlen(sep), nb = strlen(b);
    if (na + ns + nb >= bytes) return 0;
    memmove(out, a, na);
    memcpy(out + na, sep, ns);
    memmove(out + na + ns, b, nb + 1);
    return 1;
}

/* `rel` with every symbolic link on the way followed (the last one too when
 * follow_last), each added to the archive as a link; the result relative to
 * the root in `real`. proc/self stays proc/self: it is this process, under
 * whatever number. 0 when it leaves the root or goes round in circles. */
static int gpumem__doctor_snap_resolve(gpumem__doctor_snap *sn, const char *rel, int follow_last, char *real,
                                       size_t bytes) {
    char todo[2048], cur[1024] = "", cand[1024], full[1280], to[1024], rest[2048];
    int hops = 0;
    struct stat sb;
    gpumem__doctor_copy(todo, sizeof todo, rel);
    while (todo[0]) {
        char *slash = strchr(todo, '/'), comp[256];
        size_t clen = slash ? (size_t)(slash - todo) : strlen(todo);
        int last;
        gpumem__doctor_copy(rest, sizeof rest, slash ? slash + 1 : "");
        snprintf(comp, sizeof comp, "%.*s", (int)clen, todo);
        memmove(todo, rest, strlen(rest) + 1);
        if (!comp[0] || !strcmp(comp, ".")) continue;
        if (!strcmp(comp, "..")) {
            char *up = strrchr(cur, '/');
            if (up) *up = 0;
            else cur[0] = 0;
            continue;
        }
        if (!gpumem__doctor_join(cand, sizeof cand, cur, cur[0] ? "/" : "", comp)) return 0;
        last = !todo[0];
        snprintf(full, sizeof full, "%.*s/%s", (int)sn->root_len, sn->cfg->root, cand);
        if ((!last || follow_last) && strcmp(cand, "proc/self") != 0 && lstat(full, &sb) == 0 && S_ISLNK(sb.st_mode)) {
            if (++hops > 40 || !gpumem__doctor_snap_link(sn, cand, to, sizeof to)) return 0;
            if (to[0] == '/') cur[0] = 0;
            if (!gpumem__doctor_join(rest, sizeof rest, to[0] == '/' ? to + 1 : to, todo[0] ? "/" : "", todo)) return 0;
            gpumem__doctor_copy(todo, sizeof todo, rest);
            continue;
        }
        gpumem__doctor_copy(cur, sizeof cur, cand);
    }
    snprintf(real, bytes, "%s", cur);
    return 1;
}

/* One recorded read into archive entries. */
static void gpumem__doctor_snap_add(gpumem__doctor_snap *sn, char kind, const char *rel) {
    char real[1024], full[1280], child[1024];
    struct stat sb;
    gpumem__doctor_entry *e;
    if (!gpumem__doctor_snap_resolve(sn, rel, kind != GPUMEM__DOCTOR_LINK, real, sizeof real) || !real[0]) return;
    snprintf(full, sizeof full, "%.*s/%s", (int)sn->root_len, sn->cfg->root, real);
    if (lstat(full, &sb) != 0) return; /* the check found nothing there; nor will the snapshot */
    if (S_ISLNK(sb.st_mode)) { /* readlink of the last component */
        char to[1024];
        gpumem__doctor_snap_link(sn, real, to, sizeof to);
        return;
    }
    if (S_ISDIR(sb.st_mode)) {
        struct dirent **names;
        int n, i;
        gpumem__doctor_entry_at(sn, real, 'd');
        if (kind != GPUMEM__DOCTOR_LIST && kind != GPUMEM__DOCTOR_LIST_NG) return;
        n = scandir(full, &names, kind == GPUMEM__DOCTOR_LIST_NG ? gpumem__doctor_only_ng : gpumem__doctor_skip_dots,
                    alphasort);
        for (i = 0; i < n; i++) {
            snprintf(child, sizeof child, "%.760s/%.255s", real, names[i]->d_name);
            snprintf(full, sizeof full, "%.*s/%s", (int)sn->root_len, sn->cfg->root, child);
            if (lstat(full, &sb) == 0 && S_ISLNK(sb.st_mode)) {
                char to[1024];
                gpumem__doctor_snap_link(sn, child, to, sizeof to);
            } else if (lstat(full, &sb) == 0)
                gpumem__doctor_entry_at(sn, child, S_ISDIR(sb.st_mode) ? 'd' : 'f');
        }
        gpumem__doctor_names_free(names, n < 0 ? 0 : n);
        return;
    }
    /* a file, a device file (kept as an empty file), or anything else */
    if (!(e = gpumem__doctor_entry_at(sn, real, 'f')) || e->type != 'f') return;
    if (kind == GPUMEM__DOCTOR_FILE && S_ISREG(sb.st_mode)) e->read = 1;
    if (kind == GPUMEM__DOCTOR_OWNER && !e->owner) {
        gpumem_doctor_config plain = *sn->cfg;
        char path[1024];
        plain.record = NULL;
        snprintf(path, sizeof path, "%.*s/%s", (int)sn->root_len, sn->cfg->root, rel);
        if (gpumem__doctor_stat_owned(&plain, path, &sb, NULL) != 0) return;
        if (!(e->owner_key = gpumem__doctor_strdup(rel, strlen(rel)))) {
            sn->oom = 1;
            return;
        }
        e->owner = 1;
        e->uid = (unsigned)sb.st_uid;
        e->gid = (unsigned)sb.st_gid;
        e->mode = (unsigned)(sb.st_mode & 07777);
    }
}

/* A made file (gpumem-doctor/cuda, gpumem-doctor/owners). */
static void gpumem__doctor_snap_made(gpumem__doctor_snap *sn, const char *path, const char *text, size_t n) {
    gpumem__doctor_entry *e = gpumem__doctor_entry_at(sn, path, 'f');
    if (!e) return;
    GPUMEM_FREE(e->target);
    e->read = 0;
    if (!(e->target = gpumem__doctor_strdup(text, n))) sn->oom = 1;
    e->data_bytes = n;
}

static void gpumem__doctor_snap_put(gpumem__doctor_snap *sn, const void *p, size_t n) {
    if (sn->oom) return;
    if (sn->tar_n + n > sn->tar_cap) {
        size_t cap = sn->tar_cap ? sn->tar_cap : 1u << 16;
        unsigned char *grown;
        while (cap < sn->tar_n + n) cap *= 2;
        if (!(grown = (unsigned char *)GPUMEM_MALLOC(cap))) {
            sn->oom = 1;
            return;
        }
        if (sn->tar_n) memcpy(grown, sn->tar, sn->tar_n);
        GPUMEM_FREE(sn->tar);
        sn->tar = grown;
        sn->tar_cap = cap;
    }
    if (p) memcpy(sn->tar + sn->tar_n, p, n);
    else memset(sn->tar + sn->tar_n, 0, n);
    sn->tar_n += n;
}

/* One ustar header (POSIX.1-2001, "ustar\0" "00"): octal fields, the
 * checksum the sum of the header's bytes with its own field as spaces. */
static void gpumem__doctor_tar_header(gpumem__doctor_snap *sn, const char *name, char type, uint64_t size,
                                      unsigned mode, const char *link) {
    unsigned char h[512];
    unsigned sum = 0, i;
    memset(h, 0, sizeof h);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", 0u);
    snprintf((char *)h + 116, 8, "%07o", 0u);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)time(NULL));
    h[156] = (unsigned char)type;
    if (link) snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    for (i = 0; i < sizeof h; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    gpumem__doctor_snap_put(sn, h, sizeof h);
}

/* A member: names or link targets past ustar's 100 bytes go first in a pax
 * extended header ("LEN path=...\n", LEN counting itself). */
static void gpumem__doctor_tar_member(gpumem__doctor_snap *sn, const char *name, char type, const void *data,
                                      size_t size, unsigned mode, const char *link) {
    char pax[2400];
    size_t used = 0;
    int k;
    const char *keys[2] = {"path", "linkpath"}, *vals[2];
    vals[0] = name;
    vals[1] = link;
    for (k = 0; k < 2; k++) {
        size_t body, len;
        if (!vals[k] || strlen(vals[k]) < 100) continue;
        body = 1 + strlen(keys[k]) + 1 + strlen(vals[k]) + 1; /* " key=value\n" */
        for (len = body + 1;;) { /* the length counts its own digits */
            size_t d = len < 10 ? 1 : len < 100 ? 2 : len < 1000 ? 3 : 4;
            if (body + d == len) break;
            len = body + d;
        }
        if (used + len < sizeof pax) used += (size_t)snprintf(pax + used, sizeof pax - used, "%zu %s=%s\n", len, keys[k], vals[k]);
    }
    if (used) {
        gpumem__doctor_tar_header(sn, "././@PaxHeader", 'x', used, 0644, NULL);
        gpumem__doctor_snap_put(sn, pax, used);
        gpumem__doctor_snap_put(sn, NULL, (512 - used % 512) % 512);
    }
    gpumem__doctor_tar_header(sn, name, type, size, mode, link);
    if (size) {
        gpumem__doctor_snap_put(sn, data, size);
        gpumem__doctor_snap_put(sn, NULL, (512 - size % 512) % 512);
    }
}

/* CRC-32 of gzip (the reflected polynomial 0xEDB88320), bit by bit: the
 * archive is small. */
static uint32_t gpumem__doctor_crc32(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (b = 0; b < 8; b++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* The archive as gzip (RFC 1952) with deflate's stored blocks (RFC 1951,
 * BTYPE 00): no compression, which any gunzip reads. */
static int gpumem__doctor_write_gzip(FILE *f, const unsigned char *p, size_t n) {
    static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    unsigned char b[8];
    uint32_t crc = gpumem__doctor_crc32(p, n);
    size_t at = 0;
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    do {
        size_t len = n - at > 65535 ? 65535 : n - at;
        b[0] = (unsigned char)(at + len == n); /* BFINAL on the last block, BTYPE 00 */
        b[1] = (unsigned char)(len & 0xFF);
        b[2] = (unsigned char)(len >> 8);
        b[3] = (unsigned char)(~len & 0xFF);
        b[4] = (unsigned char)((~len >> 8) & 0xFF);
        ok = ok && fwrite(b, 1, 5, f) == 5 && (len == 0 || fwrite(p + at, 1, len, f) == len);
        at += len;
    } while (ok && at < n);
    for (at = 0; at < 4; at++) {
        b[at] = (unsigned char)(crc >> (8 * at));
        b[4 + at] = (unsigned char)((uint32_t)n >> (8 * at));
    }
    return ok && fwrite(b, 1, 8, f) == 8;
}

static int gpumem__doctor_entry_cmp(const void *a, const void *b) {
    return strcmp(((const gpumem__doctor_entry *)a)->path, ((const gpumem__doctor_entry *)b)->path);
}

/* The content of a file the checks read; of /proc/cmdline only the words
 * that name the IOMMU (the rest can hold anything, passwords included). */
static char *gpumem__doctor_snap_content(gpumem__doctor_snap *sn, const char *rel, size_t *n) {
    char full[1280];
    size_t cap = 4096, got = 0;
    char *buf = (char *)GPUMEM_MALLOC(cap), *grown;
    FILE *f;
    snprintf(full, sizeof full, "%.*s/%s", (int)sn->root_len, sn->cfg->root, rel);
    if (!buf || !(f = fopen(full, "rb"))) {
        GPUMEM_FREE(buf);
        return NULL;
    }
    for (;;) {
        got += fread(buf + got, 1, cap - got - 1, f);
        if (got < cap - 1 || cap >= (8u << 20)) break;
        if (!(grown = (char *)GPUMEM_MALLOC(cap * 2))) break;
        memcpy(grown, buf, got);
        GPUMEM_FREE(buf);
        buf = grown;
        cap *= 2;
    }
    fclose(f);
    buf[got] = 0;
    if (!strcmp(rel, "proc/cmdline")) {
        char *w, *save = NULL, *kept;
        size_t k = 0;
        /* The words of what the check reads (its first bytes, cut where it
         * cuts: a word cut there is cut here too), every line: each word
         * the check looks for holds "iommu" and no blank, so leaving the
         * other words out and joining these changes nothing it finds. */
        if (got > GPUMEM__DOCTOR_CMDLINE_BYTES - 1) buf[got = GPUMEM__DOCTOR_CMDLINE_BYTES - 1] = 0;
        if (!(kept = (char *)GPUMEM_MALLOC(got + 2))) return GPUMEM_FREE(buf), (char *)NULL;
        for (w = strtok_r(buf, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
            if (strstr(w, "iommu")) k += (size_t)sprintf(kept + k, "%s%s", k ? " " : "", w);
        kept[k++] = '\n';
        kept[k] = 0;
        GPUMEM_FREE(buf);
        buf = kept;
        got = k;
    }
    *n = got;
    return buf;
}

gpumem_status gpumem_doctor_snapshot(const gpumem_doctor_config *cfg, const char *out_tgz, gpumem_doctor_report *rep) {
    gpumem__doctor_snap sn;
    gpumem_doctor_record *rec;
    gpumem_status st = GPUMEM_OK;
    char *tmp = NULL, text[2048], *owners = NULL;
    size_t i, owners_n = 0;
    FILE *f = NULL;
    int fd;
    if (!cfg || !cfg->record || !out_tgz || !rep) return GPUMEM_ENULL;
    GPUMEM__DOCTOR_RESOLVE(cfg);
    rec = cfg->record;
    memset(&sn, 0, sizeof sn);
    sn.cfg = cfg;
    sn.root_len = gpumem__doctor_root_len(cfg);
    sn.oom = rec->lost_;
    for (i = 0; i < rec->n_; i++) gpumem__doctor_snap_add(&sn, rec->paths_[i][0], rec->paths_[i] + 1);
    if (rec->have_facts_) { /* what the live driver said, in the form gpumem__doctor_probe_file reads */
        const gpumem_doctor_gpu_facts *g = &rec->facts_;
        int k = snprintf(text, sizeof text,
                         "# gpumem-doctor snapshot: what the CUDA driver and NVML said (docs/doctor.md)\n"
                         "driver=%d\nwhy_not=%s\ndriver_version=%s\ncuda_version=%d\ndevices=%d\nname=%s\npci=%s\n"
                         "host_atomics=%d\npageable=%d\ncompute_mode=%d\nrdma=%d\nmig=%d\npersistence=%d\n"
                         "bar1_total=%llu\nbar1_free=%llu\n",
                         g->driver, g->why_not, g->driver_version, g->cuda_version, g->devices, g->name, g->pci,
                         g->host_atomics, g->pageable, g->compute_mode, g->rdma, g->mig, g->persistence,
                         (unsigned long long)g->bar1_total, (unsigned long long)g->bar1_free);
        if (gpumem__doctor_cc_known(g) && k > 0 && (size_t)k < sizeof text) /* else unknown there too */
            k += snprintf(text + k, sizeof text - (size_t)k, "cc=%d.%d\n", g->cc_major, g->cc_minor);
        if (g->lazy >= 0 && k > 0 && (size_t)k < sizeof text)
            k += snprintf(text + k, sizeof text - (size_t)k, "loading=%s\n", g->lazy ? "lazy" : "eager");
        for (i = 0; i < (size_t)k && i < sizeof text; i++) /* one value a line, whatever a driver's message held */
            if (text[i] == '\r') text[i] = ' ';
        gpumem__doctor_snap_made(&sn, "gpumem-doctor/cuda", text, strlen(text));
    }
    for (i = 0; i < sn.n; i++) /* the owners the checks judged */
        if (sn.e[i].owner) {
            char key[1100];
            int k;
            gpumem__doctor_owner_escape(sn.e[i].owner_key, key, sizeof key);
            k = snprintf(text, sizeof text, "%s %u %u %04o\n", key, sn.e[i].uid, sn.e[i].gid, sn.e[i].mode);
            char *grown = (char *)GPUMEM_MALLOC(owners_n + (size_t)k + 80);
            if (!grown) {
                sn.oom = 1;
                break;
            }
            if (owners_n) memcpy(grown, owners, owners_n);
            else owners_n = (size_t)sprintf(grown, "# PATH UID GID MODE of files whose owner a check judges\n");
            memcpy(grown + owners_n, text, (size_t)k);
            owners_n += (size_t)k;
            GPUMEM_FREE(owners);
            owners = grown;
        }
    if (owners) gpumem__doctor_snap_made(&sn, "gpumem-doctor/owners", owners, owners_n);
    GPUMEM_FREE(owners);
    for (i = 0, owners_n = sn.n; i < owners_n; i++) { /* every directory above an entry, so that tar makes it */
        char *slash, parent[1024];
        gpumem__doctor_copy(parent, sizeof parent, sn.e[i].path);
        while ((slash = strrchr(parent, '/')) != NULL) {
            *slash = 0;
            gpumem__doctor_entry_at(&sn, parent, 'd');
        }
    }
    /* A directory before what it holds. Not with no entries: sn.e is NULL
     * then, and qsort's base must not be (undefined even for 0 elements). */
    if (sn.n > 1) qsort(sn.e, sn.n, sizeof *sn.e, gpumem__doctor_entry_cmp);
    for (i = 0; i < sn.n && !sn.oom; i++) {
        gpumem__doctor_entry *e = &sn.e[i];
        if (e->type == 'd') {
            snprintf(text, sizeof text, "%s/", e->path);
            gpumem__doctor_tar_member(&sn, text, '5', NULL, 0, 0755, NULL);
        } else if (e->type == 'l')
            gpumem__doctor_tar_member(&sn, e->path, '2', NULL, 0, 0777, e->target ? e->target : "");
        else if (e->read) {
            size_t n = 0;
            char *data = gpumem__doctor_snap_content(&sn, e->path, &n);
            if (data) gpumem__doctor_tar_member(&sn, e->path, '0', data, n, 0644, NULL);
            GPUMEM_FREE(data);
        } else
            gpumem__doctor_tar_member(&sn, e->path, '0', e->target, e->data_bytes, 0644, NULL);
    }
    gpumem__doctor_snap_put(&sn, NULL, 1024); /* two zero blocks end the archive */
    if (sn.oom) {
        snprintf(rep->error, sizeof rep->error, "snapshot %.200s: out of memory", out_tgz);
        st = GPUMEM_ENOMEM;
        goto out;
    }
    /* Whole or not at all: a temporary file in the same directory, synced,
     * then renamed over OUT. */
    if (!(tmp = (char *)GPUMEM_MALLOC(strlen(out_tgz) + 8))) {
        st = GPUMEM_ENOMEM;
        goto out;
    }
    sprintf(tmp, "%s.XXXXXX", out_tgz);
    if ((fd = mkstemp(tmp)) < 0 || !(f = fdopen(fd, "wb"))) {
        snprintf(rep->error, sizeof rep->error, "snapshot: cannot create %.200s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
        st = GPUMEM_ESYS;
        goto out;
    }
    if (!gpumem__doctor_write_gzip(f, sn.tar, sn.tar_n) || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        snprintf(rep->error, sizeof rep->error, "snapshot: cannot write %.200s: %s", tmp, strerror(errno));
        st = GPUMEM_ESYS;
    }
    if (fclose(f) != 0 && st == GPUMEM_OK) {
        snprintf(rep->error, sizeof rep->error, "snapshot: cannot write %.200s: %s", tmp, strerror(errno));
        st = GPUMEM_ESYS;
    }
    if (st == GPUMEM_OK && rename(tmp, out_tgz) != 0) {
        snprintf(rep->error, sizeof rep->error, "snapshot: cannot rename %.200s to %.80s: %s", tmp, out_tgz,
                 strerror(errno));
        st = GPUMEM_ESYS;
    }
    if (st != GPUMEM_OK) unlink(tmp);
out:
    for (i = 0; i < sn.n; i++) {
        GPUMEM_FREE(sn.e[i].path);
        GPUMEM_FREE(sn.e[i].target);
        GPUMEM_FREE(sn.e[i].owner_key);
    }
    GPUMEM_FREE(sn.e);
    GPUMEM_FREE(sn.tar);
    GPUMEM_FREE(tmp);
    return st;
}

#endif /* GPUMEM_IMPLEMENTATION */
#endif /* Linux host */
#endif /* GPUMEM_DOCTOR_H */
