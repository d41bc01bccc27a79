#!/usr/bin/env bash
# What memory costs an XDP program live on this machine, apart from any kernel cache's code
# (issue 11; docs/results/hitcost.md, thirty-fifth run): the echo floor alone, then the echo after
# the reads of scripts/live-access.bpf.c, each variant built with clang and attached in turn to
# the server veth of the benchmark topology (client on CPU0, the server veth's threaded NAPI on
# CPU1, the client veth's on CPU0; no server process: the echo answers). inkbench sends UDP gets
# of 32-byte keys drawn Zipf 0.99 from KEYS (default 100,000), 32 in flight; the variant's
# bpf_stats run time per packet is printed, ROUNDS (default 2) rounds of SECS (default 4)
# seconds, the variants alternated. Usage (root; after `make build`, whose libbpf headers, in
# $BIN/build, the variants use):
#   scripts/live-access.sh [VARIANT...]     (default: $VARIANTS, else all of them; names below)
# A -direct variant makes the same reads in memory of the kernel's direct map (kmalloc'ed hash
# values, filled by this script) instead of an array map's vmalloc'ed 4 KiB pages.
# A -moved variant then moves the datagram into 48 bytes of grown headroom, as a reply built in
# a veth frame is written there; -moved-early moves it before the reads, so that the new front's
# line waits on memory with them; echo-head-calls makes a move's two helper calls and moves
# nothing. A code- variant runs that much straight-line code, no reads.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-target/release}
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-4}
KEYS=${KEYS:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
declare -A FLAGS=(
    [echo]="-DMODE_FIXED -DK=0"
    [fixed-16-pages]="-DMODE_FIXED -DK=16"
    [fixed-32-pages]="-DMODE_FIXED -DK=32"
    [fixed-32-lines]="-DMODE_FIXED -DK=32 -DSTRIDE=64"
    [chain-32-pages]="-DMODE_FIXED -DK=32 -DDEP"
    [pick-of-100-lines]="-DMODE_PICK -DN=100 -DSTRIDE=64"
    [pick-of-100-pages]="-DMODE_PICK -DN=100"
    [pick-of-1000-pages]="-DMODE_PICK -DN=1000"
    [pick-of-10000-pages]="-DMODE_PICK -DN=10000"
    [key-24mb]="-DMODE_KEY -DSPAN=(24u<<20)"
    [key-12mb]="-DMODE_KEY -DSPAN=(12u<<20)"
    [key-bucket-36mb]="-DMODE_KEY -DBUCKET -DSPAN=(36u<<20)"
    [key-compact-2mb]="-DMODE_KEY -DCOMPACT=(2048u<<10)"
    [key-compact-1mb]="-DMODE_KEY -DCOMPACT=(1024u<<10)"
    [key-compact-512kb]="-DMODE_KEY -DCOMPACT=(512u<<10)"
    [key-compact-128kb]="-DMODE_KEY -DCOMPACT=(128u<<10)"
    [pick-of-10000-pages-direct]="-DMODE_PICK -DN=10000 -DDIRECT"
    [key-24mb-direct]="-DMODE_KEY -DSPAN=(24u<<20) -DDIRECT"
    [key-bucket-36mb-direct]="-DMODE_KEY -DBUCKET -DSPAN=(36u<<20) -DDIRECT"
    [code-4kb]="-DMODE_CODE -DCODE_KB=4"
    [code-16kb]="-DMODE_CODE -DCODE_KB=16"
    [echo-moved]="-DMODE_FIXED -DK=0 -DMOVE=48"
    [key-24mb-moved]="-DMODE_KEY -DSPAN=(24u<<20) -DMOVE=48"
    [key-24mb-moved-early]="-DMODE_KEY -DSPAN=(24u<<20) -DMOVE=48 -DEARLY"
    [echo-head-calls]="-DMODE_FIXED -DK=0 -DHELPERS=48"
)
ORDER=(echo fixed-16-pages fixed-32-pages fixed-32-lines chain-32-pages pick-of-100-lines
    pick-of-100-pages pick-of-1000-pages pick-of-10000-pages key-24mb key-12mb key-bucket-36mb
    key-compact-2mb key-compact-1mb key-compact-512kb key-compact-128kb pick-of-10000-pages-direct
    key-24mb-direct key-bucket-36mb-direct echo-moved key-24mb-moved key-24mb-moved-early
    echo-head-calls code-4kb code-16kb)
# shellcheck disable=SC2086 # VARIANTS is a list of words
[ $# -gt 0 ] || set -- ${VARIANTS:-${ORDER[*]}}
for v in "$@"; do
    [ -n "${FLAGS[$v]:-}" ] || { echo "live-access: no variant $v (${ORDER[*]})" >&2; exit 2; }
done
INC=$(ls -d "$BIN"/build/libbpf-sys-*/out/include 2> /dev/null | head -1)
[ -n "$INC" ] || { echo "live-access: libbpf's headers not found: run make build first" >&2; exit 1; }
CLANG=$(command -v clang-14 || command -v clang)

bench_lock
id=$$
SRV=la-s$id CLI=la-c$id SIF=las$id CIF=lac$id
OUT=$(mktemp -d)
trap 'bpf_stats_release; netns_del "$SRV" "$CLI"; rm -rf "$OUT"' EXIT
# the echo is built whatever the variants (the client end's program is its live_pass), once
for v in $(printf '%s\n' echo "$@" | sort -u); do
    # shellcheck disable=SC2086 # the flags are words
    "$CLANG" -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -I"$INC" ${FLAGS[$v]} \
        -c "$HERE/live-access.bpf.c" -o "$OUT/$v.o"
done
netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
ip -n "$CLI" link set dev "$CIF" xdp obj "$OUT/echo.o" program live_pass
napi_thread "$CLI" "$CIF" 0 # the client end's program stays: its NAPI thread too
bpf_stats_hold
prog_id() { # the program attached to SIF
    ip netns exec "$SRV" bpftool -j net show dev "$SIF" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["xdp"][0]["id"])'
}
prog_run() { # "run_time_ns run_cnt" of program $1
    bpftool prog show id "$1" -j |
        python3 -c 'import json, sys; p = json.load(sys.stdin); print(p.get("run_time_ns", 0), p.get("run_cnt", 0))'
}
fill_direct() { # program $1's hash map "mem" given all its 1 MiB values (a -direct variant's)
    python3 - "$1" "$HERE" <<'PY'
import ctypes, json, struct, subprocess, sys
sys.path.insert(0, sys.argv[2])
from bpf_lines import bpf  # the bpf(2) call, failures reported
def show(*a):
    return json.loads(subprocess.check_output(["bpftool", "-j", *a]))
ids = show("prog", "show", "id", sys.argv[1])["map_ids"]
mem = [m for m in (show("map", "show", "id", str(i)) for i in ids) if m["name"] == "mem"][0]
libc = ctypes.CDLL(None, use_errno=True)
MAP_UPDATE_ELEM, MAP_GET_FD_BY_ID = 2, 14
fd = bpf(libc, MAP_GET_FD_BY_ID, struct.pack("I", mem["id"]))
key, value = ctypes.c_uint32(), ctypes.create_string_buffer(mem["bytes_value"])
for k in range(mem["max_entries"]):
    key.value = k
    attr = struct.pack("IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0)
    bpf(libc, MAP_UPDATE_ELEM, attr)  # union bpf_attr: map_fd, key, value, flags
PY
}
gets() { # seconds
    ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" run --server 198.18.0.1:11211 --proto udp \
        --get-ratio 1 --keys "$KEYS" --key-size 32 --value-size 32 --popularity zipf:0.99 \
        --duration "$1s" --warmup 0s --inflight 32 --no-server-stats --json > /dev/null
}
for round in $(seq "$ROUNDS"); do
    for v in "$@"; do
        ip -n "$SRV" link set dev "$SIF" xdp off
        ip -n "$SRV" link set dev "$SIF" xdp obj "$OUT/$v.o" program live_access
        napi_thread "$SRV" "$SIF" 1 # a new program on a veth: a new NAPI thread
        pid=$(prog_id)
        case $v in *-direct) fill_direct "$pid" ;; esac
        gets 1 # the map's pages touched once, the threads settled
        a=$(prog_run "$pid")
        gets "$SECS"
        b=$(prog_run "$pid")
        python3 -c 'import sys
(t0, n0), (t1, n1) = (map(int, x.split()) for x in sys.argv[1:3])
print(f"round {sys.argv[3]}: {sys.argv[4]}: {(t1 - t0) / max(n1 - n0, 1):.0f} ns per packet ({n1 - n0} packets)")' \
            "$a" "$b" "$round" "$v"
    done
done
