/* Criterion tests of the doctor (issue 33, gpumem_doctor.h and
 * build/gpumem-doctor): each failure mode the issue names on a fake machine
 * built in a temporary directory (--root), expecting the right verdict and
 * fix, and beside each a machine that passes the same check, so that no
 * check passes vacuously. Then the program: exit codes 0, 1, 2, --json that
 * python3 parses, and a malformed snapshot file named by file and line.
 * Snapshots (--snapshot): written by the library's own tar and gzip
 * writer, unpacked by the system's tar (a child process), judged again. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpumem_doctor.h"

#ifndef GPUMEM_BUILD_DIR
#define GPUMEM_BUILD_DIR "build"
#endif

TestSuite(doctor, .timeout = 60);

#define SSD "0000:65:00.0"
#define GPU "0000:17:00.0"

static char root[64];

/* ---- building a machine --------------------------------------------------- */

static void put(const char *rel, const char *text);
#define DOCTOR_MACHINE_CHECK(ok, ...) cr_assert(ok, __VA_ARGS__)
#include "tests/doctor_machine.h"

static void put(const char *rel, const char *text) {
    char path[512], dir[512];
    FILE *f;
    snprintf(dir, sizeof dir, "%s", rel);
    if (strrchr(dir, '/')) {
        *strrchr(dir, '/') = 0;
        mkdirs(dir);
    }
    snprintf(path, sizeof path, "%s/%s", root, rel);
    f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* A PCI device at sys/devices/CHAIN/ADDR with its class, driver (NULL:
 * none), IOMMU group (NULL: none) and BAR0 size. */
static void pci_device(const char *chain, const char *addr, const char *cls, const char *driver, const char *group,
                       unsigned long long bar0) {
    char dev[256], class_line[64], resource[256];
    snprintf(dev, sizeof dev, "sys/devices/%s/%s", chain, addr);
    snprintf(class_line, sizeof class_line, "%s\n", cls);
    snprintf(resource, sizeof resource, "0x00000000fe000000 0x%016llx 0x0000000000140204\n", 0xfe000000ull + bar0 - 1);
    doctor_pci_device(dev, addr, class_line,
                      bar0 ? resource : "0x0000000000000000 0x0000000000000000 0x0000000000000000\n", driver, group);
}

static void group_type(const char *group, const char *type) {
    char rel[128], text[32];
    snprintf(rel, sizeof rel, "sys/kernel/iommu_groups/%s/type", group);
    snprintf(text, sizeof text, "%s\n", type);
    put(rel, text);
}

static void memlock_limit(const char *soft) {
    char text[512];
    snprintf(text, sizeof text,
             "Limit                     Soft Limit           Hard Limit           Units     \n"
             "Max open files            1024                 1048576              files     \n"
             "Max locked memory         %-20s %-20s bytes     \n", soft, soft);
    put("proc/self/limits", text);
}

/* A machine whose SSD is ready for VFIO: NVMe class, vfio-pci, group 42
 * (translating) alone, /dev/vfio/42 owned by this user, memlock unlimited. */
static void vfio_machine(void) {
    put("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n");
    put("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
    mkdirs("sys/class/iommu/dmar0");
    memlock_limit("unlimited");
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "vfio-pci", "42", 16384);
    group_type("42", "DMA-FQ");
    put("dev/vfio/42", "");
    {
        char path[512];
        snprintf(path, sizeof path, "%s/dev/vfio/42", root);
        chmod(path, 0600);
    }
}

/* A GPU the way a snapshot describes it (gpumem-doctor/cuda). */
static void gpu_snapshot(const char *extra) {
    char text[1024];
    snprintf(text, sizeof text,
             "# what the CUDA driver and NVML said\n"
             "driver_version=570.86.15\ncuda_version=13000\ndevices=1\nname=NVIDIA H100 80GB HBM3\npci=" GPU "\n"
             "cc=9.0\nloading=eager\nhost_atomics=0\npageable=0\ncompute_mode=0\nrdma=1\nmig=0\npersistence=1\n"
             "bar1_total=137438953472\n%s",
             extra);
    put("gpumem-doctor/cuda", text);
    put("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Release Build\n");
}

static void setup(void) {
    snprintf(root, sizeof root, "/tmp/gpumem-doctor-test-XXXXXX");
    cr_assert(mkdtemp(root), "mkdtemp");
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

static gpumem_doctor_config config(void) {
    gpumem_doctor_config c = gpumem_doctor_config_default();
    c.root = root;
    c.pci_addr = SSD;
    c.uid = (uint32_t)getuid();
    c.gid = (uint32_t)getgid();
    return c;
}

/* The finding named `check`; fails the test when there is none. */
static const gpumem_doctor_finding *finding(const gpumem_doctor_report *rep, const char *check) {
    size_t i;
    for (i = 0; i < rep->n; i++)
        if (!strcmp(rep->findings[i].check, check)) return &rep->findings[i];
    cr_assert_fail("no finding %s among %zu", check, rep->n);
    return NULL;
}

static void expect(const gpumem_doctor_report *rep, const char *check, gpumem_doctor_verdict v, const char *in_fix,
                   const char *in_found) {
    const gpumem_doctor_finding *f = finding(rep, check);
    cr_assert_eq(f->verdict, v, "%s: verdict %s, expected %s (found: %s; fix: %s)", check,
                 gpumem_doctor_verdict_str(f->verdict), gpumem_doctor_verdict_str(v), f->found, f->fix);
    if (in_fix) cr_assert(strstr(f->fix, in_fix), "%s: fix \"%s\" lacks \"%s\"", check, f->fix, in_fix);
    if (in_found) cr_assert(strstr(f->found, in_found), "%s: found \"%s\" lacks \"%s\"", check, f->found, in_found);
    if (v == GPUMEM_DOCTOR_FAIL) cr_assert(f->fix[0], "%s fails without a fix", check);
}

static gpumem_doctor_report run_ssd(const gpumem_doctor_config *c) {
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_ssd(c, &rep), GPUMEM_OK, "%s", rep.error);
    return rep;
}

/* ---- the SSD ------------------------------------------------------------------ */

Test(doctor, vfio_ready_machine_passes, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    rep = run_ssd(&c);
    expect(&rep, "vfio.device", GPUMEM_DOCTOR_PASS, NULL, "NVMe");
    expect(&rep, "vfio.iommu", GPUMEM_DOCTOR_PASS, NULL, "translating");
    expect(&rep, "vfio.driver", GPUMEM_DOCTOR_PASS, NULL, "vfio-pci");
    expect(&rep, "vfio.group", GPUMEM_DOCTOR_PASS, NULL, NULL);
    expect(&rep, "vfio.dev", GPUMEM_DOCTOR_PASS, NULL, NULL);
    expect(&rep, "vfio.memlock", GPUMEM_DOCTOR_PASS, NULL, "unlimited");
    expect(&rep, "vfio.bar0", GPUMEM_DOCTOR_PASS, NULL, "16 KiB");
    cr_assert_neq(gpumem_doctor_worst(&rep), GPUMEM_DOCTOR_FAIL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, ssd_bound_to_nvme_fails_with_bind_commands, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "nvme", "42", 16384);
    rep = run_ssd(&c);
    expect(&rep, "vfio.driver", GPUMEM_DOCTOR_FAIL, "echo vfio-pci > /sys/bus/pci/devices/" SSD "/driver_override",
           "bound to nvme");
    expect(&rep, "vfio.driver", GPUMEM_DOCTOR_FAIL, "echo " SSD " > /sys/bus/pci/devices/" SSD "/driver/unbind", NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, uio_under_translating_iommu_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "uio_pci_generic", "42", 16384);
    rep = run_ssd(&c);
    expect(&rep, "vfio.driver", GPUMEM_DOCTOR_FAIL, "vfio-pci", "translating IOMMU");
    gpumem_doctor_report_free(&rep);

    /* The same device with a passthrough (identity) domain: the uio route. */
    group_type("42", "identity");
    put("proc/sys/vm/nr_hugepages", "64\n");
    rep = run_ssd(&c);
    expect(&rep, "vfio.iommu", GPUMEM_DOCTOR_PASS, NULL, "passthrough");
    expect(&rep, "vfio.driver", GPUMEM_DOCTOR_PASS, NULL, "uio_pci_generic");
    expect(&rep, "vfio.hugepages", GPUMEM_DOCTOR_PASS, NULL, "64 huge pages");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, no_iommu_without_huge_pages, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s/sys/kernel/iommu_groups' '%s/sys/class/iommu'", root, root);
        cr_assert_eq(system(cmd), 0);
    }
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "vfio-pci", NULL, 16384);
    put("proc/sys/vm/nr_hugepages", "0\n");
    rep = run_ssd(&c);
    expect(&rep, "vfio.iommu", GPUMEM_DOCTOR_FAIL, "intel_iommu=on", "off");
    expect(&rep, "vfio.hugepages", GPUMEM_DOCTOR_FAIL, "nr_hugepages", NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, group_member_on_a_driver_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    pci_device("pci0000:64/0000:64:02.0", "0000:65:00.1", "0x0c0330", "xhci_hcd", "42", 4096);
    rep = run_ssd(&c);
    expect(&rep, "vfio.group", GPUMEM_DOCTOR_FAIL, "/sys/kernel/iommu_groups/42/devices", "0000:65:00.1 (xhci_hcd)");
    gpumem_doctor_report_free(&rep);

    pci_device("pci0000:64/0000:64:02.0", "0000:65:00.1", "0x0c0330", "vfio-pci", "42", 4096);
    pci_device("pci0000:64", "0000:64:02.0", "0x060400", "pcieport", "42", 0); /* a bridge: allowed */
    rep = run_ssd(&c);
    expect(&rep, "vfio.group", GPUMEM_DOCTOR_PASS, NULL, NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, dev_vfio_not_the_users_fails_with_chown, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    c.uid = (uint32_t)getuid() + 1; /* someone else, never root */
    c.gid = (uint32_t)getgid() + 1;
    rep = run_ssd(&c);
    expect(&rep, "vfio.dev", GPUMEM_DOCTOR_FAIL, "chown", "cannot open");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, memlock_64k_fails_with_ulimit, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    memlock_limit("65536");
    c.uid = 1000; /* root is not limited; the user is */
    rep = run_ssd(&c);
    expect(&rep, "vfio.memlock", GPUMEM_DOCTOR_FAIL, "ulimit -l", "RLIMIT_MEMLOCK is 64 KiB");
    gpumem_doctor_report_free(&rep);

    /* One shallow pair with small transfers fits in 1 GiB. */
    memlock_limit("1073741824");
    c.pairs = 1;
    c.depth = 64;
    c.io_bytes = 4096;
    rep = run_ssd(&c);
    expect(&rep, "vfio.memlock", GPUMEM_DOCTOR_PASS, NULL, "1 GiB");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, no_such_device_and_wrong_class, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    c.pci_addr = "0000:99:00.0";
    rep = run_ssd(&c);
    expect(&rep, "vfio.device", GPUMEM_DOCTOR_FAIL, "lspci", SSD " (vfio-pci)"); /* lists the NVMe controllers */
    gpumem_doctor_report_free(&rep);
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x020000", "vfio-pci", "42", 0);
    c.pci_addr = SSD;
    rep = run_ssd(&c);
    expect(&rep, "vfio.device", GPUMEM_DOCTOR_FAIL, NULL, "not an NVMe controller");
    expect(&rep, "vfio.bar0", GPUMEM_DOCTOR_FAIL, "Above 4G", "not assigned");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, noiommu_mode_where_asked, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    c.noiommu = 1;
    put("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "N\n");
    rep = run_ssd(&c);
    expect(&rep, "vfio.noiommu", GPUMEM_DOCTOR_FAIL, "enable_unsafe_noiommu_mode=1", "off");
    gpumem_doctor_report_free(&rep);
    put("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "Y\n");
    rep = run_ssd(&c);
    expect(&rep, "vfio.noiommu", GPUMEM_DOCTOR_PASS, NULL, "on");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, vfio_open_is_not_tried_under_a_root, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    vfio_machine();
    c.open = 1; /* asked, every other check passes: still the described machine's controller is not here */
    rep = run_ssd(&c);
    cr_assert_neq(gpumem_doctor_worst(&rep), GPUMEM_DOCTOR_FAIL);
    expect(&rep, "vfio.open", GPUMEM_DOCTOR_SKIP, NULL, "not opened under --root");
    gpumem_doctor_report_free(&rep);
}

/* ---- the GPU ---------------------------------------------------------------------- */

static gpumem_doctor_report run_gpu(const gpumem_doctor_config *c, int gpu_controller) {
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_gpu(c, gpu_controller, &rep), GPUMEM_OK, "%s", rep.error);
    return rep;
}

Test(doctor, no_nvidia_driver, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep = run_gpu(&c, 1); /* an empty machine */
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_FAIL, "install the NVIDIA driver", "no NVIDIA driver");
    gpumem_doctor_report_free(&rep);

    /* This machine, through dlopen, with a library that is not there. */
    c.root = "/";
    c.cuda_lib = "/nonexistent/libcuda.so.1";
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_FAIL, "install the NVIDIA driver", "/nonexistent/libcuda.so.1");
    gpumem_doctor_report_free(&rep);

    c.root = root;
    gpu_snapshot("");
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_PASS, NULL, "570.86.15, CUDA 13.0");
    expect(&rep, "gpu.device", GPUMEM_DOCTOR_PASS, NULL, "compute capability 9.0");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, driver_and_arch_against_the_build, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    gpu_snapshot("");
    c.build_cuda = 14000;
    c.build_arch = 100;
    rep = run_gpu(&c, 0);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_FAIL, "CUDA 14.0", "the build needs CUDA 14.0");
    expect(&rep, "gpu.device", GPUMEM_DOCTOR_FAIL, "make CUDA_ARCH=sm_90", "targets sm_100");
    gpumem_doctor_report_free(&rep);
    c.build_cuda = 13020; /* same major, newer minor: minor-version compatibility */
    rep = run_gpu(&c, 0);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_WARN, NULL, "minor-version compatibility");
    gpumem_doctor_report_free(&rep);
    c.build_cuda = 12020;
    c.build_arch = 90;
    rep = run_gpu(&c, 0);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_PASS, NULL, NULL);
    expect(&rep, "gpu.device", GPUMEM_DOCTOR_PASS, NULL, NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, lazy_loading_fails_the_persistent_controller, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    gpu_snapshot("");
    {
        char path[512];
        FILE *f;
        snprintf(path, sizeof path, "%s/gpumem-doctor/cuda", root);
        f = fopen(path, "a");
        fputs("loading=lazy\n", f); /* the last value of a key wins */
        fclose(f);
    }
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.loading", GPUMEM_DOCTOR_FAIL, "CUDA_MODULE_LOADING=EAGER", "lazy");
    gpumem_doctor_report_free(&rep);
    rep = run_gpu(&c, 0); /* clients of a host controller: no persistent kernel */
    expect(&rep, "gpu.loading", GPUMEM_DOCTOR_PASS, NULL, "lazy");
    gpumem_doctor_report_free(&rep);
    gpu_snapshot("");
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.loading", GPUMEM_DOCTOR_PASS, NULL, "eager");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, small_bar1_for_128_pairs_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    gpu_snapshot("bar1_total=268435456\n");
    c.pairs = 128;
    c.io_bytes = 4096;
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.bar1", GPUMEM_DOCTOR_FAIL, "Resizable BAR", "BAR1 256 MiB");
    gpumem_doctor_report_free(&rep);
    c.pairs = 16;
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.bar1", GPUMEM_DOCTOR_PASS, NULL, "16 pairs");
    gpumem_doctor_report_free(&rep);
    /* From sysfs when the snapshot has no NVML answer: BAR1 is resource line 1. */
    gpu_snapshot("bar1_total=0\n");
    pci_device("pci0000:16/0000:16:01.0", GPU, "0x030200", "nvidia", NULL, 16u << 20);
    put("sys/devices/pci0000:16/0000:16:01.0/" GPU "/resource",
        "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
        "0x0000380000000000 0x000038000fffffff 0x000000000014220c\n");
    c.pairs = 128;
    rep = run_gpu(&c, 1);
    expect(&rep, "gpu.bar1", GPUMEM_DOCTOR_FAIL, NULL, "BAR1 256 MiB in all");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, modes_and_atomics, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    gpu_snapshot("compute_mode=2\nmig=1\npersistence=0\n");
    rep = run_gpu(&c, 0);
    expect(&rep, "gpu.compute_mode", GPUMEM_DOCTOR_FAIL, "-c DEFAULT", "prohibited");
    expect(&rep, "gpu.mig", GPUMEM_DOCTOR_WARN, "-mig 0", "on");
    expect(&rep, "gpu.persistence", GPUMEM_DOCTOR_WARN, "-pm 1", "off");
    expect(&rep, "gpu.host_atomics", GPUMEM_DOCTOR_WARN, "gpumem_swctl_config_gpu_clients", "no native");
    expect(&rep, "gpu.pageable", GPUMEM_DOCTOR_WARN, "cudaMalloc", NULL);
    gpumem_doctor_report_free(&rep);
    gpu_snapshot("host_atomics=1\npageable=1\n");
    rep = run_gpu(&c, 0);
    expect(&rep, "gpu.compute_mode", GPUMEM_DOCTOR_PASS, NULL, "default");
    expect(&rep, "gpu.mig", GPUMEM_DOCTOR_PASS, NULL, "off");
    expect(&rep, "gpu.persistence", GPUMEM_DOCTOR_PASS, NULL, "on");
    expect(&rep, "gpu.host_atomics", GPUMEM_DOCTOR_PASS, NULL, "has native");
    expect(&rep, "gpu.pageable", GPUMEM_DOCTOR_PASS, NULL, NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, malformed_snapshot_is_an_error_with_file_and_line, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    put("gpumem-doctor/cuda", "driver_version=570\n# fine\ncc=nine\n");
    cr_assert_eq(gpumem_doctor_gpu(&c, 1, &rep), GPUMEM_EINVAL);
    cr_assert(strstr(rep.error, "gpumem-doctor/cuda:3:"), "error: %s", rep.error);
    cr_assert(strstr(rep.error, "cc=nine"), "error: %s", rep.error);
    cr_assert_eq(rep.n, 0, "no findings from a bad file");
    put("gpumem-doctor/cuda", "driver_version=570\nno equals sign\n");
    cr_assert_eq(gpumem_doctor_gpu(&c, 1, &rep), GPUMEM_EINVAL);
    cr_assert(strstr(rep.error, "cuda:2: expected key=value"), "error: %s", rep.error);
    gpumem_doctor_report_free(&rep);
}

/* ---- peer to peer ------------------------------------------------------------------ */

/* Config space of a bridge with an ACS extended capability at 0x100 whose
 * control word is `control`. */
static void bridge(const char *chain, unsigned control) {
    unsigned char cs[4096];
    char path[512];
    FILE *f;
    mkdirs(chain);
    memset(cs, 0, sizeof cs);
    cs[0x100] = 0x0D; /* ACS, version 1, no next capability */
    cs[0x102] = 0x01;
    cs[0x104] = 0x1F; /* capabilities: V, B, R, C, U */
    cs[0x106] = (unsigned char)(control & 0xFF);
    cs[0x107] = (unsigned char)(control >> 8);
    snprintf(path, sizeof path, "%s/%s/config", root, chain);
    f = fopen(path, "wb");
    cr_assert(f);
    fwrite(cs, 1, sizeof cs, f);
    fclose(f);
}

/* GPU and SSD behind one switch: root port 00:01.0, upstream 01:00.0,
 * downstream ports 02:08.0 (GPU) and 02:10.0 (SSD). */
#define SWITCH "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
static void p2p_machine(unsigned gpu_port_acs) {
    vfio_machine();
    gpu_snapshot("");
    mkdirs("sys/module/gdrdrv");
    bridge("sys/devices/pci0000:00/0000:00:01.0", 0);
    bridge(SWITCH, 0);
    bridge(SWITCH "/0000:02:08.0", gpu_port_acs);
    bridge(SWITCH "/0000:02:10.0", 0);
    pci_device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0", GPU, "0x030200", "nvidia", NULL, 16u << 20);
    pci_device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0", SSD, "0x010802", "vfio-pci", "42", 16384);
}

static gpumem_doctor_report run_p2p(const gpumem_doctor_config *c) {
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_p2p(c, &rep), GPUMEM_OK, "%s", rep.error);
    return rep;
}

Test(doctor, acs_redirect_between_gpu_and_ssd_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    p2p_machine(0x001D); /* source validation, request and completion redirect, upstream forwarding */
    rep = run_p2p(&c);
    expect(&rep, "p2p.path", GPUMEM_DOCTOR_PASS, NULL, "behind one PCIe switch (0000:01:00.0)");
    expect(&rep, "p2p.acs", GPUMEM_DOCTOR_FAIL, "setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000", "0000:02:08.0");
    cr_assert_null(strstr(finding(&rep, "p2p.acs")->found, "0000:02:10.0"), "only the redirecting port is named");
    expect(&rep, "p2p.kernel", GPUMEM_DOCTOR_PASS, NULL, "gdrdrv loaded");
    expect(&rep, "p2p.iommu", GPUMEM_DOCTOR_WARN, "gpumem_nvmectl_dma_register", "translating");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, acs_without_redirect_passes, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    p2p_machine(0x0001); /* source validation only */
    rep = run_p2p(&c);
    expect(&rep, "p2p.acs", GPUMEM_DOCTOR_PASS, NULL, NULL);
    expect(&rep, "p2p.rdma", GPUMEM_DOCTOR_PASS, NULL, NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, p2p_across_root_ports_and_sockets, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    p2p_machine(0);
    bridge("sys/devices/pci0000:00/0000:00:03.0", 0x0004);
    pci_device("pci0000:00/0000:00:03.0", SSD, "0x010802", "vfio-pci", "42", 16384);
    rep = run_p2p(&c);
    expect(&rep, "p2p.path", GPUMEM_DOCTOR_WARN, "lspci -tv", "different root ports");
    expect(&rep, "p2p.acs", GPUMEM_DOCTOR_FAIL, "setpci -s 0000:00:03.0", NULL);
    gpumem_doctor_report_free(&rep);
    pci_device("pci0000:80/0000:80:01.0", SSD, "0x010802", "vfio-pci", "42", 16384);
    rep = run_p2p(&c);
    expect(&rep, "p2p.path", GPUMEM_DOCTOR_FAIL, "CPU socket", "across the CPU");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, p2p_without_gdrdrv_or_rdma_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    char cmd[256];
    p2p_machine(0);
    gpu_snapshot("rdma=0\n");
    snprintf(cmd, sizeof cmd, "rm -rf '%s/sys/module/gdrdrv'", root);
    cr_assert_eq(system(cmd), 0);
    rep = run_p2p(&c);
    expect(&rep, "p2p.kernel", GPUMEM_DOCTOR_FAIL, "GDRCopy", "gdrdrv not loaded");
    expect(&rep, "p2p.rdma", GPUMEM_DOCTOR_FAIL, NULL, "does not support GPUDirect RDMA");
    gpumem_doctor_report_free(&rep);
}

/* ---- io_uring ---------------------------------------------------------------------- */

static gpumem_doctor_report run_uring(const gpumem_doctor_config *c) {
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_uring(c, &rep), GPUMEM_OK, "%s", rep.error);
    return rep;
}

Test(doctor, io_uring_disabled_fails, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    put("proc/sys/kernel/osrelease", "6.6.15-amd64\n");
    put("proc/sys/kernel/io_uring_disabled", "2\n");
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "nvme", NULL, 16384);
    mkdirs("sys/devices/pci0000:64/0000:64:02.0/" SSD "/nvme/nvme1");
    put("dev/ng1n1", "");
    put("dev/ng11n1", ""); /* another controller's: not counted */
    rep = run_uring(&c);
    expect(&rep, "uring.disabled", GPUMEM_DOCTOR_FAIL, "sysctl -w kernel.io_uring_disabled=0", "off for everyone");
    expect(&rep, "uring.kernel", GPUMEM_DOCTOR_PASS, NULL, "6.6.15");
    expect(&rep, "uring.ngdev", GPUMEM_DOCTOR_PASS, NULL, "/dev/ng1n1");
    cr_assert_null(strstr(finding(&rep, "uring.ngdev")->found, "ng11n1"));
    gpumem_doctor_report_free(&rep);

    put("proc/sys/kernel/io_uring_disabled", "0\n");
    rep = run_uring(&c);
    expect(&rep, "uring.disabled", GPUMEM_DOCTOR_PASS, NULL, NULL);
    gpumem_doctor_report_free(&rep);
}

Test(doctor, old_kernel_and_no_ng_device, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    put("proc/sys/kernel/osrelease", "5.19.0-1-generic\n");
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "vfio-pci", NULL, 16384);
    rep = run_uring(&c);
    expect(&rep, "uring.kernel", GPUMEM_DOCTOR_PASS, NULL, "5.19");
    expect(&rep, "uring.ngdev", GPUMEM_DOCTOR_FAIL, "nvme driver", NULL);
    gpumem_doctor_report_free(&rep);
    put("proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
    rep = run_uring(&c);
    expect(&rep, "uring.kernel", GPUMEM_DOCTOR_FAIL, "5.19", "5.15");
    gpumem_doctor_report_free(&rep);
}

/* The uring.transport finding of /dev/NG (one a generic device). */
static const gpumem_doctor_finding *transport_of(const gpumem_doctor_report *rep, const char *ng) {
    char want[64];
    size_t i;
    snprintf(want, sizeof want, "/dev/%s: ", ng);
    for (i = 0; i < rep->n; i++)
        if (!strcmp(rep->findings[i].check, "uring.transport") && strstr(rep->findings[i].found, want))
            return &rep->findings[i];
    cr_assert_fail("no uring.transport finding for %s", ng);
    return NULL;
}

/* uring.transport (issue 46) names each generic device's transport and,
 * for a native-multipath head (its sysfs parent a subsystem), every path
 * with its state: a path down warns, no live path fails. The sysfs layout
 * is the one a Debian 6.1 guest showed with nvme-tcp and nvme-rdma paths
 * (make qemu-uring). */
Test(doctor, uring_transport_names_paths_and_multipath, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    const gpumem_doctor_finding *f;
    c.pci_addr = NULL; /* every /dev/ngXnY: remote ones have no PCI address */
    put("proc/sys/kernel/osrelease", "6.1.0-57-amd64\n");
    put("sys/module/nvme_core/parameters/multipath", "Y\n");
    put("dev/ng0n1", "");
    put("dev/ng1n1", "");
    put("sys/class/nvme/nvme0/transport", "pcie\n");
    put("sys/class/nvme/nvme0/state", "live\n");
    link_to("sys/class/nvme-generic/ng0n1/device", "sys/class/nvme/nvme0");
    put("sys/class/nvme-subsystem/nvme-subsys1/nvme1/transport", "tcp\n");
    put("sys/class/nvme-subsystem/nvme-subsys1/nvme1/state", "live\n");
    put("sys/class/nvme-subsystem/nvme-subsys1/nvme2/transport", "rdma\n");
    put("sys/class/nvme-subsystem/nvme-subsys1/nvme2/state", "connecting\n");
    mkdirs("sys/class/nvme-subsystem/nvme-subsys1/nvme1n1"); /* the head's block device: no path */
    link_to("sys/class/nvme-generic/ng1n1/device", "sys/class/nvme-subsystem/nvme-subsys1");
    rep = run_uring(&c);
    f = transport_of(&rep, "ng0n1");
    cr_expect_eq(f->verdict, GPUMEM_DOCTOR_PASS, "%s", f->found);
    cr_expect(strstr(f->found, "pcie live (nvme0), multipath off"), "%s", f->found);
    f = transport_of(&rep, "ng1n1");
    cr_expect_eq(f->verdict, GPUMEM_DOCTOR_WARN, "%s", f->found);
    cr_expect(strstr(f->found, "multipath on, 2 paths (nvme1 tcp live, nvme2 rdma connecting)"), "%s", f->found);
    cr_expect(strstr(f->found, "nvme_core.multipath=Y"), "%s", f->found);
    cr_expect(strstr(f->fix, "aborted by host"), "%s", f->fix);
    gpumem_doctor_report_free(&rep);

    put("sys/class/nvme-subsystem/nvme-subsys1/nvme2/state", "live\n");
    rep = run_uring(&c);
    cr_expect_eq(transport_of(&rep, "ng1n1")->verdict, GPUMEM_DOCTOR_PASS);
    gpumem_doctor_report_free(&rep);

    put("sys/class/nvme-subsystem/nvme-subsys1/nvme1/state", "resetting\n");
    put("sys/class/nvme-subsystem/nvme-subsys1/nvme2/state", "connecting\n");
    rep = run_uring(&c);
    f = transport_of(&rep, "ng1n1");
    cr_expect_eq(f->verdict, GPUMEM_DOCTOR_FAIL, "%s", f->found);
    cr_expect(strstr(f->fix, "no live path"), "%s", f->fix);
    gpumem_doctor_report_free(&rep);
}

/* ---- the report --------------------------------------------------------------------- */

static int json_valid(const char *file) {
    char cmd[640];
    snprintf(cmd, sizeof cmd, "python3 -m json.tool '%s' > /dev/null", file);
    return system(cmd) == 0;
}

Test(doctor, json_escapes_what_it_prints, .init = setup, .fini = teardown) {
    gpumem_doctor_report rep;
    char path[512];
    FILE *f;
    memset(&rep, 0, sizeof rep);
    gpumem_doctor_add(&rep, "x.quote", GPUMEM_DOCTOR_WARN, "a \"quoted\" \\ back\tslash\nand a newline \x01",
                      "echo \"ok\" \xE2\x9C\x93");
    snprintf(path, sizeof path, "%s/out.json", root);
    f = fopen(path, "w");
    gpumem_doctor_print_json(&rep, "all", "/", f);
    fclose(f);
    cr_assert(json_valid(path), "invalid JSON in %s", path);
    gpumem_doctor_report_free(&rep);
}

/* ---- the program -------------------------------------------------------------------- */

/* Runs build/gpumem-doctor with `args` (root substituted for each %s, at most two); its exit
 * status; stdout in root/stdout, stderr in root/stderr. */
static int doctor(const char *args) {
    char cmd[1024], expanded[512];
    int rc;
    snprintf(expanded, sizeof expanded, args, root, root);
    snprintf(cmd, sizeof cmd, "%s/gpumem-doctor %s > '%s/stdout' 2> '%s/stderr'", GPUMEM_BUILD_DIR, expanded, root,
             root);
    rc = system(cmd);
    cr_assert(WIFEXITED(rc), "%s did not exit", cmd);
    return WEXITSTATUS(rc);
}

static long out_bytes(const char *name) {
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", root, name);
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

Test(doctor, program_exit_codes_and_json, .init = setup, .fini = teardown) {
    char path[512];
    snprintf(path, sizeof path, "%s/stdout", root);
    vfio_machine();
    cr_assert_eq(doctor("--path vfio --pci " SSD " --root %s"), 0, "a ready SSD");
    cr_assert_eq(doctor("--path vfio --pci " SSD " --root %s --json"), 0);
    cr_assert(json_valid(path));

    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "nvme", "42", 16384);
    cr_assert_eq(doctor("--path vfio --pci " SSD " --root %s"), 1, "the SSD on nvme");
    cr_assert_eq(doctor("--path all --pci " SSD " --root %s --json"), 1);
    cr_assert(json_valid(path));

    cr_assert_eq(doctor("--path gpu-controller --root %s"), 1, "no NVIDIA driver");
    gpu_snapshot("");
    cr_assert_eq(doctor("--path gpu-clients --root %s"), 0, "a GPU that works");

    cr_assert_eq(doctor("--path nowhere --root %s"), 2);
    cr_assert_eq(out_bytes("stdout"), 0, "nothing on stdout for bad arguments");
    cr_assert_eq(doctor("--gpu x --root %s"), 2);
    cr_assert_eq(doctor("--root %s --pci"), 2);
    cr_assert_eq(doctor("--bogus --root %s"), 2);
    cr_assert_eq(doctor("--root %s/missing"), 2);

    put("gpumem-doctor/cuda", "loading=sometimes\n");
    cr_assert_eq(doctor("--path gpu-controller --root %s --json"), 2, "a malformed snapshot file");
    cr_assert_eq(out_bytes("stdout"), 0, "no partial output");
    cr_assert_gt(out_bytes("stderr"), 0);
}

/* ---- an honest report (issue 45) -------------------------------------------------- */

/* Whether root/stdout holds `text`. */
static int stdout_has(const char *text) {
    char path[512], buf[16384];
    size_t n;
    FILE *f;
    snprintf(path, sizeof path, "%s/stdout", root);
    f = fopen(path, "rb");
    cr_assert(f, "no %s", path);
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, text) != NULL;
}

/* Every finding of `checks` (NULL-ended) is there, a skip, saying "not run: " and why. */
static void expect_not_run(const gpumem_doctor_report *rep, const char *const *checks, const char *why) {
    char text[128];
    snprintf(text, sizeof text, "not run: %s", why);
    for (; *checks; checks++) expect(rep, *checks, GPUMEM_DOCTOR_SKIP, NULL, text);
}

Test(doctor, no_nvme_controller_is_the_finding, .init = setup, .fini = teardown) {
    static const char *const vfio_rest[] = {"vfio.iommu", "vfio.driver", "vfio.group", "vfio.dev", "vfio.memlock",
                                            "vfio.bar0", "vfio.open", NULL};
    static const char *const p2p_rest[] = {"p2p.acs", "p2p.iommu", "p2p.rdma", "p2p.kernel", NULL};
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    c.pci_addr = NULL;
    mkdirs("sys/bus/pci/devices"); /* a PCI bus with no NVMe controller on it */
    rep = run_ssd(&c);
    expect(&rep, "vfio.device", GPUMEM_DOCTOR_FAIL, "needs an NVMe SSD", "no NVMe controller on this machine");
    cr_assert(!strstr(finding(&rep, "vfio.device")->fix, "name the SSD"), "asks to name an SSD there is none of");
    expect_not_run(&rep, vfio_rest, "no NVMe controller on this machine");
    gpumem_doctor_report_free(&rep);
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_p2p(&c, &rep), GPUMEM_OK, "%s", rep.error);
    expect(&rep, "p2p.path", GPUMEM_DOCTOR_FAIL, "needs an NVMe SSD", "no NVMe controller on this machine");
    expect_not_run(&rep, p2p_rest, "no NVMe controller on this machine");
    gpumem_doctor_report_free(&rep);

    /* With one: the skip names it, the rest are not run (no SSD named). */
    vfio_machine();
    rep = run_ssd(&c);
    expect(&rep, "vfio.device", GPUMEM_DOCTOR_SKIP, "--pci ADDR", SSD " (vfio-pci)");
    expect_not_run(&rep, vfio_rest, "no SSD named (--pci)");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, gpu_checks_without_a_driver_are_listed_as_not_run, .init = setup, .fini = teardown) {
    static const char *const gpu_rest[] = {"gpu.device", "gpu.loading", "gpu.host_atomics", "gpu.pageable", "gpu.bar1",
                                           "gpu.mig", "gpu.compute_mode", "gpu.persistence", NULL};
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep = run_gpu(&c, 0);
    expect(&rep, "gpu.driver", GPUMEM_DOCTOR_FAIL, "install the NVIDIA driver", "no NVIDIA driver");
    expect_not_run(&rep, gpu_rest, "no NVIDIA driver to ask (gpu.driver)");
    gpumem_doctor_report_free(&rep);
}

/* The program never says a path passes when a check of it was skipped;
 * `all` ends with a line per path; --help names every path and option. */
Test(doctor, program_says_no_pass_for_a_skip, .init = setup, .fini = teardown) {
    static const char *const words[] = {"host", "gpu-clients", "gpu-controller", "vfio", "p2p", "uring", "all",
                                        "--path", "--pci", "--gpu", "--pairs", "--depth", "--io-kib", "--uid",
                                        "--gid", "--noiommu", "--open", "--root", "--json", "--snapshot", "--help",
                                        NULL};
    const char *const *w;
    vfio_machine(); /* an NVMe controller, none named: vfio is skipped, not failed */
    cr_assert_eq(doctor("--path vfio --root %s"), 0, "nothing failed");
    cr_assert(!stdout_has("passes"), "a skipped path said to pass");
    cr_assert(stdout_has("vfio: NOT A PASS"));
    cr_assert(stdout_has("8 not run or not judged"));

    cr_assert_eq(doctor("--path all --root %s"), 1);
    cr_assert(stdout_has("what runs here:"));
    cr_assert(stdout_has("  \xE2\x9C\x93 host "), "the host path runs");
    cr_assert(stdout_has("  \xE2\x9C\x97 gpu          GPU threads"), "the GPU path does not");
    cr_assert(stdout_has("gpu.driver: no NVIDIA driver"));
    cr_assert(stdout_has("GPU-initiated storage (gpu, vfio and p2p together) lacks here: gpu.driver"));
    cr_assert(stdout_has("uring files"));

    cr_assert_eq(doctor("--help"), 0);
    for (w = words; *w; w++) {
        char line[64], listed[64];
        snprintf(line, sizeof line, "\n  %s ", *w);
        snprintf(listed, sizeof listed, "\n  %s, ", *w);
        cr_expect(stdout_has(line) || stdout_has(listed), "--help has no line for %s", *w);
    }
}

/* ---- snapshots ---------------------------------------------------------------------- */

/* Every check on the machine under c->root, recorded when rec is given. */
static gpumem_doctor_report run_all(gpumem_doctor_config *c, gpumem_doctor_record *rec) {
    gpumem_doctor_report rep;
    memset(&rep, 0, sizeof rep);
    c->record = rec;
    cr_assert_eq(gpumem_doctor_gpu(c, 1, &rep), GPUMEM_OK, "%s", rep.error);
    cr_assert_eq(gpumem_doctor_ssd(c, &rep), GPUMEM_OK, "%s", rep.error);
    cr_assert_eq(gpumem_doctor_p2p(c, &rep), GPUMEM_OK, "%s", rep.error);
    cr_assert_eq(gpumem_doctor_uring(c, &rep), GPUMEM_OK, "%s", rep.error);
    return rep;
}

static void same_findings(const gpumem_doctor_report *a, const gpumem_doctor_report *b) {
    size_t i;
    cr_assert_eq(a->n, b->n, "%zu findings on the machine, %zu on its snapshot", a->n, b->n);
    for (i = 0; i < a->n; i++) {
        const gpumem_doctor_finding *x = &a->findings[i], *y = &b->findings[i];
        cr_assert_str_eq(x->check, y->check);
        if (!strcmp(x->check, "vfio.open")) continue; /* never tried under a root */
        cr_assert_eq(x->verdict, y->verdict, "%s: %s on the machine, %s on its snapshot (%s | %s)", x->check,
                     gpumem_doctor_verdict_str(x->verdict), gpumem_doctor_verdict_str(y->verdict), x->found, y->found);
        cr_assert_str_eq(x->found, y->found, "%s", x->check);
        cr_assert_str_eq(x->fix, y->fix, "%s", x->check);
    }
}

/* Unpacks root/snap.tgz into a new directory (the system's tar) and
 * returns it in `into`. */
static void unpack(const char *tgz, char *into, size_t bytes) {
    char cmd[640];
    snprintf(into, bytes, "%s/unpacked", root);
    mkdir(into, 0755);
    snprintf(cmd, sizeof cmd, "tar -xzf '%s' -C '%s'", tgz, into);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The machine is gone, its snapshot remains: nothing in the snapshot may
 * lead back into it (a link left absolute would). */
static void gone(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd '%s' && rm -rf sys proc dev boot gpumem-doctor home", root);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The failing machine of every path at once: ACS redirect, io_uring off,
 * the SSD's /dev/vfio/42 not the user's, a kernel command line with a
 * password on it, and a file no check reads. */
static void snapshot_machine(void) {
    p2p_machine(0x001D);
    put("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 luks.key=hunter2 intel_iommu=on iommu=pt quiet\n");
    put("proc/sys/kernel/io_uring_disabled", "2\n");
    mkdirs("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/" SSD "/nvme/nvme1");
    put("dev/ng1n1", "");
    put("dev/sda", ""); /* /dev is listed for ng* names only */
    put("boot/config-6.1.0-18-amd64", "CONFIG_PCI=y\nCONFIG_PCI_P2PDMA=y\n# CONFIG_DMA_SHARED_BUFFER is not set\n");
    put("home/user/.ssh/id_ed25519", "secret\n");
    mkdirs("sys/module/nvme_fabrics/parameters");
}

Test(doctor, snapshot_reproduces_the_verdicts, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_record rec;
    gpumem_doctor_report live, again;
    char tgz[512], into[512], path[700], text[256];
    struct stat sb;
    snapshot_machine();
    c.uid = (uint32_t)getuid() + 1; /* not the owner of /dev/vfio/42 (0600) */
    c.gid = (uint32_t)getgid() + 1;
    memset(&rec, 0, sizeof rec);
    live = run_all(&c, &rec);
    cr_assert_eq(finding(&live, "p2p.acs")->verdict, GPUMEM_DOCTOR_FAIL, "the machine fails: the test is not vacuous");
    cr_assert_eq(finding(&live, "vfio.dev")->verdict, GPUMEM_DOCTOR_FAIL);
    snprintf(tgz, sizeof tgz, "%s/snap.tgz", root);
    cr_assert_eq(gpumem_doctor_snapshot(&c, tgz, &live), GPUMEM_OK, "%s", live.error);
    gpumem_doctor_record_free(&rec);
    c.record = NULL;
    unpack(tgz, into, sizeof into);
    gone();

    c.root = into;
    again = run_all(&c, NULL);
    same_findings(&live, &again);
    gpumem_doctor_report_free(&again);

    /* Owners survive an unpacking that lost them (here: a wider mode). */
    snprintf(path, sizeof path, "%s/dev/vfio/42", into);
    cr_assert_eq(stat(path, &sb), 0, "the device file is in the snapshot");
    cr_assert(S_ISREG(sb.st_mode), "kept as a plain file");
    chmod(path, 0666);
    again = run_all(&c, NULL);
    same_findings(&live, &again);
    gpumem_doctor_report_free(&again);

    /* Only what the checks read: not the unread file, not the password. */
    snprintf(path, sizeof path, "%s/home", into);
    cr_assert_neq(stat(path, &sb), 0, "%s is in the snapshot, and no check reads it", path);
    snprintf(path, sizeof path, "%s/dev/sda", into);
    cr_assert_neq(stat(path, &sb), 0, "%s is in the snapshot, and no check reads it", path);
    snprintf(path, sizeof path, "%s/proc/cmdline", into);
    {
        FILE *f = fopen(path, "r");
        cr_assert(f && fgets(text, sizeof text, f), "proc/cmdline in the snapshot");
        fclose(f);
    }
    cr_assert_null(strstr(text, "hunter2"), "the command line's other words are left out: %s", text);
    cr_assert(strstr(text, "intel_iommu=on") && strstr(text, "iommu=pt"), "%s", text);
    snprintf(path, sizeof path, "%s/sys/bus/pci/devices/" SSD, into);
    cr_assert_eq(lstat(path, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode), "sysfs links stay links");

    /* Written whole: nothing is left beside it. */
    snprintf(path, sizeof path, "ls '%s' | grep -c 'snap.tgz.' > /dev/null", root);
    cr_assert_neq(system(path), 0, "a temporary file is left beside the snapshot");
    gpumem_doctor_report_free(&live);
}

Test(doctor, snapshot_of_a_machine_that_passes, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_record rec;
    gpumem_doctor_report live, again;
    char tgz[512], into[512];
    p2p_machine(0x0001);
    put("proc/sys/kernel/osrelease", "6.6.15-amd64\n");
    memset(&rec, 0, sizeof rec);
    live = run_all(&c, &rec);
    cr_assert_eq(finding(&live, "p2p.acs")->verdict, GPUMEM_DOCTOR_PASS);
    cr_assert_eq(finding(&live, "vfio.dev")->verdict, GPUMEM_DOCTOR_PASS);
    snprintf(tgz, sizeof tgz, "%s/snap.tgz", root);
    cr_assert_eq(gpumem_doctor_snapshot(&c, tgz, &live), GPUMEM_OK, "%s", live.error);
    gpumem_doctor_record_free(&rec);
    c.record = NULL;
    unpack(tgz, into, sizeof into);
    gone();
    c.root = into;
    again = run_all(&c, NULL);
    same_findings(&live, &again);
    gpumem_doctor_report_free(&again);
    gpumem_doctor_report_free(&live);
}

Test(doctor, snapshot_failures_and_a_bad_owners_file, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_record rec;
    gpumem_doctor_report rep;
    char out[512];
    struct stat sb;
    vfio_machine();
    memset(&rec, 0, sizeof rec);
    memset(&rep, 0, sizeof rep);
    c.record = &rec;
    cr_assert_eq(gpumem_doctor_ssd(&c, &rep), GPUMEM_OK);
    snprintf(out, sizeof out, "%s/no/such/dir/snap.tgz", root);
    cr_assert_eq(gpumem_doctor_snapshot(&c, out, &rep), GPUMEM_ESYS);
    cr_assert(strstr(rep.error, "no/such/dir/snap.tgz"), "the error names the file: %s", rep.error);
    cr_assert_neq(stat(out, &sb), 0, "no snapshot, not even part of one");
    gpumem_doctor_record_free(&rec);
    gpumem_doctor_report_free(&rep);

    c.record = NULL;
    c.uid = (uint32_t)getuid() + 1; /* someone else, never root */
    c.gid = (uint32_t)getgid() + 1;
    put("gpumem-doctor/owners", "# PATH UID GID MODE\ndev/vfio/42 0 0 0600\ndev/vfio/42 root\n");
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_ssd(&c, &rep), GPUMEM_EINVAL);
    cr_assert(strstr(rep.error, "gpumem-doctor/owners:3: expected"), "%s", rep.error);
    gpumem_doctor_report_free(&rep);
    put("gpumem-doctor/owners", "dev/vfio/42 0 0 0600\n"); /* root's, as on a machine: the user cannot open it */
    rep = run_ssd(&c);
    expect(&rep, "vfio.dev", GPUMEM_DOCTOR_FAIL, "chown", "owned by 0:0 mode 600");
    gpumem_doctor_report_free(&rep);
}

Test(doctor, program_snapshot, .init = setup, .fini = teardown) {
    char path[512];
    struct stat sb;
    vfio_machine();
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "nvme", "42", 16384);
    cr_assert_eq(doctor("--path vfio --pci " SSD " --root %s --snapshot %s/out.tgz"), 1, "the verdict, as without");
    snprintf(path, sizeof path, "%s/out.tgz", root);
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600, "the snapshot is the user's alone");
    cr_assert_eq(doctor("--path vfio --pci " SSD " --root %s --snapshot %s/none/out.tgz"), 2, "cannot be written");
    cr_assert_eq(out_bytes("stdout"), 0, "nothing on stdout");
    cr_assert_gt(out_bytes("stderr"), 0);
}

/* ---- found by fuzzing (issue 42) ----------------------------------------------------- */

/* Bytes that are not UTF-8 - sysfs and procfs hold whatever a driver
 * wrote, a snapshot whatever its sender's machine had - and names cut to
 * their field in the middle of a character went into --json as they were,
 * and python3 refused the whole output. Each such byte is now U+FFFD, and
 * a cut ends before the character it would split. */
Test(doctor, json_stays_valid_for_bytes_that_are_not_utf8, .init = setup, .fini = teardown) {
    char path[512], name[200], extra[400], cmd[1300];
    size_t i;
    snprintf(path, sizeof path, "%s/stdout", root);
    vfio_machine();
    put("proc/sys/kernel/osrelease", "6.1.0-\xff\xfe-amd64\n"); /* uring.kernel prints it */
    /* a name of 94 ASCII bytes and a 2-byte character: its field (96
     * bytes) holds 95, which split the character; a driver version of
     * 30 ASCII bytes and a 3-byte one (field 32); a lone continuation
     * byte, an overlong '/', a surrogate and a code point past U+10FFFF */
    for (i = 0; i < 94; i++) name[i] = 'G';
    name[i] = 0;
    snprintf(extra, sizeof extra, "name=%s\xc3\xa9\ndriver_version=123456789012345678901234567890\xe2\x9c\x93\n"
                                  "why_not=\x80 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 ok\n", name);
    gpu_snapshot(extra);
    cr_assert_eq(doctor("--path all --pci " SSD " --root %s --json"), 1, "the machine fails (gpumem-doctor/cuda read)");
    cr_assert(json_valid(path), "invalid JSON in %s", path);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=\" \".join(f[\"found\"] for f in"
             " d[\"findings\"]); sys.exit(0 if \"6.1.0-\\ufffd\\ufffd-amd64\" in t and \"G\" * 94 + \" \" in t else 1)'"
             " '%s'", path);
    cr_assert_eq(system(cmd), 0, "the release's bytes are not U+FFFD, or the cut name is not whole: %s", path);
    /* well-formed UTF-8 passes through: the test's own check mark */
    {
        gpumem_doctor_report rep;
        FILE *f;
        memset(&rep, 0, sizeof rep);
        gpumem_doctor_add(&rep, "x.utf8", GPUMEM_DOCTOR_PASS, "\xE2\x9C\x93 \xF0\x9F\x98\x80 \xC3\xA9", "");
        f = fopen(path, "w");
        gpumem_doctor_print_json(&rep, "all", "/", f);
        fclose(f);
        gpumem_doctor_report_free(&rep);
        snprintf(cmd, sizeof cmd, "grep -q '\xE2\x9C\x93 \xF0\x9F\x98\x80 \xC3\xA9' '%s'", path);
        cr_assert_eq(system(cmd), 0, "well-formed UTF-8 was changed");
    }
}

/* A cut never leaves half a character in the report itself either (the
 * text output prints it). */
Test(doctor, names_are_cut_between_characters) {
    gpumem_doctor_report rep;
    char check[40], found[500];
    size_t i;
    memset(&rep, 0, sizeof rep);
    for (i = 0; i < 30; i++) check[i] = 'c';
    memcpy(check + 30, "\xe2\x9c\x93", 4); /* the field holds 31 bytes: the 3-byte mark does not fit */
    for (i = 0; i < 398; i++) found[i] = 'f';
    memcpy(found + 398, "\xf0\x9f\x98\x80", 5); /* 399 fit, of a 4-byte character one byte */
    cr_assert_eq(gpumem_doctor_add(&rep, check, GPUMEM_DOCTOR_PASS, found, ""), GPUMEM_OK);
    cr_assert_eq(strlen(rep.findings[0].check), 30, "check \"%s\"", rep.findings[0].check);
    cr_assert_eq(strlen(rep.findings[0].found), 398);
    gpumem_doctor_report_free(&rep);
}

/* cc=214748365.8 made the compute capability's MAJOR * 10 + MINOR overflow
 * (undefined behaviour; this file is built with UBSan, which stops it),
 * and the values were judged: a compute capability is now MAJOR 0..99 and
 * MINOR 0..9, and any other value a malformed snapshot file, named by file
 * and line; an integer past an int likewise. */
Test(doctor, compute_capability_and_numbers_out_of_range_are_malformed, .init = setup, .fini = teardown) {
    static const char *const bad[] = {"cc=214748365.8\n", "cc=9.10\n", "cc=-1.0\n", "cc=9.0x\n", "cc=9\n",
                                      "cc=99999999999.0\n", "devices=99999999999\n", "cuda_version=-2147483649\n"};
    gpumem_doctor_config c = config();
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gpumem_doctor_report rep;
        gpumem_doctor_gpu_facts f;
        gpu_snapshot(bad[i]);
        memset(&rep, 0, sizeof rep);
        cr_expect_eq(gpumem_doctor_gpu(&c, 1, &rep), GPUMEM_EINVAL, "%.*s accepted", (int)strlen(bad[i]) - 1, bad[i]);
        cr_expect(strstr(rep.error, "gpumem-doctor/cuda:16: expected a known key with a value of its kind"),
                  "%s: %s", bad[i], rep.error);
        gpumem_doctor_report_free(&rep);
        cr_expect_eq(gpumem_doctor_gpu_probe(&c, &f, NULL), GPUMEM_EINVAL);
    }
    gpu_snapshot("cc=12.1\n"); /* the last cc line counts */
    {
        gpumem_doctor_report rep = run_gpu(&c, 1);
        expect(&rep, "gpu.device", GPUMEM_DOCTOR_PASS, NULL, "compute capability 12.1");
        gpumem_doctor_report_free(&rep);
    }
}

/* The kernel release as MAJOR * 1000 + MINOR overflowed for a MAJOR past
 * 2147483 (undefined behaviour, and a negative number judged "older than
 * 5.19"), sscanf's %d read "99999999999" (undefined), and 5.1019 passed as
 * 6.19. Releases that are not MAJOR.MINOR within bounds are unknown. */
Test(doctor, kernel_release_out_of_range_is_unknown, .init = setup, .fini = teardown) {
    static const struct {
        const char *release;
        gpumem_doctor_verdict v;
    } cases[] = {{"2147484.0-huge\n", GPUMEM_DOCTOR_SKIP}, {"99999999999.1\n", GPUMEM_DOCTOR_SKIP},
                 {"5.1019-x\n", GPUMEM_DOCTOR_SKIP},        {"-6.1\n", GPUMEM_DOCTOR_SKIP},
                 {" 6.1.0\n", GPUMEM_DOCTOR_SKIP},           {"6\n", GPUMEM_DOCTOR_SKIP},
                 {"999999.999\n", GPUMEM_DOCTOR_PASS},       {"6.1.0-18-amd64\n", GPUMEM_DOCTOR_PASS},
                 {"5.18.0\n", GPUMEM_DOCTOR_FAIL}};
    gpumem_doctor_config c = config();
    size_t i;
    pci_device("pci0000:64/0000:64:02.0", SSD, "0x010802", "nvme", NULL, 16384);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gpumem_doctor_report rep;
        put("proc/sys/kernel/osrelease", cases[i].release);
        rep = run_uring(&c);
        cr_expect_eq(finding(&rep, "uring.kernel")->verdict, cases[i].v, "%s: %s (%s)", cases[i].release,
                     gpumem_doctor_verdict_str(finding(&rep, "uring.kernel")->verdict),
                     finding(&rep, "uring.kernel")->found);
        gpumem_doctor_report_free(&rep);
    }
}

/* /proc/cmdline was read to its first line by the check, while a snapshot
 * kept the IOMMU words of every line: with iommu=pt on a second line the
 * machine was judged translating and its snapshot passthrough. Both now
 * read the same bytes, the first 4095, with a word cut there cut in both. */
Test(doctor, snapshot_of_a_command_line_gives_the_same_verdict, .init = setup, .fini = teardown) {
    static char long_line[6000];
    const char *cmdlines[] = {"BOOT_IMAGE=/vmlinuz quiet\niommu=pt\n", "quiet\n\tintel_iommu=off\n", long_line,
                              "iommu=pt"};
    size_t k;
    memset(long_line, 'x', 4090);
    memcpy(long_line + 4090, " iommu=pt\n", 11); /* the check reads up to "iommu" of it */
    for (k = 0; k < sizeof cmdlines / sizeof cmdlines[0]; k++) {
        gpumem_doctor_config c = config();
        gpumem_doctor_record rec;
        gpumem_doctor_report live, again;
        char tgz[512], into[512], cmd[700];
        vfio_machine();
        snprintf(cmd, sizeof cmd, "rm -f '%s/sys/kernel/iommu_groups/42/type'", root); /* the command line decides */
        cr_assert_eq(system(cmd), 0);
        put("proc/cmdline", cmdlines[k]);
        memset(&rec, 0, sizeof rec);
        live = run_all(&c, &rec);
        snprintf(tgz, sizeof tgz, "%s/snap.tgz", root);
        cr_assert_eq(gpumem_doctor_snapshot(&c, tgz, &live), GPUMEM_OK, "%s", live.error);
        gpumem_doctor_record_free(&rec);
        c.record = NULL;
        unpack(tgz, into, sizeof into);
        gone();
        c.root = into;
        again = run_all(&c, NULL);
        same_findings(&live, &again);
        if (k == 0) expect(&live, "vfio.iommu", GPUMEM_DOCTOR_PASS, NULL, "passthrough");
        gpumem_doctor_report_free(&again);
        gpumem_doctor_report_free(&live);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", root);
        cr_assert_eq(system(cmd), 0);
    }
}

/* A snapshot of nothing (no check ran) passed qsort a NULL base with no
 * elements: undefined behaviour (UBSan's nonnull-attribute stops this
 * file). It is an empty archive, which tar reads. */
Test(doctor, snapshot_of_nothing_is_an_empty_archive, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_record rec;
    gpumem_doctor_report rep;
    char tgz[512], cmd[700];
    memset(&rec, 0, sizeof rec);
    memset(&rep, 0, sizeof rep);
    c.record = &rec;
    snprintf(tgz, sizeof tgz, "%s/empty.tgz", root);
    cr_assert_eq(gpumem_doctor_snapshot(&c, tgz, &rep), GPUMEM_OK, "%s", rep.error);
    snprintf(cmd, sizeof cmd, "test -z \"$(tar -tzf '%s')\"", tgz);
    cr_assert_eq(system(cmd), 0, "%s is not an empty archive", tgz);
    gpumem_doctor_record_free(&rec);
    gpumem_doctor_report_free(&rep);
}

/* The doctor's own files were read with fgets: a NUL ended a line for the
 * parser and the rest was accepted unread ("name=GPU\0junk" read as GPU),
 * and a line longer than the buffer went on as the next line, which the
 * message then named (fuzzing, issue 42). Both are refused at their line. */
Test(doctor, nul_bytes_and_long_lines_in_snapshot_files_are_refused_at_their_line, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_report rep;
    char path[512], long_line[400];
    static const char nul_cuda[] = "driver_version=570\nname=GPU\0junk\ncc=9.0\n";
    static const char nul_owners[] = "# PATH UID GID MODE\ndev/vfio/42 0 0 0600\0 junk\n";
    FILE *f;
    gpu_snapshot("");
    snprintf(path, sizeof path, "%s/gpumem-doctor/cuda", root);
    f = fopen(path, "wb");
    cr_assert(f);
    fwrite(nul_cuda, 1, sizeof nul_cuda - 1, f);
    fclose(f);
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_gpu(&c, 1, &rep), GPUMEM_EINVAL, "a NUL in gpumem-doctor/cuda accepted");
    cr_assert(strstr(rep.error, "gpumem-doctor/cuda:2: expected key=value, found a NUL byte at column 9"), "%s",
              rep.error);
    gpumem_doctor_report_free(&rep);

    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = 0;
    memcpy(long_line, "why_not=", 8);
    f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "driver_version=570\n%s\ncc=9.0\n", long_line);
    fclose(f);
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_gpu(&c, 1, &rep), GPUMEM_EINVAL, "a 399-byte line accepted");
    cr_assert(strstr(rep.error, "gpumem-doctor/cuda:2: expected key=value, found a line of more than 255 bytes"), "%s",
              rep.error);
    gpumem_doctor_report_free(&rep);

    vfio_machine();
    snprintf(path, sizeof path, "%s/gpumem-doctor/owners", root);
    f = fopen(path, "wb");
    cr_assert(f);
    fwrite(nul_owners, 1, sizeof nul_owners - 1, f);
    fclose(f);
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(gpumem_doctor_ssd(&c, &rep), GPUMEM_EINVAL, "a NUL in gpumem-doctor/owners accepted");
    cr_assert(strstr(rep.error, "gpumem-doctor/owners:2: expected \"PATH UID GID MODE\" (mode octal), found a NUL"),
              "%s", rep.error);
    gpumem_doctor_report_free(&rep);
}

/* A snapshot wrote the owner of each judged file as "PATH UID GID MODE":
 * a /dev entry whose name holds a space or a tab made a line no reader
 * could split, and --root on the snapshot stopped with a malformed owners
 * file (fuzzing, issue 42). Such bytes are written \ooo now. */
Test(doctor, snapshot_keeps_owners_of_names_with_blanks, .init = setup, .fini = teardown) {
    gpumem_doctor_config c = config();
    gpumem_doctor_record rec;
    gpumem_doctor_report live, again;
    char tgz[512], into[512];
    snapshot_machine();
    put("dev/ng1n1 2", "");
    put("dev/ng1n2\tx\\041", "");
    c.uid = (uint32_t)getuid() + 1;
    c.gid = (uint32_t)getgid() + 1;
    memset(&rec, 0, sizeof rec);
    live = run_all(&c, &rec);
    cr_assert(strstr(finding(&live, "uring.ngdev")->found, "/dev/ng1n1 2 ("), "%s", finding(&live, "uring.ngdev")->found);
    snprintf(tgz, sizeof tgz, "%s/snap.tgz", root);
    cr_assert_eq(gpumem_doctor_snapshot(&c, tgz, &live), GPUMEM_OK, "%s", live.error);
    gpumem_doctor_record_free(&rec);
    c.record = NULL;
    unpack(tgz, into, sizeof into);
    gone();
    c.root = into;
    again = run_all(&c, NULL);
    same_findings(&live, &again);
    gpumem_doctor_report_free(&again);
    gpumem_doctor_report_free(&live);
}
