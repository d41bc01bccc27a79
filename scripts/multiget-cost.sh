#!/usr/bin/env bash
# Server cost of multi-key UDP gets: CPU1 time per request for gets of N keys, answered by stock
# memcached (no cache on the path) and by the kernel (inkcache attached, every key hits), in the
# pinned topology of shared/GUIDE.md section 2 (client on CPU0; memcached -t 1 and the server
# veth's threaded NAPI on CPU1). Prints a markdown table (median of 3 rounds).
# What it decides: a multi-get that partly hits can either pass whole to memcached, or be split
# (the kernel answers the hits, memcached the rest); splitting pays off only if what memcached
# saves per key it no longer answers exceeds what splitting costs the kernel.
# PARTIAL=1: gets draw from twice the keys stored, so a get of N keys has about N/2 hits and N/2
# keys memcached does not have either; measured with the split (kernel) and with the get passed
# whole (kernel-nosplit, --debug-no-split).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-target/release}
SECS=${SECS:-5}
SIZES=${SIZES:-"1 2 5 10 24"}
PARTIAL=${PARTIAL:-0}
STORED=2000
GETKEYS=$STORED
MODES="memcached kernel"
if [ "$PARTIAL" = 1 ]; then GETKEYS=$((2 * STORED)); MODES="memcached kernel kernel-nosplit"; fi
pinned_memcached mg 256

cpu1_busy() { # jiffies CPU1 spent on anything but idle and iowait
    awk '$1 == "cpu1" { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}
run() { # $1 label, $2 keys per get, $3 keys drawn from
    local b0 b1
    b0=$(cpu1_busy)
    ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" run --server 198.18.0.1:11211 --proto udp \
        --get-ratio 1 --multiget "$2" --keys "$3" --key-size 16 --value-size 16 \
        --duration "${SECS}s" --warmup 0s --inflight 32 --no-server-stats --json > "$OUT/$1.json"
    b1=$(cpu1_busy)
    echo $((b1 - b0)) > "$OUT/$1.busy"
}
# every key exists (and, with inkcache, is in the kernel cache before the measured runs)
ip netns exec "$CLI" "$BIN/inkbench" run --server 198.18.0.1:11211 --proto tcp --get-ratio 0 \
    --keys $STORED --key-size 16 --value-size 16 --duration 2s --no-server-stats --json >/dev/null
for round in 1 2 3; do
    for mode in $MODES; do
        if [ $mode != memcached ]; then
            extra=""
            [ $mode = kernel-nosplit ] && extra=--debug-no-split
            # shellcheck disable=SC2086
            "$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" $extra >/dev/null
            threaded_napi
            run "warm-$round" 1 $STORED # learn every key
        else
            "$BIN/inkcache" --netns "$SRV" veth-peer --iface "$SIF"
            threaded_napi
        fi
        for n in $SIZES; do run "$mode-$n-$round" "$n" $GETKEYS; done
        if [ $mode != memcached ]; then
            "$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json > "$OUT/stats-$round.json"
            "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null
        else
            "$BIN/inkcache" --netns "$SRV" veth-peer --iface "$SIF" --remove
        fi
    done
done
python3 - "$OUT" "$SECS" "$SIZES" "$(getconf CLK_TCK)" "$PARTIAL" <<'PY'
import json, sys, statistics
d, secs, sizes, hz = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
partial = sys.argv[5] == "1"
def cost(mode, n):
    """median over rounds of CPU1 microseconds per request, and of requests/s"""
    us, rps = [], []
    for r in (1, 2, 3):
        j = json.load(open(f"{d}/{mode}-{n}-{r}.json"))
        busy = int(open(f"{d}/{mode}-{n}-{r}.busy").read()) / hz
        rps.append(j["throughput"])
        us.append(busy / (j["throughput"] * secs) * 1e6)
    return statistics.median(us), statistics.median(rps)
if partial:
    print("| keys per get (half of them stored) | memcached µs/request | inkcache, split: µs/request | req/s | inkcache, passed whole: µs/request | req/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        m, mr = cost("memcached", n); k, kr = cost("kernel", n); w, wr = cost("kernel-nosplit", n)
        print(f"| {n} | {m:.2f} | {k:.2f} | {kr:,.0f} | {w:.2f} | {wr:,.0f} |")
    st = json.load(open(f"{d}/stats-3.json"))
    print()
    print(f"kernel counters (last round, passed whole): hits={st['hits']} misses={st['misses']} splits={st['splits']}")
    sys.exit(0)
print("| keys per get | memcached µs/request | memcached req/s | kernel (all hit) µs/request | kernel req/s |")
print("| ---: | ---: | ---: | ---: | ---: |")
rows = {}
for n in sizes:
    m, mr = cost("memcached", n); k, kr = cost("kernel", n)
    rows[int(n)] = (m, k)
    print(f"| {n} | {m:.2f} | {mr:,.0f} | {k:.2f} | {kr:,.0f} |")
ns = sorted(rows)
lo, hi = ns[0], ns[-1]
print()
if hi > lo:
    per_key = (rows[hi][0] - rows[lo][0]) / (hi - lo)
    print(f"memcached's cost per extra key: {per_key:.2f} µs ((cost at {hi} keys - cost at {lo}) / {hi - lo});"
          f" a request costs it {rows[lo][0]:.2f} µs with {lo} key(s)")
st = json.load(open(f"{d}/stats-3.json"))
print(f"kernel counters (last round): hits={st['hits']} misses={st['misses']} too_big={st['too_big']}")
PY
