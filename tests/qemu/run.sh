#!/usr/bin/env bash
# The QEMU conformance test: gpumem's queue pairs drive QEMU's NVMe controller.
#
#   tests/qemu/run.sh BUILD_DIR        (make qemu-test builds the programs first)
#
# Builds an initramfs (busybox-static, the static guest program, Debian's uio
# modules), boots Debian's kernel in qemu-system-x86_64 with an emulated NVMe
# disk backed by an image of known content, and runs the guest program as
# init. Two boots:
#   1. negative: max_ioqpairs=2; open before binding, absent and inactive
#      namespaces, queues the controller refuses, a read past the end, and a
#      controller that loses bus mastering. The NVMe errors QEMU reports here
#      are provoked on purpose; the ones the test expects must appear.
#   2. run: the workload (GPUMEM_QEMU_THREADS threads on as many vCPUs,
#      GPUMEM_QEMU_COMMANDS commands). Any NVMe guest error QEMU reports fails
#      the test. Afterwards the image file must hold every write.
#   3. iommu: q35 with QEMU's emulated Intel VT-d (intel-iommu, interrupt
#      remapping), the guest kernel with intel_iommu=on (translating DMA
#      domains, no iommu=pt). Bound to uio_pci_generic, open must refuse;
#      then bound to vfio-pci, /dev/vfio/N given to uid 1000, the guest
#      program sets RLIMIT_MEMLOCK, drops to uid/gid 1000 without
#      capabilities and runs the same workload through VFIO, then the
#      negative cases (memlock too small, PRPs at unmapped IOVAs). NVMe
#      errors are allowed only at the IOVAs the negative cases print; the
#      image file must hold every write.
#   4. uring (first; make qemu-uring runs it alone): two NVMe
#      disks owned by the guest's nvme driver. The io_uring passthrough
#      forwarder (gpumem_uring.h) serves pairs over the first one's
#      /dev/ngXn1; then Linux's nvmet exports the second disk over nvme-tcp on
#      127.0.0.1:4420 (configfs alone), the guest's initiator connects
#      (/dev/nvme-fabrics), and the forwarder serves pairs over the remote
#      namespace's /dev/ngYn1. Both image files must hold every write. Then
#      the fault: a second namespace on a slow null_blk (configfs,
#      completion_nsec), the port's subsystem link removed mid-run and
#      restored (guest_test uring-fault checks its blocks in the guest).
#   5. bench (not in the default list; make qemu-bench runs it alone): one
#      boot, q35 with the emulated VT-d and intel_iommu=on as the iommu boot,
#      BENCH_CPUS vCPUs (1: every path on one core), one NVMe disk. 4 KiB
#      random reads at one depth for a fixed time, on the same namespace, in
#      BENCH_ROUNDS rounds of: the forwarder (one forwarder thread and one
#      client thread on /dev/ngXn1), Debian's fio (ioengine io_uring_cmd,
#      batched, carried into the initramfs with its libraries and the
#      dynamic loader), then the disk unbound from nvme and bound to vfio-pci
#      for the shim (one client thread), and back to nvme. bench_report.py
#      prints the table and the ratios (per round, and their medians).
# Environment: GPUMEM_QEMU_BOOTS (default "uring negative run iommu": every
# boot), GPUMEM_QEMU_URING_COMMANDS (the uring boot's, per part; default 1000), GPUMEM_QEMU_ACCEL=tcg (default) | kvm | auto (kvm if a probe
# boot reaches init), GPUMEM_QEMU_COMMANDS (default 120000),
# GPUMEM_QEMU_THREADS (default 4), GPUMEM_QEMU_TIMEOUT (seconds per boot, 480),
# GPUMEM_QEMU_BENCH_DEPTH (32), GPUMEM_QEMU_BENCH_SECONDS (per run, 10),
# GPUMEM_QEMU_BENCH_CPUS (the bench boot's vCPUs, 1), GPUMEM_QEMU_BENCH_ROUNDS (3).
set -euo pipefail

BUILD=${1:?usage: run.sh BUILD_DIR}
WORK="$BUILD/qemu"
COMMANDS=${GPUMEM_QEMU_COMMANDS:-120000}
THREADS=${GPUMEM_QEMU_THREADS:-4}
BOOT_TIMEOUT=${GPUMEM_QEMU_TIMEOUT:-480}
BOOTS=" ${GPUMEM_QEMU_BOOTS:-uring negative run iommu} "
URING_COMMANDS=${GPUMEM_QEMU_URING_COMMANDS:-1000}
ACCEL=${GPUMEM_QEMU_ACCEL:-tcg}
BENCH_DEPTH=${GPUMEM_QEMU_BENCH_DEPTH:-32}
BENCH_SECONDS=${GPUMEM_QEMU_BENCH_SECONDS:-10}
BENCH_CPUS=${GPUMEM_QEMU_BENCH_CPUS:-1}
BENCH_ROUNDS=${GPUMEM_QEMU_BENCH_ROUNDS:-3}
BENCH_VARIANTS=${GPUMEM_QEMU_BENCH_VARIANTS-fixed,sqpoll}
N_VARIANTS=$(echo "$BENCH_VARIANTS" | tr ',' '\n' | grep -c . || true)
DISK_BLOCKS=131072 # 64 MiB of 512-byte blocks

die() { echo "qemu-test: FAIL: $*" >&2; exit 1; }
say() { echo "qemu-test: $*"; }

# ---- what the host must have ------------------------------------------------
QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
BUSYBOX=""
for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then BUSYBOX=$b; break; fi
done
[ -n "$BUSYBOX" ] || die "no statically linked busybox (apt-get install busybox-static)"
KERNEL=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$KERNEL" ] || die "no kernel in /boot/vmlinuz-* (apt-get install linux-image-amd64)"
[ -r "$KERNEL" ] || die "$KERNEL is not readable"
KVER=${KERNEL#/boot/vmlinuz-}
MODDIR=/lib/modules/$KVER
[ -d "$MODDIR" ] || die "no modules for $KVER in $MODDIR"
command -v cpio >/dev/null || die "cpio not found (apt-get install cpio)"
for prog in guest_test image gpumem-doctor-static guest_open; do [ -x "$BUILD/$prog" ] || die "$BUILD/$prog not built (make qemu-test)"; done

# ---- initramfs ------------------------------------------------------------------
rm -rf "$WORK"
mkdir -p "$WORK/root"/{bin,dev,proc,sys,mnt,lib/modules}
ROOT="$WORK/root"
cp "$BUSYBOX" "$ROOT/bin/busybox"
for applet in sh mount insmod echo cat ls sleep poweroff readlink grep chown mkdir ln ip ifconfig dd seq; do ln -s busybox "$ROOT/bin/$applet"; done
cp "$BUILD/guest_test" "$ROOT/bin/guest_test"
# doctor agreement (issue 33): the doctor, the shim's open, and the script that compares them
cp "$BUILD/gpumem-doctor-static" "$ROOT/bin/gpumem-doctor"
cp "$BUILD/guest_open" "$ROOT/bin/guest_open"
cp "$(dirname "$0")/doctor_check.sh" "$ROOT/bin/doctor_check"

# uio and uio_pci_generic, and VFIO (vfio-pci and what modules.dep says it
# needs, in load order), decompressed here if the kernel ships them compressed
for m in uio uio_pci_generic irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci; do
    src=$(find "$MODDIR" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" | head -n 1)
    [ -n "$src" ] || die "module $m not found under $MODDIR"
    case "$src" in
        *.ko) cp "$src" "$ROOT/lib/modules/$m.ko" ;;
        *.xz) xz -dc "$src" > "$ROOT/lib/modules/$m.ko" || die "cannot decompress $src (xz-utils)" ;;
        *.zst) zstd -dc "$src" > "$ROOT/lib/modules/$m.ko" || die "cannot decompress $src (zstd)" ;;
        *.gz) gzip -dc "$src" > "$ROOT/lib/modules/$m.ko" ;;
    esac
done
# The uring boot: the kernel's NVMe host driver, nvmet and nvme-tcp, and what
# modules.dep says they need (load order). Copied only if the kernel has them.
URING_MODS="crct10dif_common crc-t10dif crc64 crc64-rocksoft crc64_rocksoft_generic t10-pi nvme-core nvme configfs nvmet nvmet-tcp nvme-fabrics nvme-tcp null_blk"
# NVMe over RDMA on soft-RoCE (rdma_rxe needs the crc32 crypto module: without
# it "rdma_rxe: failed to init crc32 algorithm err:-2"); dummy is its netdev.
RDMA_MODS="crc32_generic ib_core ib_cm iw_cm rdma_cm ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe nvme-rdma nvmet-rdma dummy"
case "$BOOTS" in *" uring "*|*" bench "*)
    for m in $URING_MODS $RDMA_MODS; do
        src=$(find "$MODDIR" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n 1)
        [ -n "$src" ] || { [ "$m" = crc64_rocksoft_generic ] && continue; die "module $m not found under $MODDIR"; }
        case "$src" in
            *.ko) cp "$src" "$ROOT/lib/modules/$m.ko" ;;
            *.xz) xz -dc "$src" > "$ROOT/lib/modules/$m.ko" ;;
            *.zst) zstd -dc "$src" > "$ROOT/lib/modules/$m.ko" ;;
        esac
    done ;;
esac

# The bench boot: Debian's fio, its shared libraries at the paths ldd names
# (followed to the files) and the dynamic loader.
# carry_program PATH: a dynamically linked program of the host into the
# initramfs, with its shared libraries at the paths ldd names (followed to
# the files) and the dynamic loader; their folders appended to /lib-path.
carry_program() {
    local prog=$1 lib
    cp "$prog" "$ROOT/bin/$(basename "$prog")"
    ldd "$prog" | grep -q 'not found' && die "$prog: a library ldd does not find: $(ldd "$prog" | grep 'not found')"
    for lib in $(ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
    done
    ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | xargs -n1 dirname >> "$ROOT/lib-dirs"
    sort -u "$ROOT/lib-dirs" | paste -sd: - > "$ROOT/lib-path"
}
case "$BOOTS" in *" bench "*)
    FIO=$(command -v fio) || die "fio not found (apt-get install fio; make qemu-bench installs it)"
    carry_program "$FIO" ;;
esac
# The uring and bench boots: iproute2's rdma, which makes the soft-RoCE device
# (rdma link add over netlink; rdma_rxe 6.1 has no other way).
case "$BOOTS" in *" uring "*|*" bench "*)
    RDMA_TOOL=$(command -v rdma) || die "rdma not found (apt-get install iproute2)"
    carry_program "$RDMA_TOOL" ;;
esac

cat > "$ROOT/init" <<'EOF'
#!/bin/sh
# gpumem QEMU conformance test: init of the guest.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
MODE=$(cat /proc/cmdline | grep -o 'gpumem_mode=[a-z]*' | cut -d= -f2 2>/dev/null)
MODE=${MODE#gpumem_mode=}
ARGS=$(cat /proc/cmdline | grep -o 'gpumem_args=[0-9,]*')
ARGS=${ARGS#gpumem_args=}
finish() { echo "GPUMEM_GUEST_DONE"; poweroff -f; sleep 10; }
[ "$MODE" = probe ] && { echo "GPUMEM_PROBE_OK"; finish; }
# nvme_up: the kernel's NVMe host driver and what it needs (load order)
nvme_up() {
    for m in crct10dif_common crc-t10dif crc64 crc64-rocksoft crc64_rocksoft_generic t10-pi nvme-core nvme; do
        [ -f /lib/modules/$m.ko ] && { insmod /lib/modules/$m.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod $m"; return 1; }; }
    done
}
# fabrics_up: nvmet and nvme-tcp on both sides, configfs mounted
fabrics_up() {
    for m in configfs nvmet nvmet-tcp nvme-fabrics nvme-tcp; do
        insmod /lib/modules/$m.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod $m"; return 1; }
    done
    mount -t configfs none /sys/kernel/config
    ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
}
# rdma_up: soft-RoCE, nvme-rdma and nvmet-rdma; the rxe device rxe0. The
# guest has no network card: 192.0.2.1 (TEST-NET-1, RFC 5737) is an address
# of its dummy netdev alone, and rdma_rxe loops RDMA to its own address back
# inside itself (on lo, rxe is added but rdma_resolve_route times out,
# -110: hence the dummy).
rdma_up() {
    for m in crc32_generic ib_core ib_cm iw_cm rdma_cm ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe nvme-rdma nvmet-rdma dummy; do
        insmod /lib/modules/$m.ko || { echo "guest: insmod $m failed: $(dmesg | tail -n 3)"; return 1; }
    done
    ip link set dummy0 up && ip addr add 192.0.2.1/24 dev dummy0 &&
        LD_LIBRARY_PATH=$(cat /lib-path) rdma link add rxe0 type rxe netdev dummy0 ||
        { dmesg | tail -n 8 | sed 's/^/guest: dmesg: /'; return 1; }
    echo "guest: $(LD_LIBRARY_PATH=$(cat /lib-path) rdma link show rxe0/1)"
}
# the controller whose serial is $1, by its generic device
ngdev() { for c in /sys/class/nvme/nvme*; do
    s=$(cat $c/serial 2>/dev/null); s=${s%% *}   # padded with spaces to 20 bytes
    [ "$s" = "$1" ] && for n in /dev/ng${c##*nvme}n1; do [ -e $n ] && echo $n; done; done; }
# nullb NAME MIB NSEC: a memory-backed null_blk NAME of MIB MiB made through
# configfs, every command completing NSEC ns after it arrives (timer mode; 0:
# at once, in the submitter's context); prints its device
nullb() {
    NB=/sys/kernel/config/nullb/$1
    mkdir $NB && echo 512 > $NB/blocksize && echo $2 > $NB/size && echo 1 > $NB/memory_backed &&
    if [ $3 = 0 ]; then echo 0 > $NB/irqmode; else echo 2 > $NB/irqmode && echo $3 > $NB/completion_nsec; fi &&
    echo 1 > $NB/power || return 1
    for i in 1 2 3 4 5 6 7 8 9 10; do   # devtmpfs makes the node a moment later
        # named after its configfs directory since Linux 6.0, nullbN before
        for n in $1 $(ls /dev | grep '^nullb'); do [ -b /dev/$n ] && { echo /dev/$n; return 0; }; done
        sleep 1
    done
    return 1
}
# nvmet_port N TRTYPE TRADDR TRSVCID NQN: port N, the subsystem NQN linked to it
nvmet_port() {
    P=/sys/kernel/config/nvmet/ports/$1
    mkdir $P && echo $2 > $P/addr_trtype && echo ipv4 > $P/addr_adrfam && echo $3 > $P/addr_traddr &&
    echo $4 > $P/addr_trsvcid && ln -s /sys/kernel/config/nvmet/subsystems/$5 $P/subsystems/$5
}
# nvmet_subsys NQN DEVICE...: a subsystem any host may use, namespaces 1.. on the devices
nvmet_subsys() {
    S=/sys/kernel/config/nvmet/subsystems/$1; shift
    mkdir $S && echo 1 > $S/attr_allow_any_host || return 1
    k=1; for d in "$@"; do
        mkdir $S/namespaces/$k && echo -n $d > $S/namespaces/$k/device_path &&
        echo 1 > $S/namespaces/$k/enable || return 1; k=$((k + 1))
    done
}
# fabric_connect TRTYPE TRADDR TRSVCID NQN: the initiator connects; it
# reconnects every second after a lost path and gives up after 120 s
fabric_connect() {
    echo "transport=$1,traddr=$2,trsvcid=$3,nqn=$4,reconnect_delay=1,ctrl_loss_tmo=120" > /dev/nvme-fabrics
}
# subsys_ng NQN: the generic device of namespace 1 of the subsystem (with
# native multipath, the head: /sys/class/nvme-subsystem/nvme-subsysN/ngNn1)
subsys_ng() { for d in /sys/class/nvme-subsystem/*; do
    [ "$(cat $d/subsysnqn 2>/dev/null)" = "$1" ] && for n in $d/ng*n1; do [ -e $n ] && echo /dev/${n##*/}; done
    done; }
# ctrl_state NQN TRSVCID: the sysfs state file of the controller of the subsystem at that service ID
ctrl_state() { for c in /sys/class/nvme/nvme*; do
    [ "$(cat $c/subsysnqn)" = "$1" ] && case "$(cat $c/address),," in *"trsvcid=$2,"*) echo $c/state ;; esac
    done; }
# paths NQN: each controller of the subsystem, its transport, address, state and ANA state
paths() { for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn)" = "$1" ] || continue
    echo "guest: $1 path ${c##*/}: $(cat $c/transport) $(cat $c/address) $(cat $c/state), ANA $(cat /sys/block/nvme*c${c##*nvme}n1/ana_state 2>/dev/null)"
    done; }
# wait_ng NQN: wait for the subsystem's generic device, print it
wait_ng() { for i in 1 2 3 4 5 6 7 8 9 10; do [ -n "$(subsys_ng $1)" ] && break; sleep 1; done; subsys_ng $1; }
if [ "$MODE" = bench ]; then
    # One disk, three ways to read it: the forwarder and fio while the kernel
    # owns it, then the shim after it moves to vfio-pci (same boot). A
    # null_blk in memory holding the disk's content, exported by nvmet over
    # nvme-tcp and nvme-rdma, for the forwarder and fio over each transport
    # (a second QEMU disk behind nvmet timed out under the emulated VT-d:
    # "I/O 448 (I/O Cmd) QID 1 timeout, aborting", twice in four boots).
    B=$(cat /proc/cmdline | grep -o 'gpumem_bench=[0-9,]*'); B=${B#gpumem_bench=}
    DEPTH=${B%%,*}; B=${B#*,}; SECS=${B%%,*}; ROUNDS=${B#*,}
    VARIANTS=$(cat /proc/cmdline | grep -o 'gpumem_variants=[a-z,]*'); VARIANTS=${VARIANTS#gpumem_variants=}
    nvme_up || finish
    for i in 1 2 3 4 5 6 7 8 9 10; do [ -n "$(ngdev gpumem0)" ] && break; sleep 1; done
    NG=$(ngdev gpumem0)
    [ -n "$NG" ] || { echo "GPUMEM_QEMU_RESULT FAIL no /dev/ng for the disk: $(ls /dev)"; finish; }
    BLK=/dev/nvme${NG#/dev/ng}
    ADDR=$(readlink /sys/class/nvme/nvme$(echo ${NG#/dev/ng} | cut -dn -f1)/device); ADDR=${ADDR##*/}
    echo "guest: $(grep -c ^processor /proc/cpuinfo) vCPUs, $NG ($BLK) at $ADDR, driver $(readlink /sys/bus/pci/devices/$ADDR/driver), IOMMU group type $(cat /sys/bus/pci/devices/$ADDR/iommu_group/type 2>/dev/null || echo none)"
    echo "guest: depth $DEPTH, $SECS s a run, 4 KiB random reads"
    # the image into the host's page cache, so that no run pays for the first touch
    dd if=$BLK of=/dev/null bs=1M 2>/dev/null
    mkdir -p /tmp
    export LD_LIBRARY_PATH=$(cat /lib-path)
    # the copy over both transports, one subsystem each (no multipath between them)
    fabrics_up && insmod /lib/modules/null_blk.ko nr_devices=0 && MEM=$(nullb copy 64 0) &&
        dd if=$BLK of=$MEM bs=1M 2>/dev/null && nvmet_subsys bench-tcp $MEM && rdma_up &&
        nvmet_subsys bench-rdma $MEM && nvmet_port 1 tcp 127.0.0.1 4420 bench-tcp &&
        nvmet_port 2 rdma 192.0.2.1 4420 bench-rdma && fabric_connect tcp 127.0.0.1 4420 bench-tcp &&
        fabric_connect rdma 192.0.2.1 4420 bench-rdma || { echo "GPUMEM_QEMU_RESULT FAIL bench: nvmet set-up"; finish; }
    TNG=$(wait_ng bench-tcp); RNG=$(wait_ng bench-rdma)
    [ -n "$TNG" ] && [ -n "$RNG" ] || { echo "GPUMEM_QEMU_RESULT FAIL bench: no generic devices over tcp and rdma"; finish; }
    paths bench-tcp; paths bench-rdma
    fio_run() { # NAME DEVICE OPTIONS...: one fio job, its JSON between markers
        name=$1; file=$2; shift 2
        echo "guest: loadavg $(cat /proc/loadavg)"
        fio --name=$name --filename=$file --ioengine=io_uring_cmd --cmd_type=nvme --rw=randread --bs=4k \
            --iodepth=$DEPTH --iodepth_batch_submit=$DEPTH --iodepth_batch_complete_max=$DEPTH \
            --time_based --runtime=$SECS --norandommap --randrepeat=0 --thread --numjobs=1 \
            --output-format=json --output=/tmp/$name.json "$@" > /tmp/$name.out 2>&1
        rc=$?
        echo "GPUMEM_FIO_BEGIN $name rc=$rc"
        cat /tmp/$name.json 2>/dev/null
        echo "GPUMEM_FIO_END $name"
        [ $rc = 0 ] || { echo "guest: fio $name exited $rc:"; cat /tmp/$name.out; }
    }
    for m in irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci; do
        insmod /lib/modules/$m.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod $m"; finish; }
    done
    DEV=/sys/bus/pci/devices/$ADDR
    # Rounds of the three, in turn, so that the host's load, which changes
    # by the second, falls on all three alike: each round the disk goes from
    # nvme to vfio-pci and back.
    for r in $(seq 1 $ROUNDS); do
        echo "GPUMEM_BENCH_ROUND $r"
        echo "guest: loadavg $(cat /proc/loadavg)"
        guest_test bench-uring $NG $DEPTH $SECS uring plain
        fio_run fio $NG --gtod_reduce=1
        fio_run fio-lat $NG --lat_percentiles=1 --percentile_list=50:90:99:99.9
        # each variant of the forwarder right before a fio run of its own:
        # the host's load changes by the second, so a variant is compared
        # with the fio run next to it in time
        for v in $(echo "$VARIANTS" | tr ',' ' '); do
            guest_test bench-uring $NG $DEPTH $SECS uring $v
            fio_run fio-$v $NG --gtod_reduce=1
        done
        for t in tcp rdma; do
            [ $t = tcp ] && F=$TNG || F=$RNG
            guest_test bench-uring $F $DEPTH $SECS $t plain
            fio_run fio-$t $F --gtod_reduce=1
        done
        # the same disk to vfio-pci: unbound from nvme, then the shim drives it
        echo "$ADDR" > $DEV/driver/unbind
        echo vfio-pci > $DEV/driver_override
        echo "$ADDR" > /sys/bus/pci/drivers_probe
        echo "guest: driver now: $(readlink $DEV/driver), IOMMU group type $(cat $DEV/iommu_group/type 2>/dev/null || echo none)"
        echo "guest: loadavg $(cat /proc/loadavg)"
        guest_test bench-vfio $ADDR $DEPTH $SECS
        # and back to nvme
        echo "$ADDR" > $DEV/driver/unbind
        echo > $DEV/driver_override
        echo "$ADDR" > /sys/bus/pci/drivers_probe
        NG=""
        for i in 1 2 3 4 5 6 7 8 9 10; do NG=$(ngdev gpumem0); [ -n "$NG" ] && break; sleep 1; done
        echo "guest: driver now: $(readlink $DEV/driver), $NG"
        [ -n "$NG" ] || { echo "GPUMEM_QEMU_RESULT FAIL nvme did not take the disk back"; finish; }
    done
    echo "guest: loadavg $(cat /proc/loadavg)"
    # what the kernel said of its NVMe controllers and the fabrics (timeouts, resets, keep-alive)
    dmesg | grep -i -E 'nvme|rdma|rxe' | tail -n 40 | sed 's/^/guest: dmesg: /'
    finish
fi
if [ "$MODE" = uring ]; then
    # The kernel owns both disks; the forwarder serves gpumem pairs over them.
    nvme_up || finish
    for i in 1 2 3 4 5 6 7 8 9 10; do [ -n "$(ngdev gpumem1)" ] && [ -n "$(ngdev gpumem0)" ] && break; sleep 1; done
    LOCAL=$(ngdev gpumem0); BACK=$(ngdev gpumem1)
    echo "guest: local $LOCAL, nvmet backing ${BACK%/*}/nvme${BACK#/dev/ng}"
    [ -n "$LOCAL" ] && [ -n "$BACK" ] || { echo "GPUMEM_QEMU_RESULT FAIL no /dev/ng for the two disks: $(ls /dev)"; finish; }
    echo "GPUMEM_URING_PART local"
    guest_test uring "$LOCAL" ${ARGS%%,*} ${ARGS#*,}
    echo "GPUMEM_URING_PART remote"
    fabrics_up || finish
    insmod /lib/modules/null_blk.ko nr_devices=0 || { echo "GPUMEM_QEMU_RESULT FAIL insmod null_blk"; finish; }
    # A slow namespace for the fault: null_blk in memory, every command
    # completing 20 ms after it arrives (timer mode), so that writes are
    # inside the target when its port goes.
    SLOW=$(nullb slow 16 20000000) || { echo "GPUMEM_QEMU_RESULT FAIL null_blk through configfs"; finish; }
    NB=/sys/kernel/config/nullb/slow
    echo "guest: null_blk $SLOW: $(cat $NB/size) MiB, completion_nsec $(cat $NB/completion_nsec)"
    nvmet_subsys gpumem-remote "/dev/nvme${BACK#/dev/ng}" $SLOW && nvmet_port 1 tcp 127.0.0.1 4420 gpumem-remote ||
        { echo "GPUMEM_QEMU_RESULT FAIL nvmet configuration through configfs"; finish; }
    P=/sys/kernel/config/nvmet/ports/1
    BEFORE=$(ls /dev | grep '^ng' | sort)
    fabric_connect tcp 127.0.0.1 4420 gpumem-remote || { echo "GPUMEM_QEMU_RESULT FAIL connect over nvme-tcp"; finish; }
    REMOTE=""; FAULT=""
    for i in 1 2 3 4 5 6 7 8 9 10; do
        for n in $(ls /dev | grep '^ng' | sort); do
            echo "$BEFORE" | grep -qx "$n" || case $n in *n1) REMOTE=/dev/$n ;; *n2) FAULT=/dev/$n ;; esac
        done
        [ -n "$REMOTE" ] && [ -n "$FAULT" ] && break; sleep 1
    done
    for c in /sys/class/nvme/nvme*; do echo "guest: ${c##*/}: transport $(cat $c/transport), subsystem $(cat $c/subsysnqn)"; done
    [ -n "$REMOTE" ] || { echo "GPUMEM_QEMU_RESULT FAIL no generic device appeared for the remote namespace"; finish; }
    echo "guest: remote namespace over nvme-tcp: $REMOTE"
    guest_test uring "$REMOTE" ${ARGS%%,*} ${ARGS#*,}
    echo "guest: guest_test exited with $?"
    echo "GPUMEM_URING_PART fault"
    [ -n "$FAULT" ] || { echo "GPUMEM_QEMU_RESULT FAIL no generic device for the slow namespace 2"; finish; }
    echo "guest: slow namespace ($SLOW) over nvme-tcp: $FAULT; the port's link goes during the run"
    guest_test uring-fault "$FAULT" ${ARGS%%,*} $(( ${ARGS#*,} / 4 )) $P/subsystems/gpumem-remote $S
    echo "guest: guest_test exited with $?"

    # ---- NVMe over RDMA: soft-RoCE (rdma_rxe) on a dummy netdev -------------
    echo "GPUMEM_URING_PART rdma"
    rdma_up || { echo "GPUMEM_QEMU_RESULT FAIL uring-rdma: no rxe device"; finish; }
    RDISK=$(ngdev gpumem2)
    nvmet_subsys gpumem-rdma "/dev/nvme${RDISK#/dev/ng}" && nvmet_port 2 rdma 192.0.2.1 4420 gpumem-rdma &&
        fabric_connect rdma 192.0.2.1 4420 gpumem-rdma ||
        { dmesg | tail -n 8 | sed 's/^/guest: dmesg: /'; echo "GPUMEM_QEMU_RESULT FAIL uring-rdma: nvmet over rdma"; finish; }
    RNG=$(wait_ng gpumem-rdma)
    paths gpumem-rdma
    [ -n "$RNG" ] || { echo "GPUMEM_QEMU_RESULT FAIL uring-rdma: no generic device for the rdma namespace"; finish; }
    echo "guest: namespace over nvme-rdma (rxe0 on dummy0): $RNG"
    guest_test uring "$RNG" ${ARGS%%,*} ${ARGS#*,}
    echo "guest: guest_test exited with $?"

    # ---- native multipath: one subsystem, two ports, one path removed -------
    # mp_run NAME NQN PORT_A TRTYPE_A TRADDR_A SVC_A PORT_B TRTYPE_B TRADDR_B SVC_B IOPOLICY:
    # a slow null_blk behind NQN on two ports, the initiator on both (one
    # multipath head); the link of port A goes mid-run and comes back.
    mp_run() {
        echo "GPUMEM_URING_PART $1"
        dev=$(nullb $1 16 20000000) && nvmet_subsys $2 $dev && nvmet_port $3 $4 $5 $6 $2 && nvmet_port $7 $8 $9 ${10} $2 &&
            fabric_connect $4 $5 $6 $2 && fabric_connect $8 $9 ${10} $2 ||
            { dmesg | tail -n 8 | sed 's/^/guest: dmesg: /'; echo "GPUMEM_QEMU_RESULT FAIL uring-multipath: $1 set-up"; return; }
        NG=$(wait_ng $2)
        [ -n "$NG" ] || { echo "GPUMEM_QEMU_RESULT FAIL uring-multipath: no generic device for $2"; return; }
        SUB=$(dirname /sys/class/nvme-subsystem/*/${NG#/dev/})
        echo ${11} > $SUB/iopolicy
        echo "guest: $1: $NG, the multipath head of $2 (nvme_core.multipath=$(cat /sys/module/nvme_core/parameters/multipath), iopolicy $(cat $SUB/iopolicy))"
        paths $2
        gpumem-doctor --path uring | grep 'uring.transport' | sed "s/^/guest: $1: doctor: /"
        guest_test uring-multipath $NG ${ARGS%%,*} $(( ${ARGS#*,} / 2 )) /sys/kernel/config/nvmet/ports/$3/subsystems/$2 \
            /sys/kernel/config/nvmet/subsystems/$2 $(ctrl_state $2 $6)
        echo "guest: guest_test exited with $?"
        paths $2
    }
    mp_run multipath-tcp gpumem-mp 3 tcp 127.0.0.1 4421 4 tcp 127.0.0.1 4422 numa
    mp_run multipath-rdma gpumem-mp2 5 rdma 192.0.2.1 4421 6 tcp 127.0.0.1 4423 round-robin
    finish
fi
[ "$MODE" = iommu ] || echo 64 > /proc/sys/vm/nr_hugepages   # 2 MiB pages for the queue rings (VFIO needs none)
echo 0 > /proc/sys/vm/compact_unevictable_allowed       # locked DMA pages stay put
# Debian's kernel backs anonymous memory with transparent huge pages, and
# khugepaged moves small pages into them, locked ones too. Scanning often makes
# sure the shim's DMA memory is exempt (a moved page would receive no DMA).
echo 100 > /sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs
echo 100 > /sys/kernel/mm/transparent_hugepage/khugepaged/alloc_sleep_millisecs
echo "guest: $(grep HugePages_Total /proc/meminfo)"
insmod /lib/modules/uio.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod uio"; finish; }
insmod /lib/modules/uio_pci_generic.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod uio_pci_generic"; finish; }
ADDR=""
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat $d/vendor)" = 0x1b36 ] && [ "$(cat $d/device)" = 0x0010 ]; then ADDR=${d##*/}; fi
done
[ -n "$ADDR" ] || { echo "GPUMEM_QEMU_RESULT FAIL no QEMU NVMe device (1b36:0010) on the PCI bus"; finish; }
echo "guest: NVMe controller at $ADDR, driver: $(readlink /sys/bus/pci/devices/$ADDR/driver || echo none)"
[ "$MODE" = negative ] && guest_test unbound "$ADDR"
[ "$MODE" = negative ] && doctor_check unbound "$ADDR" && doctor_check vfio-noiommu "$ADDR"  # issue 33
if [ "$MODE" = iommu ]; then
    DEV=/sys/bus/pci/devices/$ADDR
    GROUP=$(readlink $DEV/iommu_group); GROUP=${GROUP##*/}
    echo "guest: IOMMU group ${GROUP:-none}, domain type $(cat $DEV/iommu_group/type 2>/dev/null || echo none)"
    [ -n "$GROUP" ] || { echo "GPUMEM_QEMU_RESULT FAIL the IOMMU is off (no iommu_group)"; finish; }
    for m in irqbypass vfio vfio_virqfd vfio_iommu_type1 vfio-pci-core vfio-pci; do
        insmod /lib/modules/$m.ko || { echo "GPUMEM_QEMU_RESULT FAIL insmod $m"; finish; }
    done
    # uio_pci_generic under a translating IOMMU: the shim must refuse
    echo uio_pci_generic > $DEV/driver_override
    echo "$ADDR" > /sys/bus/pci/drivers_probe
    echo "guest: driver now: $(readlink $DEV/driver)"
    doctor_check iommu-uio "$ADDR"  # issue 33
    guest_test iommu-uio "$ADDR"
    echo "$ADDR" > $DEV/driver/unbind
    # vfio-pci, and the group for an ordinary user
    echo vfio-pci > $DEV/driver_override
    echo "$ADDR" > /sys/bus/pci/drivers_probe
    echo "guest: driver now: $(readlink $DEV/driver)"
    doctor_check iommu-vfio-root-owned "$ADDR" 1000 262144  # issue 33: /dev/vfio/N still root's
    chown 1000:1000 /dev/vfio/$GROUP
    echo "guest: $(ls -l /dev/vfio/$GROUP)"
    doctor_check iommu-vfio "$ADDR" 1000 262144 && doctor_check iommu-vfio-memlock "$ADDR" 1000 8  # issue 33
    guest_test iommu-run "$ADDR" ${ARGS%%,*} ${ARGS#*,} 1000
    echo "guest: guest_test exited with $?"
    finish
fi
# uio_pci_generic takes the device (Debian's nvme driver is a module that is not here)
echo "1b36 0010" > /sys/bus/pci/drivers/uio_pci_generic/new_id
sleep 1
echo "guest: driver now: $(readlink /sys/bus/pci/devices/$ADDR/driver)"
if [ "$MODE" = negative ]; then
    guest_test negative "$ADDR"
else
    doctor_check uio "$ADDR"  # issue 33
    guest_test run "$ADDR" ${ARGS%%,*} ${ARGS#*,}
fi
echo "guest: guest_test exited with $?"
finish
EOF
chmod +x "$ROOT/init"
ln -s busybox "$ROOT/bin/cut"
(cd "$ROOT" && find . | cpio -o -H newc --quiet) | gzip -1 > "$WORK/initramfs.gz"
say "kernel $KERNEL, initramfs $(du -h "$WORK/initramfs.gz" | cut -f1)"

# ---- booting -----------------------------------------------------------------------
# boot NAME MODE ACCEL EXTRA_DEVICE_OPTIONS: console to $WORK/NAME.console, QEMU's
# guest-error and NVMe error trace log to $WORK/NAME.qemu.log.
boot() {
    local name=$1 mode=$2 accel=$3 devopts=$4 limit=${5:-$BOOT_TIMEOUT} machine=${6:-} kargs=${7:-} accel_opt
    if [ "$accel" = kvm ]; then accel_opt="-accel kvm"; else accel_opt="-accel tcg,thread=multi"; fi
    say "boot '$name' ($accel, $THREADS vCPUs, limit ${limit}s)"
    local t0=$SECONDS
    set +e
    timeout --foreground -k 10 "$limit" "$QEMU" $accel_opt -m 1024 -smp "$THREADS" $machine \
        -kernel "$KERNEL" -initrd "$WORK/initramfs.gz" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init gpumem_mode=$mode gpumem_args=$THREADS,$COMMANDS gpumem_bench=$BENCH_DEPTH,$BENCH_SECONDS,$BENCH_ROUNDS $kargs" \
        -display none -serial stdio -monitor none -no-reboot -nodefaults \
        -drive file="$WORK/disk.img",if=none,id=nvm,format=raw,cache=writeback \
        -device "nvme,serial=gpumem0,drive=nvm$devopts" \
        -D "$WORK/$name.qemu.log" -d guest_errors -trace 'pci_nvme_err*' -trace 'pci_nvme_ub*' \
        < /dev/null 2> "$WORK/$name.qemu.stderr" | tee "$WORK/$name.console" | grep --line-buffered -v '^GENS '
    local rc=${PIPESTATUS[0]}
    set -e
    # QEMU's own messages go to a file of their own, not into the console: written
    # to the same pipe, they could land inside a guest line that the checks below
    # parse (an IOVA or a command ID). Kept with the trace log, and shown.
    if [ -s "$WORK/$name.qemu.stderr" ]; then
        sed 's/^/    qemu: /' "$WORK/$name.qemu.stderr" >&2
        cat "$WORK/$name.qemu.stderr" >> "$WORK/$name.qemu.log"
    fi
    say "boot '$name' took $((SECONDS - t0)) s"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && die "boot '$name' ran past ${limit}s (console: $WORK/$name.console)"
    grep -q GPUMEM_GUEST_DONE "$WORK/$name.console" || die "boot '$name': the guest did not finish (rc $rc)"
    return 0
}

if [ "$ACCEL" = auto ]; then
    ACCEL=tcg
    if [ -w /dev/kvm ]; then
        "$BUILD/image" create "$WORK/disk.img" 2048 >/dev/null
        if (boot probe probe kvm "" 60) >/dev/null 2>&1 && grep -q GPUMEM_PROBE_OK "$WORK/probe.console"; then
            ACCEL=kvm
        fi
        say "KVM probe: using $ACCEL"
    fi
fi

nvme_errors() { grep -E 'pci_nvme_(err|ub)|nvme' "$1" 2>/dev/null || true; }

# 4. the io_uring passthrough forwarder: the guest's kernel owns the disks
if [[ "$BOOTS" == *" uring "* ]]; then
    "$BUILD/image" create "$WORK/disk.img" $DISK_BLOCKS
    "$BUILD/image" create "$WORK/disk2.img" $DISK_BLOCKS
    "$BUILD/image" create "$WORK/disk3.img" $DISK_BLOCKS
    COMMANDS=$URING_COMMANDS boot uring uring "$ACCEL" "" "$BOOT_TIMEOUT" \
        "-drive file=$WORK/disk2.img,if=none,id=nvm2,format=raw,cache=writeback -device nvme,serial=gpumem1,drive=nvm2
         -drive file=$WORK/disk3.img,if=none,id=nvm3,format=raw,cache=writeback -device nvme,serial=gpumem2,drive=nvm3"
    C="$WORK/uring.console"
    ERRS=$(nvme_errors "$WORK/uring.qemu.log")
    [ -z "$ERRS" ] || { printf '%s\n' "$ERRS" | sed -n '1,20p' >&2; die "QEMU reported NVMe guest errors in the uring boot"; }
    grep -a -E '^(uring|uring-fault|uring-multipath|guest): ' "$C" | sed 's/^/    /'
    # the console split by the part that wrote it (GPUMEM_URING_PART lines): $WORK/uring-PART.log
    awk '{sub(/\r$/, "")} /^GPUMEM_URING_PART/ {part=$2} part {print > ("'"$WORK"'/uring-" part ".log")}' "$C"
    # part_result PART MODE: the result line of guest_test MODE in that part, which must pass
    part_result() {
        local r
        r=$(grep -a -E "^GPUMEM_QEMU_RESULT [A-Z]+ $2( |:|$)" "$WORK/uring-$1.log" 2>/dev/null | tail -n 1)
        [ -n "$r" ] || r=$(grep -a "^GPUMEM_QEMU_RESULT FAIL" "$WORK/uring-$1.log" 2>/dev/null | tail -n 1)
        echo "$r" | grep -q "^GPUMEM_QEMU_RESULT PASS" || die "uring boot, $1: ${r:-no result line} (console: $C)"
        say "uring $1: $r"
    }
    for part in local remote rdma; do
        part_result $part uring
        grep -a '^GENS ' "$WORK/uring-$part.log" > "$WORK/uring-$part.gens" || true
    done
    "$BUILD/image" check "$WORK/disk.img" "$WORK/uring-local.gens" || die "uring boot: the local disk does not hold the guest's writes"
    "$BUILD/image" check "$WORK/disk2.img" "$WORK/uring-remote.gens" || die "uring boot: the remote disk does not hold the guest's writes"
    "$BUILD/image" check "$WORK/disk3.img" "$WORK/uring-rdma.gens" || die "uring boot: the disk exported over nvme-rdma does not hold the guest's writes"
    part_result fault uring-fault
    for part in multipath-tcp multipath-rdma; do
        part_result $part uring-multipath
        # the doctor names the transports of the head's paths and that multipath is on
        grep -a -q "doctor: .*uring.transport.*multipath on, 2 paths" "$WORK/uring-$part.log" ||
            die "uring boot, $part: the doctor did not report the multipath head and its 2 paths (console: $C)"
    done
    grep -a -q "doctor: .*uring.transport.*rdma" "$WORK/uring-multipath-rdma.log" ||
        die "uring boot: the doctor did not name the rdma transport (console: $C)"
    say "PASS (io_uring passthrough: local, nvme-tcp and nvme-rdma to nvmet, a port removed mid-run and restored, one of two multipath paths removed mid-run and restored, tcp+tcp and rdma+tcp)"
fi
# 5. the benchmark: the forwarder, fio and the VFIO shim on one disk, one boot
if [[ "$BOOTS" == *" bench "* ]]; then
    "$BUILD/image" create "$WORK/disk.img" $DISK_BLOCKS
    say "host: $(nproc) cores, loadavg $(cut -d' ' -f1-3 /proc/loadavg) before the boot"
    # a round: the forwarder and fio twice each, each variant and a fio run
    # of its own, both over tcp and rdma, the shim twice; two minutes for the rest
    BENCH_RUNS=$(( 12 + 2 * N_VARIANTS ))
    THREADS=$BENCH_CPUS boot bench bench "$ACCEL" "" $(( BENCH_ROUNDS * BENCH_RUNS * (BENCH_SECONDS + 3) + 240 )) \
        "-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on" \
        "intel_iommu=on gpumem_variants=$BENCH_VARIANTS"
    say "host: loadavg $(cut -d' ' -f1-3 /proc/loadavg) after the boot"
    C="$WORK/bench.console"
    ERRS=$(nvme_errors "$WORK/bench.qemu.log")
    [ -z "$ERRS" ] || { printf '%s\n' "$ERRS" | sed -n '1,20p' >&2; die "QEMU reported NVMe guest errors in the bench boot"; }
    grep -a -E '^(bench|guest): ' "$C" | sed 's/^/    /'
    grep -a -q "GPUMEM_QEMU_RESULT FAIL" "$C" && die "bench boot: $(grep -a "GPUMEM_QEMU_RESULT FAIL" "$C" | head -n 1) (console: $C)"
    # each round: the forwarder once and once a variant, over tcp and rdma once each, the shim once
    for part in "bench-uring uring" "bench-uring tcp" "bench-uring rdma" bench-vfio; do
        n=$(grep -a -c "GPUMEM_QEMU_RESULT PASS $part" "$C" || true)
        want=$BENCH_ROUNDS
        [ "$part" = "bench-uring uring" ] && want=$(( BENCH_ROUNDS * (1 + N_VARIANTS) ))
        [ "$n" = "$want" ] || die "bench boot: $part passed $n of $want runs: $(grep -a "GPUMEM_QEMU_RESULT.*$part" "$C" | grep -v PASS | head -n 1) (console: $C)"
    done
    python3 "$(dirname "$0")/bench_report.py" "$C" | tee "$WORK/bench.md" || die "bench boot: no report (console: $C)"
fi
[[ "$BOOTS" == *" negative "* ]] || exit 0
# ---- doctor agreement (issue 33) ----------------------------------------------------
# doctor_agreement CONSOLE LABEL=VERDICT...: the guest's doctor_check printed, for
# each label, the verdict expected (pass or fail) and the shim agreed (opened
# where the doctor passed, refused where it failed); where it passed, the
# doctor's own --open (vfio.open) passed too.
doctor_agreement() {
    local console=$1 want label verdict line
    shift
    for want in "$@"; do
        label=${want%%=*} verdict=${want#*=}
        line=$(grep -a "^GPUMEM_DOCTOR $label " "$console" | tail -n 1)
        [ -n "$line" ] || die "doctor: no agreement line for '$label' in $console"
        say "  $line"
        echo "$line" | grep -q "verdict=$verdict .*agree=yes" ||
            { grep -a "^doctor\[$label\]" "$console" | sed 's/^/    /' >&2; die "doctor: '$label': expected verdict=$verdict and agreement"; }
        if [ "$verdict" = pass ]; then
            grep -a "^doctor-open\[$label\]: .* vfio.open .*opened" "$console" | sed 's/^/    /'
            grep -a -q "^doctor-open\[$label\]: ✓ vfio.open" "$console" || die "doctor: '$label': --open did not pass"
        fi
    done
}

# 1. negative tests, errors on purpose
"$BUILD/image" create "$WORK/disk.img" $DISK_BLOCKS
boot negative negative "$ACCEL" ",max_ioqpairs=2"
grep -q "GPUMEM_QEMU_RESULT PASS unbound" "$WORK/negative.console" || die "unbound-device tests failed"
grep -q "GPUMEM_QEMU_RESULT PASS negative" "$WORK/negative.console" || die "negative tests failed"
for expected in pci_nvme_err_invalid_create_cq_cqid pci_nvme_err_invalid_create_sq_cqid \
                pci_nvme_err_invalid_lba_range; do
    grep -q "$expected" "$WORK/negative.qemu.log" || die "QEMU did not report $expected in the negative boot"
done
say "negative boot: QEMU reported $(nvme_errors "$WORK/negative.qemu.log" | wc -l) NVMe errors, provoked on purpose:"
nvme_errors "$WORK/negative.qemu.log" | sed 's/^/    /' | cut -c1-160
doctor_agreement "$WORK/negative.console" unbound=fail vfio-noiommu=fail  # issue 33

# 2. the workload, strict
"$BUILD/image" create "$WORK/disk.img" $DISK_BLOCKS
boot run run "$ACCEL" ""
ERRS=$(nvme_errors "$WORK/run.qemu.log")
if [ -n "$ERRS" ]; then
    printf '%s\n' "$ERRS" | sed -n '1,20p' >&2  # sed reads it all: no SIGPIPE under pipefail
    die "QEMU reported $(echo "$ERRS" | wc -l) NVMe guest errors in the workload boot"
fi
say "workload boot: 0 NVMe guest errors reported by QEMU"
RESULT=$(grep -a 'GPUMEM_QEMU_RESULT' "$WORK/run.console" | tail -n 1)
echo "$RESULT" | grep -q PASS || die "workload: ${RESULT:-no result line}"
"$BUILD/image" check "$WORK/disk.img" "$WORK/run.console" || die "the image file does not hold the guest's writes"
say "PASS: $RESULT"
doctor_agreement "$WORK/run.console" uio=pass  # issue 33

# 3. the IOMMU on: uio refused, VFIO as an ordinary user, IOVA negatives
"$BUILD/image" create "$WORK/disk.img" $DISK_BLOCKS
# The vIOMMU is created before the devices it translates for; interrupt
# remapping needs the split irqchip.
# ivshmem's BAR2 stands in for a GPU's BAR1 (device memory the SSD reads into).
boot iommu iommu "$ACCEL" "" "$BOOT_TIMEOUT" \
    "-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on
     -object memory-backend-ram,id=p2pmem,size=2M -device ivshmem-plain,memdev=p2pmem" "intel_iommu=on"
C="$WORK/iommu.console"
grep -a "^guest: IOMMU group" "$C" | sed 's/^/    /'
grep -q "GPUMEM_QEMU_RESULT PASS iommu-uio" "$C" || die "iommu boot: uio_pci_generic was not refused as it should be"
RESULT=$(grep -a 'GPUMEM_QEMU_RESULT.*commands=' "$C" | tail -n 1)
echo "$RESULT" | grep -q PASS || die "iommu boot, workload through VFIO: ${RESULT:-no result line}"
grep -q "GPUMEM_QEMU_RESULT PASS iommu-negative" "$C" || die "iommu boot: the negative cases failed"
# NVMe errors only at the addresses the negative cases aimed at, and their
# reads' data transfer errors (status 0x4004), by the command IDs they print
ALLOWED=$(grep -a -o 'NEGATIVE_IOVA 0x[0-9a-f]*' "$C" | awk '{print $2}' | paste -sd'|' -)
CIDS=$(grep -a -o 'NEGATIVE_CID [0-9]*' "$C" | awk '{print $2}' | paste -sd'|' -)
[ -n "$ALLOWED" ] && [ -n "$CIDS" ] || die "iommu boot: the negative cases printed no addresses or command IDs"
# DMA the IOMMU rejected (QEMU's guest_errors "Invalid read/write at addr")
# only inside the pages of those addresses
PAGES=$(grep -a -o 'NEGATIVE_IOVA 0x[0-9a-f]*' "$C" | awk '{print substr($2, 1, length($2) - 3)}' | paste -sd'|' -)
ERRS=$( (nvme_errors "$WORK/iommu.qemu.log"; grep -a '^Invalid \(read\|write\) at addr' "$WORK/iommu.qemu.log") |
       grep -v -E "($ALLOWED)\b" | grep -v -i -E "^Invalid (read|write) at addr ($PAGES)[0-9a-f]{3}," |
       grep -v -E "^pci_nvme_err_req_status cid ($CIDS) nsid 1 status 0x4004 opc 0x2$" || true)
if [ -n "$ERRS" ]; then
    printf '%s\n' "$ERRS" | sed -n '1,20p' >&2  # sed reads it all: no SIGPIPE under pipefail
    die "QEMU reported $(echo "$ERRS" | wc -l) NVMe guest errors in the iommu boot outside the negative cases"
fi
say "iommu boot: 0 NVMe guest errors and 0 rejected DMA outside the negative cases; provoked on purpose:"
nvme_errors "$WORK/iommu.qemu.log" | sed 's/^/    /' | cut -c1-160
echo "    $(grep -a -c '^Invalid \(read\|write\) at addr' "$WORK/iommu.qemu.log") DMA accesses rejected by the IOMMU, all in the pages at $ALLOWED"
grep -q "iommu-p2p: 64 of 64 blocks right in device memory" "$C" || die "iommu boot: the read into device memory failed"
grep -a -E '^(iommu-|negative: )' "$C" | sed 's/^/    /'
"$BUILD/image" check "$WORK/disk.img" "$C" || die "iommu boot: the image file does not hold the guest's writes"
say "PASS (IOMMU, VFIO, uid 1000): $RESULT"
doctor_agreement "$C" iommu-uio=fail iommu-vfio-root-owned=fail iommu-vfio=pass iommu-vfio-memlock=fail  # issue 33
