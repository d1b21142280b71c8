#!/usr/bin/env bash
# Runs kintsugi's rdma tests on soft-RoCE inside the test VM: builds the
# test binaries on the host with `--features rdma`, copies them into the
# VM (run.sh --payload), and runs there:
#   - the fabric's semantic tests on rdma (verbs, verb errors, fencing,
#     node leases: the same tests local, shm and tcp pass), the rdma
#     transport's own tests, and its control channel's unit tests;
#   - rTX crash points over rdma (every kind; 0 violations expected);
# and with --bench, a release `kintsugi` built with `--features rdma`:
#   - `fabric bench --transport rdma` and `bench ycsb --transport rdma`,
#     short runs whose figures are emulated (TCG): round trips and verbs
#     per op hold, speeds say nothing of a NIC.
# Exits 0 when everything passed. Builds the VM image first if it is
# missing (build-image.sh; cached under target/rdma-vm).
#
# Usage: deploy/rdma-vm/test.sh [--bench] [--crash-points quick|full|all] [--timeout SECONDS] [--accel tcg|kvm]
#   --crash-points: how much of the rtx exploration runs over rdma
#   (TCG costs 0.1-0.3 s per run; chaos/tests/rtx_crash_points.rs says
#   what each scope holds): quick (CI, ~3 min), full (default, ~30 min),
#   all (the 187,722 runs of every default shape: hours).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bench=0
crash=full
timeout_s=3600
accel=tcg
while [ $# -gt 0 ]; do
    case "$1" in
        --bench) bench=1 ;;
        --crash-points) crash="$2"; shift ;;
        --timeout) timeout_s="$2"; shift ;;
        --accel) accel="$2"; shift ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$crash" in
    quick|full|all) ;;
    *) echo "test.sh: --crash-points is quick, full or all, not $crash" >&2; exit 2 ;;
esac

missing=""
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
[ -e /usr/include/infiniband/verbs.h ] || missing="$missing libibverbs-dev"
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || missing="$missing libclang-dev"
if [ -n "$missing" ]; then
    echo "test.sh: building with --features rdma needs:$missing (Debian: apt-get install -y$missing)" >&2
    exit 3
fi
if [ ! -f "$repo/target/rdma-vm/initrd.img" ]; then
    echo "== no VM image yet: building it (deploy/rdma-vm/build-image.sh)"
    "$here/build-image.sh"
fi

payload="$(mktemp -d)"
trap 'rm -rf "$payload"' EXIT

echo "== building the rdma test binaries (cargo test --features rdma --no-run)"
cd "$repo"
targets=(--lib --test verbs --test verb_errors --test fencing --test node_lease --test rdma --test rtx_crash_points)
cargo test --features rdma -p kintsugi-fabric -p kintsugi-chaos --no-run "${targets[@]}" --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
wanted = {"verbs", "verb_errors", "fencing", "node_lease", "rdma", "fabric", "rtx_crash_points"}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in wanted \
            and m["target"]["kind"] != ["bin"]:
        print(m["target"]["name"], m["executable"])
' >"$payload/binaries"
if [ "$(wc -l <"$payload/binaries")" -ne 7 ]; then
    echo "test.sh: expected 7 test binaries, the build gave:" >&2
    cat "$payload/binaries" >&2
    cargo test --features rdma -p kintsugi-fabric -p kintsugi-chaos --no-run "${targets[@]}" >&2
    exit 4
fi
while read -r name path; do
    cp "$path" "$payload/$name"
done <"$payload/binaries"

if [ "$bench" = 1 ]; then
    echo "== building kintsugi --release --features rdma"
    cargo build --release --features rdma --bin kintsugi
    cp target/release/kintsugi "$payload/kintsugi"
fi

cat >"$payload/run" <<EOF
#!/bin/sh
# Runs inside the VM (deploy/rdma-vm/test.sh wrote it).
failed=""
run() {
    name="\$1"; shift
    echo "== \$name"
    start=\$(date +%s)
    if "\$@"; then
        echo "== \$name: passed (\$((\$(date +%s) - start)) s)"
    else
        echo "== \$name: FAILED (\$((\$(date +%s) - start)) s)"
        failed="\$failed \$name"
    fi
}
export RUST_LOG=warn KINTSUGI_RDMA_CRASH_POINTS=$crash
run "fabric verbs on rdma" ./verbs rdma --test-threads 1
run "fabric verb errors on rdma" ./verb_errors rdma --test-threads 1
run "fabric fencing on rdma" ./fencing rdma --test-threads 1
run "fabric node leases on rdma" ./node_lease rdma --test-threads 1
run "rdma transport" ./rdma --test-threads 1
run "rdma control channel" ./fabric rdma:: --test-threads 1
run "rtx crash points over rdma" ./rtx_crash_points --exact no_crash_point_over_rdma_violates_rtx --nocapture
EOF
if [ "$bench" = 1 ]; then
    cat >>"$payload/run" <<'EOF'
run "fabric bench over rdma (emulated)" ./kintsugi fabric bench --transport rdma --op read --size 64 --batch 8 --threads 1 --duration 3s
run "bench ycsb over rdma (emulated)" ./kintsugi bench ycsb --transport rdma --variant optimal,rtx --workload a,b --keys 10000 --threads 1 --duration 3s --warmup 1s --rounds 1
EOF
fi
cat >>"$payload/run" <<'EOF'
if [ -n "$failed" ]; then
    echo "== rdma tests FAILED:$failed"
    exit 1
fi
echo "== rdma tests: all passed"
EOF
chmod +x "$payload/run"
rm "$payload/binaries"
"$here/run.sh" --payload "$payload" --timeout "$timeout_s" --accel "$accel"
