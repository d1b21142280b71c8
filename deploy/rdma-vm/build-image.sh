#!/usr/bin/env bash
# Builds the soft-RoCE test VM (issue 25): Debian's 6.1 kernel, whose
# rdma_rxe module gives an RDMA device on any netdev, and a bookworm root
# with rdma-core, packed as an initramfs. Output, reused while its inputs
# are unchanged:
#
#   OUT/vmlinuz     the kernel
#   OUT/initrd.img  the root (cpio, gzip), /init = deploy/rdma-vm/init
#   OUT/kernel-version
#
# OUT defaults to target/rdma-vm (ignored by git, cached across CI runs of
# one machine), which also keeps the debootstrapped root as a tarball. Needs root (debootstrap), and Debian's debootstrap, cpio,
# kmod and apt: `--install` installs what is missing with apt-get.
#
# Usage: deploy/rdma-vm/build-image.sh [--install] [--out DIR]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/rdma-vm"
install=0
while [ $# -gt 0 ]; do
    case "$1" in
        --install) install=1 ;;
        --out) out="$2"; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# What the root needs: the verbs library and its providers (rxe's is in
# ibverbs-providers), the perftest-like checks of ibverbs-utils, `rdma` and
# `ip` (iproute2), modprobe (kmod).
root_packages="rdma-core,ibverbs-providers,ibverbs-utils,libibverbs1,iproute2,kmod,procps"
mirror="${KINTSUGI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm

need() {
    local missing=()
    for tool in debootstrap cpio depmod modprobe dpkg-deb gzip; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    if [ ${#missing[@]} -eq 0 ]; then return 0; fi
    if [ "$install" -eq 1 ]; then
        echo "== installing debootstrap cpio kmod (missing: ${missing[*]})"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap cpio kmod >/dev/null
    else
        echo "build-image.sh: missing ${missing[*]}: install debootstrap, cpio and kmod, or pass --install" >&2
        exit 3
    fi
}
need

# The kernel package the distribution's meta-package names today.
kernel_pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
if [ -z "$kernel_pkg" ]; then
    echo "build-image.sh: apt does not know linux-image-amd64: run apt-get update" >&2
    exit 3
fi
kver="${kernel_pkg#linux-image-}"
# The image is up to date while the kernel package, /init and this script
# (its module list, its packing) are unchanged.
stamp="$kernel_pkg $(cat "$here/init" "$0" | sha256sum | cut -c1-16)"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] \
    && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
    echo "== the VM image in $out is up to date ($kernel_pkg)"
    exit 0
fi

mkdir -p "$out"
work="$(mktemp -d "$out/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "== kernel: $kernel_pkg"
if ! ls "$out"/"$kernel_pkg"_*.deb >/dev/null 2>&1; then
    rm -f "$out"/linux-image-*.deb
    (cd "$out" && apt-get download -qq -o APT::Sandbox::User=root "$kernel_pkg")
fi
dpkg-deb -x "$(ls "$out"/"$kernel_pkg"_*.deb | head -1)" "$work/kernel"
# The package's modules.dep is made when it is installed, not shipped.
depmod -b "$work/kernel" "$kver"

# The debootstrapped root is kept (a tarball beside the image) while the
# package list is unchanged: repacking for a new /init takes seconds.
base="$out/root-$(echo "$suite $root_packages" | sha256sum | cut -c1-12).tar"
if [ ! -f "$base" ]; then
    echo "== root: debootstrap $suite (minbase + $root_packages); a few minutes"
    debootstrap --variant=minbase --include="$root_packages" "$suite" "$work/root" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log" >&2
        echo "build-image.sh: debootstrap failed (log above)" >&2
        exit 4
    }
    # What a test VM never reads.
    rm -rf "$work/root"/usr/share/{doc,man,info,locale} "$work/root"/var/cache/apt/* "$work/root"/var/lib/apt/lists/*
    rm -f "$out"/root-*.tar
    tar -C "$work/root" -cf "$base.partial" . && mv "$base.partial" "$base"
else
    echo "== root: $base (cached)"
    mkdir -p "$work/root"
    tar -C "$work/root" -xf "$base"
fi

# rxe asks the crypto API for "crc32" (its ICRC) at run time, which loads
# a module no symbol names: without one, adding the link fails (ENOENT).
modules="rdma_rxe dummy crc32_generic"
echo "== modules: $modules and what they depend on"
mods="$work/root/lib/modules/$kver"
mkdir -p "$mods"
cp "$work/kernel/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$mods/" 2>/dev/null || true
for m in $modules; do
    modprobe -d "$work/kernel" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}' |
        while read -r ko; do
            rel="${ko#"$work/kernel"}"
            mkdir -p "$work/root$(dirname "$rel")"
            cp "$ko" "$work/root$rel"
        done
done
depmod -b "$work/root" "$kver"

install -m 0755 "$here/init" "$work/root/init"
mkdir -p "$work/root/payload"

echo "== packing the initramfs"
(cd "$work/root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$work/initrd.img"
cp "$work/kernel/boot/vmlinuz-$kver" "$work/vmlinuz"
mv "$work/initrd.img" "$work/vmlinuz" "$out/"
echo "$kver" >"$out/kernel-version"
echo "$stamp" >"$out/stamp"
echo "== built $out/vmlinuz and $out/initrd.img ($(du -h "$out/initrd.img" | cut -f1))"
