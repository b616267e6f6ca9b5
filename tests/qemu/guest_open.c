/* The QEMU conformance test, guest side: does the shim open the controller?
 * The answer the doctor's vfio verdict must agree with (tests/qemu/doctor_check.sh).
 *
 *   guest_open ADDR UID    UID 0: as root; otherwise as uid and gid UID, no
 *                          supplementary groups, with the RLIMIT_MEMLOCK the
 *                          shell set (ulimit -l), as a program would run
 *
 * Opens (reset, admin queue, Identify, Set Features asking for 4 pairs, the
 * doctor's --pairs in doctor_check.sh), prints what it found or why not,
 * closes. Exit status 0 opened, 1 not opened, 2 usage or privileges. */
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem_nvmectl.h"

int setgroups(size_t n, const gid_t *groups); /* <grp.h> hides it from strict POSIX */

int main(int argc, char **argv) {
    gpumem_nvmectl_config cfg = gpumem_nvmectl_config_default();
    gpumem_nvmectl *ctl = NULL;
    gpumem_status st;
    char error[320] = "";
    long uid;
    if (argc != 3 || (uid = strtol(argv[2], NULL, 10)) < 0) {
        fprintf(stderr, "usage: guest_open ADDR UID\n");
        return 2;
    }
    if (uid != 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0 ||
                     getuid() != (uid_t)uid || geteuid() != (uid_t)uid)) {
        fprintf(stderr, "guest_open: cannot become uid %ld\n", uid);
        return 2;
    }
    cfg.pci_addr = argv[1];
    cfg.max_pairs = 4;
    cfg.error = error;
    cfg.error_bytes = sizeof error;
    st = gpumem_nvmectl_open(&cfg, &ctl);
    if (st != GPUMEM_OK) {
        printf("guest_open: uid %u: not opened: %s: %s\n", (unsigned)getuid(), gpumem_status_str(st), error);
        return 1;
    }
    {
        const gpumem_nvmectl_info *in = gpumem_nvmectl_get_info(ctl);
        printf("guest_open: uid %u: opened %s, MDTS %llu bytes, %u pairs granted\n", (unsigned)getuid(), in->model,
               (unsigned long long)in->max_transfer_bytes, in->pairs_granted);
    }
    st = gpumem_nvmectl_close(ctl);
    if (st != GPUMEM_OK) printf("guest_open: close: %s\n", gpumem_status_str(st));
    return 0;
}
