#!/usr/bin/env bash
# Mutation overhead of inkcache: SET throughput (TCP and UDP) against stock memcached without and
# with inkcache attached, alternating, 3 rounds; prints a markdown table (median of the rounds).
# Client pinned to CPU0; memcached and the server veth's threaded NAPI to CPU1 (shared/GUIDE.md
# section 2). Without inkcache, a pass-through XDP program sits on the server veth instead, so both
# runs pay for the same NAPI path and differ only by inkcache's work.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-target/release}
SECS=${SECS:-5}
pinned_memcached set 256

run() { # $1 label, $2 proto, extra args
    local label=$1 proto=$2; shift 2
    ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" run --server 198.18.0.1:11211 --proto "$proto" \
        --get-ratio 0 --keys 100000 --key-size 16 --value-size 64 --duration "${SECS}s" --warmup 1s \
        --no-server-stats --json "$@" > "$OUT/$label.json"
}
for round in 1 2 3; do
    for mode in plain inkcache; do
        if [ $mode = inkcache ]; then
            "$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" >/dev/null
        else
            "$BIN/inkcache" --netns "$SRV" veth-peer --iface "$SIF"
        fi
        threaded_napi
        run "$mode-tcp-$round" tcp --connections 4 --pipeline 8
        run "$mode-udp-$round" udp --inflight 32
        if [ $mode = inkcache ]; then
            "$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json > "$OUT/$mode-stats-$round.json"
            "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null
        else
            "$BIN/inkcache" --netns "$SRV" veth-peer --iface "$SIF" --remove
        fi
    done
done
python3 - "$OUT" <<'PY'
import json, sys, statistics, glob, os
d = sys.argv[1]
def med(mode, proto, key):
    v = [json.load(open(f))[key] for f in sorted(glob.glob(f"{d}/{mode}-{proto}-*.json"))]
    return statistics.median(v), v
print("| transport | memcached sets/s | memcached + inkcache sets/s | ratio | p99 µs (without / with) |")
print("| --- | ---: | ---: | ---: | ---: |")
for proto, label in (("tcp", "TCP, 4 conns x 8 pipelined"), ("udp", "UDP, 32 in flight")):
    a, av = med("plain", proto, "throughput"); b, bv = med("inkcache", proto, "throughput")
    pa = statistics.median(json.load(open(f))["latency"]["p99_us"] for f in glob.glob(f"{d}/plain-{proto}-*.json"))
    pb = statistics.median(json.load(open(f))["latency"]["p99_us"] for f in glob.glob(f"{d}/inkcache-{proto}-*.json"))
    print(f"| {label} | {a:,.0f} | {b:,.0f} | {b/a:.3f} | {pa:.0f} / {pb:.0f} |")
st = json.load(open(sorted(glob.glob(f"{d}/inkcache-stats-*.json"))[-1]))
print()
print(f"rounds: plain tcp {[round(x) for x in med('plain','tcp','throughput')[1]]}, inkcache tcp {[round(x) for x in med('inkcache','tcp','throughput')[1]]}, "
      f"plain udp {[round(x) for x in med('plain','udp','throughput')[1]]}, inkcache udp {[round(x) for x in med('inkcache','udp','throughput')[1]]}")
print(f"kernel counters of the last round: invalidations={st['invalidations']} inval_unparsable={st['inval_unparsable']} errors={st['errors']}")
PY
