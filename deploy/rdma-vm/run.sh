#!/usr/bin/env bash
# Boots the soft-RoCE test VM (build it first: build-image.sh) and prints
# what it says on its serial console; exits with the status its payload
# exited with (0 without a payload: the RDMA device works).
#
# A payload is a directory whose executable `run` the VM runs from
# /payload after its own checks (`ibv_rc_pingpong` over rxe0); it is
# appended to the root as a second cpio archive, so the root is not
# rebuilt for it.
#
# TCG (emulation) by default: it boots in about 20 s and runs anywhere, and
# says nothing about a NIC's speed either way. `--accel kvm` where KVM
# works (on these VMs' nested KVM QEMU aborts setting an MSR).
#
# Usage: deploy/rdma-vm/run.sh [--image DIR] [--payload DIR] [--timeout SECONDS] [--accel tcg|kvm]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
image="$repo/target/rdma-vm"
payload=""
timeout_s=1200
accel_name=tcg
while [ $# -gt 0 ]; do
    case "$1" in
        --image) image="$2"; shift ;;
        --payload) payload="$2"; shift ;;
        --timeout) timeout_s="$2"; shift ;;
        --accel) accel_name="$2"; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for f in vmlinuz initrd.img; do
    if [ ! -f "$image/$f" ]; then
        echo "run.sh: no $image/$f: build the image first (deploy/rdma-vm/build-image.sh)" >&2
        exit 3
    fi
done
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    echo "run.sh: qemu-system-x86_64 is missing (Debian: apt-get install qemu-system-x86)" >&2
    exit 3
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
initrd="$image/initrd.img"
if [ -n "$payload" ]; then
    if [ ! -x "$payload/run" ]; then
        echo "run.sh: $payload/run is not an executable file" >&2
        exit 2
    fi
    mkdir -p "$work/payload-root"
    cp -a "$payload" "$work/payload-root/payload"
    (cd "$work/payload-root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$work/payload.cpio.gz"
    cat "$image/initrd.img" "$work/payload.cpio.gz" >"$work/initrd.img"
    initrd="$work/initrd.img"
fi

accel=(-accel "$accel_name")
echo "== booting the soft-RoCE VM (${accel[*]}; timeout ${timeout_s}s)"

log="$work/console.log"
set +e
timeout "$timeout_s" qemu-system-x86_64 \
    "${accel[@]}" -cpu max -smp 2 -m 3072 \
    -kernel "$image/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3" \
    -nic none -nographic -no-reboot </dev/null | tee "$log"
qemu_status=${PIPESTATUS[0]}
set -e
status="$(sed -n 's/^KINTSUGI-VM-EXIT \([0-9]*\).*/\1/p' "$log" | tail -1)"
if [ -z "$status" ]; then
    if [ "$qemu_status" -eq 124 ]; then
        echo "run.sh: the VM did not finish within ${timeout_s}s" >&2
    else
        echo "run.sh: the VM stopped (qemu status $qemu_status) without reporting an exit status" >&2
    fi
    exit 5
fi
exit "$status"
