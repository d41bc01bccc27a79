#!/usr/bin/env bash
# What the running kernel's verifier says of every inkcache eBPF object, program by program:
# accepted or not, the instructions it processed (of its 1M budget) and the subprograms that
# cost it most; for a refusal, the end of its log.
#
#   scripts/verifier-report.sh build DIR   compile bpf/*.bpf.c into DIR/*.o as build.rs does
#                                          (needs a `cargo build` first: it takes libbpf's headers
#                                          and vmlinux.h from target/)
#   scripts/verifier-report.sh load DIR    load each DIR/*.o with bpftool (verifier log level 2)
#                                          and report; nothing stays loaded
#   scripts/verifier-report.sh check DIR   the same without the log unless refused: accepted or
#                                          not, much faster (scripts/verifier-oldest.sh)
#
# Under other kernels: build on this machine, then load in the kernel matrix's VM, which sees
# this machine's files, except under /tmp, /var/tmp, /run, /root and /var/log (empty there):
#   scripts/verifier-report.sh build "$PWD/target/ink-objs"
#   KMATRIX_FILTER=NONE KMATRIX_PRE="$PWD/scripts/verifier-report.sh load $PWD/target/ink-objs" \
#       scripts/kernel-matrix.sh linux-image-6.1.0-56-amd64     # report in <out>/<kernel>/pre.log
# The loads use the objects' default constants (the control plane sets some before loading), so
# a count can differ a little from an attach; acceptance is what the tests then confirm.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "verifier-report: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 build|load|check DIR"
mode=$1
dir=$2

case $mode in
build)
    # the compiler crates/inkcache/build.rs takes: $INKCACHE_CLANG, else clang-14, else clang
    cc=${INKCACHE_CLANG:-$(command -v clang-14 || command -v clang || true)}
    [ -n "$cc" ] || die "clang is missing (make deps)"
    inc=$(find "$ROOT/target/" -path '*/libbpf-sys-*/out/include/bpf/bpf_helpers.h' 2>/dev/null | head -1)
    [ -n "$inc" ] || die "no libbpf headers under target/ (run cargo build first)"
    inc=$(dirname "$(dirname "$inc")")
    vml=$(find "$ROOT/target/" -path '*/inkcache-*/out/vmlinux/vmlinux.h' 2>/dev/null | head -1)
    [ -n "$vml" ] || die "no vmlinux.h under target/ (run cargo build first)"
    arch=$(uname -m)-linux-gnu
    mkdir -p "$dir"
    for src in "$ROOT"/bpf/*.bpf.c; do
        name=$(basename "$src" .bpf.c)
        cpu=()
        [ "$name" = inkcache_xdp ] && cpu=(-mcpu=v3) # as crates/inkcache/build.rs (ISA_V3)
        "$cc" "${cpu[@]}" -g -O2 -target bpf -D__TARGET_ARCH_x86 -I"$inc" -I"/usr/include/$arch" \
            -I"$ROOT/bpf" -I"$(dirname "$vml")" -Wall -Werror -c "$src" -o "$dir/$name.o"
    done
    ls "$dir"/*.o
    ;;
load | check)
    command -v bpftool >/dev/null || die "bpftool is missing (make deps)"
    [ "$(id -u)" = 0 ] || die "needs root"
    mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    compgen -G "$dir/*.o" >/dev/null || die "no objects in $dir (build them first)"
    echo "kernel $(uname -r)"
    for obj in "$dir"/*.o; do
        name=$(basename "$obj" .o)
        pin=/sys/fs/bpf/verifier-report-$$-$name
        mkdir -p "$pin"
        rc=0
        debug=(-d) # libbpf's debug output: the verifier log at level 2
        [ "$mode" = check ] && debug=() # the log (level 1) only for a refusal
        bpftool "${debug[@]}" prog loadall "$obj" "$pin" > "$log" 2>&1 || rc=$?
        rm -rf "$pin"
        if [ $rc = 0 ]; then echo "== $name: accepted"; else echo "== $name: REFUSED"; fi
        grep -E '^processed [0-9]+ insns' "$log" | sed 's/^/   /' || true
        # log lines per subprogram (level 2 logs every instruction walked): where the budget goes
        awk '/^Validating /{ if (f) n[f] += c; f = $2; c = 0 } { c++ }
             /^processed /{ if (f) n[f] += c; f = "" }
             END { for (k in n) print n[k], k }' "$log" | sort -rn | head -5 |
            awk '{ printf "   %-28s %9d log lines\n", $2, $1 }'
        if [ $rc != 0 ]; then
            grep -vE '^([0-9]+: |; |from |mark_precise|last_idx|parent|regs=|  )' "$log" |
                grep -vE '^libbpf: (map|sec)|^Warning|^If it used' | tail -20 | sed 's/^/   | /'
        fi
    done
    ;;
*) die "usage: $0 build|load|check DIR" ;;
esac
