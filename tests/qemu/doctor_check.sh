#!/bin/sh
# The QEMU conformance test, guest side (issue 33): the doctor's verdict for
# the vfio path against whether the shim then opens the controller. Copied
# into the guest image as /bin/doctor_check; run.sh's init calls it, and
# run.sh checks its GPUMEM_DOCTOR lines after each boot.
#
#   doctor_check LABEL ADDR [UID [MEMLOCK_KIB]]
#
# Runs gpumem-doctor --path vfio for user UID (0 by default) with the memlock
# limit MEMLOCK_KIB (unchanged by default), then guest_open as that user with
# that limit, and prints
#   GPUMEM_DOCTOR LABEL verdict=pass|fail open=ok|refused agree=yes|no
# Where the doctor passes, also its vfio.open line with --open (as root,
# with the same limit).
# LABEL vfio-noiommu first tries to bind the device to vfio-pci without an
# IOMMU (the kernel refuses: no group) and leaves it unbound again.
label=$1 addr=$2 uid=${3:-0} memlock=${4:-}
dev=/sys/bus/pci/devices/$addr
args="--path vfio --pci $addr --pairs 4 --depth 256 --io-kib 16 --uid $uid --gid $uid"
prefix() { while IFS= read -r line; do echo "$1$line"; done < "$2"; }
limited() { ( [ -z "$memlock" ] || ulimit -l "$memlock"; "$@" ); } # the program's memlock limit

if [ "$label" = vfio-noiommu ]; then
    for m in irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci; do
        insmod /lib/modules/$m.ko 2>/dev/null || echo "doctor[$label]: insmod $m failed (loaded already?)"
    done
    echo vfio-pci > $dev/driver_override
    echo "$addr" > /sys/bus/pci/drivers_probe 2>/dev/null
    echo "doctor[$label]: after binding to vfio-pci without an IOMMU, driver: $(readlink $dev/driver || echo none)"
fi

limited gpumem-doctor $args > /doctor.out 2>&1; rc=$?
limited guest_open "$addr" "$uid" > /open.out 2>&1; orc=$?
prefix "doctor[$label]: " /doctor.out
prefix "doctor[$label]: " /open.out
case $rc in 0) verdict=pass ;; 1) verdict=fail ;; *) verdict="error($rc)" ;; esac
case $orc in 0) opened=ok ;; 1) opened=refused ;; *) opened="error($orc)" ;; esac
agree=no
{ [ "$verdict" = pass ] && [ "$opened" = ok ]; } && agree=yes
{ [ "$verdict" = fail ] && [ "$opened" = refused ]; } && agree=yes
if [ "$verdict" = pass ]; then
    limited gpumem-doctor $args --open > /doctor.out 2>&1
    grep vfio.open /doctor.out > /doctor.open
    prefix "doctor-open[$label]: " /doctor.open
fi
if [ "$label" = vfio-noiommu ]; then
    echo > $dev/driver_override # cleared: uio_pci_generic takes it next
    [ -e $dev/driver ] && echo "$addr" > $dev/driver/unbind
fi
echo "GPUMEM_DOCTOR $label verdict=$verdict open=$opened agree=$agree"
