#!/usr/bin/env bash
# `make test`'s last step: every eBPF object (bpf/*.bpf.c) through the verifier of the oldest
# kernel the apt sources offer (bookworm's 6.1, inkcache's minimum), in the kernel matrix's VM.
# The eBPF unit tests load the programs only under this machine's kernel, and an older verifier
# can refuse what a newer one accepts (6.1 loses a bound set before a spill: hitcost.md,
# twenty-fifth run), so every change to bpf/ meets the oldest one here. Under a minute, the VM
# emulated; the kernel package is downloaded once (scripts/kernel-matrix.sh's cache). Where qemu
# or the kernel is not to be had: SKIP, a failure under CI=true. Report and logs in
# target/verifier-oldest/ (VERIFIER_OLDEST_OUT). Root.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
OUT=${VERIFIER_OLDEST_OUT:-$ROOT/target/verifier-oldest}
skip() {
    if [ "${CI:-}" = true ]; then
        echo "verifier-oldest: FAILED (CI=true, no SKIP): $*" >&2
        exit 1
    fi
    echo "verifier-oldest: SKIP: $*"
    exit 0
}
for t in qemu-system-x86_64 busybox cpio xz; do
    command -v "$t" > /dev/null || skip "$t is missing (make kernel-matrix-deps installs it)"
done
rm -rf "$OUT"
mkdir -p "$OUT/objs"
OUT=$(cd "$OUT" && pwd -P) # the VM mounts the output at this path: no symlink in it
case $OUT in /tmp/* | /var/tmp/* | /run/* | /root/* | /var/log/*)
    echo "verifier-oldest: $OUT is empty in the VM (tmpfs there): use another directory" >&2
    exit 2 ;;
esac
"$ROOT/scripts/verifier-report.sh" build "$OUT/objs" > /dev/null
if ! KMATRIX_OLDEST=1 KMATRIX_FILTER=NONE KMATRIX_OUT="$OUT/vm" \
    KMATRIX_PRE="$ROOT/scripts/verifier-report.sh check $OUT/objs" \
    "$ROOT/scripts/kernel-matrix.sh" > "$OUT/matrix.log" 2>&1; then
    tail -5 "$OUT/matrix.log"
    skip "the kernel matrix could not run (log: $OUT/matrix.log)"
fi
pre=$(ls "$OUT"/vm/*/pre.log 2> /dev/null | head -1)
[ -n "$pre" ] || skip "the VM wrote no report (log: $OUT/matrix.log)"
kver=$(basename "$(dirname "$pre")")
fail=0 n=0
for o in "$OUT"/objs/*.o; do
    name=$(basename "$o" .o)
    n=$((n + 1))
    if ! grep -qx "== $name: accepted" "$pre"; then
        echo "verifier-oldest: $name is not accepted by $kver's verifier:" >&2
        awk -v h="== $name:" 'index($0, h) == 1 {p = 1; print; next} /^== / {p = 0} p' "$pre" |
            grep -v 'propagating' | tail -25 >&2
        fail=1
    fi
done
[ $n -gt 0 ] || { echo "verifier-oldest: no objects built" >&2; exit 1; }
[ $fail = 0 ] || { echo "verifier-oldest: report in $pre" >&2; exit 1; }
echo "verifier-oldest: all $n eBPF objects accepted by $kver's verifier"
