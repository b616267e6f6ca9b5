/* doctor_machine.h: the fake machine under --root that the doctor's tests
 * (tests/test_doctor.c) and its fuzz harness (tests/fuzz/fuzz_doctor.c)
 * both build: directories, links that point inside the root, and a PCI
 * device with its sysfs files, driver and IOMMU group.
 *
 *     static char root[64];              // the fake root, filled in first
 *     #define DOCTOR_MACHINE_CHECK(ok, ...) cr_assert(ok, __VA_ARGS__)
 *     static void put(const char *rel, const char *text); // writes root/rel
 *     #include "tests/doctor_machine.h"
 *     doctor_pci_device("sys/devices/pci0000:64/0000:64:02.0/0000:65:00.0", "0000:65:00.0",
 *                       "0x010802\n", resource_line, "vfio-pci", "42");
 *
 * The check is the includer's because a Criterion test fails its test and a
 * fuzz harness aborts the run; put is the includer's because the harness
 * writes any bytes over any file (links included) and the tests text. */
#ifndef GPUMEM_TESTS_DOCTOR_MACHINE_H
#define GPUMEM_TESTS_DOCTOR_MACHINE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DOCTOR_MACHINE_CHECK
#error "define DOCTOR_MACHINE_CHECK(ok, ...) before including doctor_machine.h"
#endif

/* root/rel and every directory above it. */
static void mkdirs(const char *rel) {
    char path[600], *p;
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

/* A symbolic link at rel to root/target (absolute, inside the fake root,
 * the way sysfs links are: a snapshot must make it relative). */
static void link_to(const char *rel, const char *target) {
    char path[600], to[600], dir[600];
    snprintf(dir, sizeof dir, "%s", rel);
    *strrchr(dir, '/') = 0;
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(to, sizeof to, "%s/%s", root, target);
    unlink(path);
    DOCTOR_MACHINE_CHECK(symlink(to, path) == 0, "symlink %s", path);
}

/* dev/name, a link to the directory dir (made first): a driver, a group. */
static void doctor_link_dir(const char *dev, const char *name, const char *dir) {
    char rel[600];
    mkdirs(dir);
    snprintf(rel, sizeof rel, "%s/%s", dev, name);
    link_to(rel, dir);
}

/* A PCI device at dev (sys/devices/...) listed as addr, with its class line
 * (a GPU's 0x03... has NVIDIA's vendor id, anything else Samsung's), its
 * resource file, driver (NULL: none) and IOMMU group (NULL: none). */
static void doctor_pci_device(const char *dev, const char *addr, const char *class_line, const char *resource,
                              const char *driver, const char *group) {
    char rel[600], dir[128];
    mkdirs(dev);
    snprintf(rel, sizeof rel, "sys/bus/pci/devices/%s", addr);
    link_to(rel, dev);
    snprintf(rel, sizeof rel, "%s/class", dev);
    put(rel, class_line);
    snprintf(rel, sizeof rel, "%s/vendor", dev);
    put(rel, strncmp(class_line, "0x03", 4) == 0 ? "0x10de\n" : "0x144d\n");
    snprintf(rel, sizeof rel, "%s/resource", dev);
    put(rel, resource);
    if (driver) {
        snprintf(dir, sizeof dir, "sys/bus/pci/drivers/%s", driver);
        doctor_link_dir(dev, "driver", dir);
    }
    if (group) {
        snprintf(dir, sizeof dir, "sys/kernel/iommu_groups/%s", group);
        doctor_link_dir(dev, "iommu_group", dir);
        snprintf(rel, sizeof rel, "%s/devices/%s", dir, addr);
        link_to(rel, dev);
    }
}

#endif
