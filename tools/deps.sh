#!/bin/sh
# SPDX-License-Identifier: MIT
# deps.sh NEED...: make sure the tools a make target needs are
# present before it builds anything, installing what is missing.
#
#   NEED: cc criterion benchmark python3 networkx gnuplot qemu cmake pkg-config git clang libfuzzer fio spin
#         duckdb pyarrow (PyPI packages, the table tool's peer and its Parquet reader; networkx too)
#
# Each missing need is installed with apt-get (the PyPI ones with
# python3 -m pip into the python3 on PATH, pip itself from Debian if
# absent), as root or through sudo when it asks for no password, and the
# packages are named as they are installed.
# Where that cannot be done (no apt-get, no root, sudo wants a password) or
# GPUMEM_NO_INSTALL=1 is set, it stops at once (exit 1) with the one command
# that would install everything missing. Plot steps skip the plot when this
# fails, and say so.
#
# This is the only list of system packages in the project: the Makefile's
# targets and CI (.ci/run) both come through here, so a fresh machine and CI
# take the same path.
set -u
CC=${CC:-cc}
CXX=${CXX:-c++}

# has_header COMPILER LANG HEADER: whether the compiler finds the header (how
# the build will look for it, so a header in an unusual place still counts).
has_header() {
    command -v "$1" >/dev/null 2>&1 &&
        printf '#include <%s>\n' "$3" | "$1" -x "$2" -E - -o /dev/null >/dev/null 2>&1
}

# missing NEED: prints the Debian packages that provide NEED if it is absent.
missing() {
    case $1 in
    cc) { command -v "$CC" && command -v "$CXX" && command -v make; } >/dev/null 2>&1 || echo build-essential ;;
    criterion) has_header "$CC" c criterion/criterion.h || echo libcriterion-dev ;;
    benchmark) has_header "$CXX" c++ benchmark/benchmark.h || echo libbenchmark-dev ;;
    python3) command -v python3 >/dev/null 2>&1 || echo python3 ;;
    gnuplot) command -v gnuplot >/dev/null 2>&1 || echo gnuplot-nox ;;
    cmake) command -v cmake >/dev/null 2>&1 || echo cmake ;;
    pkg-config) command -v pkg-config >/dev/null 2>&1 || echo pkg-config ;;
    git) command -v git >/dev/null 2>&1 || echo git ;; # make install-test: FetchContent's GIT_REPOSITORY
    clang) command -v clang >/dev/null 2>&1 || echo clang ;;
    libfuzzer) # make fuzz: clang and its libFuzzer runtime (Debian ships it apart from the compiler)
        printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
            clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 || echo clang libclang-rt-dev ;;
    qemu) # what tests/qemu/run.sh uses: the emulator, a static busybox, a kernel, cpio, and
        # iproute2's rdma (carried into the guest: it makes the soft-RoCE device)
        command -v qemu-system-x86_64 >/dev/null 2>&1 || echo qemu-system-x86
        command -v rdma >/dev/null 2>&1 || echo iproute2
        { [ -x /bin/busybox ] || [ -x /usr/bin/busybox ]; } || echo busybox-static
        ls /boot/vmlinuz-* >/dev/null 2>&1 || echo linux-image-amd64
        command -v cpio >/dev/null 2>&1 || echo cpio ;;
    fio) # make qemu-bench carries Debian's fio (and its libraries) into the guest
        command -v fio >/dev/null 2>&1 || echo fio ;;
    spin) # make spin: the Spin model checker (its pan is built with cc)
        command -v spin >/dev/null 2>&1 || echo spin ;;
    duckdb | pyarrow | networkx) # PyPI, into the python3 on PATH (a pyenv one sees no Debian package):
        # 'pip:NAME', pip itself from Debian when missing. networkx: the graph tool's peer in make test
        python3 -c "import $1" >/dev/null 2>&1 || { python3 -m pip --version >/dev/null 2>&1 || echo python3-pip; echo "pip:$1"; } ;;
    *) echo "deps.sh: unknown need '$1'" >&2; exit 2 ;;
    esac
}

pkgs=
for need in "$@"; do
    for p in $(missing "$need"); do
        case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p" ;; esac
    done
done
pkgs=${pkgs# }
[ -z "$pkgs" ] && exit 0
# PyPI packages apart from Debian's: installed after them (pip may be one of those)
pips=
apts=
for p in $pkgs; do
    case $p in pip:*) pips="$pips ${p#pip:}" ;; *) apts="$apts $p" ;; esac
done
pips=${pips# }
apts=${apts# }

cmd="sudo apt-get install -y $apts"
[ -n "$apts" ] || cmd=
[ -z "$pips" ] || cmd="${cmd:+$cmd && }python3 -m pip install $pips"
why=
if [ "${GPUMEM_NO_INSTALL:-0}" = 1 ]; then why="GPUMEM_NO_INSTALL=1"
elif [ -n "$apts" ] && ! command -v apt-get >/dev/null 2>&1; then why="no apt-get on this system"; cmd="install the packages that provide: $pkgs"
elif [ "$(id -u)" = 0 ]; then as=
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as=sudo
elif [ -z "$apts" ]; then as=
elif command -v sudo >/dev/null 2>&1; then why="not root, and sudo asks for a password"
else why="not root, and no sudo"
fi
if [ -n "$why" ]; then
    echo "gpumem: missing $pkgs, not installing ($why). Install with:" >&2
    echo "    $cmd" >&2
    exit 1
fi
if [ -n "$apts" ]; then
    echo "gpumem: installing $apts (apt-get${as:+ via sudo}) ..."
    # The package lists may be stale or absent on a fresh machine: refresh once.
    if ! $as env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $apts; then
        $as apt-get update -q && $as env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $apts || {
            echo "gpumem: installing $apts failed; install by hand with: $cmd" >&2
            exit 1
        }
    fi
fi
if [ -n "$pips" ]; then
    echo "gpumem: installing $pips (python3 -m pip) ..."
    # Debian's own python3 refuses pip installs outside a virtual environment
    # (PEP 668) unless told; another python3 (pyenv, a venv) takes them plainly.
    python3 -m pip install -q $pips || python3 -m pip install -q --break-system-packages $pips || {
        echo "gpumem: installing $pips failed; install by hand with: python3 -m pip install $pips" >&2
        exit 1
    }
fi
# Check again: a package can install and still leave the need unmet (a
# compiler that does not look where the package put its header).
for need in "$@"; do
    still=$(missing "$need")
    [ -z "$still" ] || { echo "gpumem: $still installed, but $need is still not found" >&2; exit 1; }
done
echo "gpumem: installed $pkgs"
