#!/usr/bin/env bash
# Live eBPF cost of kernel hits (issue 11): inkcache_xdp's run time per packet under bpf_stats,
# for gets of 1 and of MULTIGET keys (default 10) drawn Zipf 0.99 from KEYS (default 100,000) keys of 32 bytes
# with VALUE_SIZE-byte values (default 32), every key stored and in the kernel cache (hit ratio 1.0). Each inkcache
# CLI given is attached in turn, ROUNDS times, in the pinned topology of shared/GUIDE.md section 2
# (client on CPU0; memcached -t 1 and the server veth's threaded NAPI on CPU1), so two builds are
# compared in one run on one machine. The client veth's NAPI is not threaded: the client's receive
# path runs on CPU1 in softirq after the server's NAPI sends; CLIENT_NAPI=1 threads it and pins it
# to CPU0, as inklab does (both measured in docs/results/hitcost.md, eighth run). PROGS (default
# inkcache_xdp) lists the programs whose run time is counted per XDP run: add
# inkcache_tc_ingress where the replies go through TC ingress (large values on veth). XDP_PROGS
# (default inkcache_xdp) names the XDP entry programs whose runs are counted: another kernel
# cache whose CLI takes the same `attach`, `stats --json` and `detach` arguments can be measured
# alongside (docs/results/hitcost.md, eleventh run: the original BMC). BUSY=1
# keeps CPU1 from idling between packets (a SCHED_IDLE busy loop there, which the NAPI thread
# preempts at once), as a loaded server core does not idle: where idling evicts the caches (a
# VM's halt, deep C-states), a hit costs less so (docs/results/hitcost.md, ninth run). BUSY=yield
# does it with a loop of sched_yield, as `inklab paper --server-awake` does (seventeenth run).
# STAGES (e.g. "2 3 5 6 0") measures each inkcache CLI once per stage a round, attached with
# `--debug-stop-stage N` (bpf/inkcache_xdp.bpf.c: XDP passes every get after stage N, and
# memcached answers it; 0: the whole hit): the hit's stages live (docs/results/hitcost.md,
# fortieth run). Only for CLIs that take that option. Usage:
#   scripts/hit-cost-live.sh [INKCACHE_CLI...]      (default: $BIN/inkcache)
# Prints one line per measurement: ns per run, and each key after the first of a multi-key get
# ((cost of the N-key get - cost of the 1-key get) / (N - 1)), then the hits, misses, slot hits and
# promotions counted during the 1-key gets (inkcache stats; the share of hits a slot served, or
# "no hits" where XDP sent none: under `attach --debug-stop-stage 6` the lookups count slot hits
# and XDP passes every get).
# Root; about 50 s per CLI (and stage) and round.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-target/release}
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-8}
MULTIGET=${MULTIGET:-10}
CACHE_MB=${CACHE_MB:-256}
KEYS=${KEYS:-100000}
VALUE_SIZE=${VALUE_SIZE:-32}
[ $# -gt 0 ] || set -- "$BIN/inkcache"
pinned_memcached hc 1024
SPIN=
cleanup_extra() {
    [ -z "$SPIN" ] || kill "$SPIN" 2> /dev/null || true
}
if [ "${BUSY:-0}" = yield ]; then
    taskset -c 1 chrt -i 0 python3 -c 'import os
while True: os.sched_yield()' 9>&- &
    SPIN=$!
elif [ "${BUSY:-0}" != 0 ]; then
    taskset -c 1 chrt -i 0 bash -c 'while :; do :; done' 9>&- &
    SPIN=$!
fi

XDP_PROGS=${XDP_PROGS:-inkcache_xdp}
prog_stats() { # "run_time_ns run_cnt": the run time of PROGS, the runs of XDP_PROGS, of this
    # attachment's programs only, not another's of the same names: those attached to SIF (that
    # bpftool lists: XDP, clsact) and those sharing their maps (tcx links, which it does not)
    local ids
    ids=$(ip netns exec "$SRV" bpftool -j net show dev "$SIF" | python3 -c 'import json, sys
ids = set()
for top in json.load(sys.stdin):
    for kind in ("xdp", "tc", "tcx"):
        for o in top.get(kind) or []:
            ids.update(o[k] for k in ("id", "prog_id") if k in o)
print(*sorted(ids))')
    bpftool prog show -j | python3 -c 'import json, sys
progs, attached = json.load(sys.stdin), set(map(int, sys.argv[3].split()))
maps = {m for p in progs if p["id"] in attached for m in p.get("map_ids", [])}
progs = [p for p in progs if p["id"] in attached or maps & set(p.get("map_ids", []))]
names, entries = sys.argv[1].split(), sys.argv[2].split()
t = sum(p.get("run_time_ns", 0) for p in progs if p.get("name") in names)
n = sum(p.get("run_cnt", 0) for p in progs if p.get("name") in entries)
print(t, n)' "${PROGS:-$XDP_PROGS}" "$XDP_PROGS" "$ids"
}
counters() { # "hits misses slot_hits promoted" of the attachment, as CLI $1 reports them
    "$1" --netns "$SRV" stats --iface "$SIF" --json | python3 -c 'import json, sys
s = json.load(sys.stdin)
print(*(s.get(k, 0) for k in ("hits", "misses", "slot_hits", "promoted")))'
}
gets() { # label keys-per-get popularity seconds: prints "ns_per_run hit_ratio"
    local a b
    a=$(prog_stats)
    ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" run --server 198.18.0.1:11211 --proto udp \
        --get-ratio 1 --multiget "$2" --keys $KEYS --key-size 32 --value-size $VALUE_SIZE \
        --popularity "$3" --duration "$4s" --warmup 0s --inflight 32 --no-server-stats \
        --json > "$OUT/$1.json"
    b=$(prog_stats)
    python3 - "$a" "$b" "$OUT/$1.json" <<'PY'
import json, sys
(t0, n0), (t1, n1) = (map(int, a.split()) for a in sys.argv[1:3])
print(f"{(t1 - t0) / max(n1 - n0, 1):.0f} {json.load(open(sys.argv[3]))['hit_ratio']:.4f}")
PY
}
learn() { # every key into the kernel cache of CLI $1: a 10-second pass of uniform gets, then
    # 3-second ones while a pass still misses (gets draw keys at random: a slow pass may leave
    # some unseen), at most 5 in all; nothing counts between passes, so one read a pass. Prints
    # the counters as the last pass left them (where the measurement starts).
    local c0 c1 secs=10
    c0=$(counters "$1")
    for _ in 1 2 3 4 5; do
        gets learn 1 uniform "$secs" > /dev/null
        c1=$(counters "$1")
        if [ "$(cut -d' ' -f2 <<< "$c1")" = "$(cut -d' ' -f2 <<< "$c0")" ]; then
            echo "$c1"
            return 0
        fi
        c0=$c1 secs=3
    done
    echo "$1: keys still missing after the learning passes" >&2
    echo "$c1"
}

ip netns exec "$CLI" "$BIN/inkbench" run --server 198.18.0.1:11211 --proto tcp --get-ratio 0 \
    --keys $KEYS --key-size 32 --value-size $VALUE_SIZE --duration 1s --preload --no-server-stats \
    --json > /dev/null
bpf_stats_hold
for round in $(seq "$ROUNDS"); do
    for ink in "$@"; do for stage in ${STAGES:-none}; do
        label=$ink stage_opt=()
        if [ "$stage" != none ]; then
            stage_opt=(--debug-stop-stage "$stage")
            label="$ink stage $stage"
        fi
        "$ink" --netns "$SRV" attach "${stage_opt[@]}" --iface "$SIF" --port 11211 \
            --cache-mb "$CACHE_MB" > /dev/null
        threaded_napi
        [ "${CLIENT_NAPI:-0}" = 0 ] || client_napi
        s0=$(learn "$ink")
        read -r one hr1 < <(gets one 1 zipf:0.99 "$SECS")
        s1=$(counters "$ink")
        read -r many hrn < <(gets many "$MULTIGET" zipf:0.99 "$SECS")
        echo "$label round $round: 1-key get $one ns (hit ratio $hr1)," \
            "$MULTIGET-key get $many ns (hit ratio $hrn)," \
            "each key after the first $(((many - one) / (MULTIGET - 1))) ns;" \
            "1-key gets: $(python3 -c 'import sys
(h0, m0, s0, p0), (h1, m1, s1, p1) = (map(int, a.split()) for a in sys.argv[1:3])
share = f"{(s1 - s0) / (h1 - h0):.1%}" if h1 > h0 else "no hits"
print(f"hits {h1 - h0}, misses {m1 - m0}, slot_hits {s1 - s0} ({share}),", f"promoted {p1 - p0}")' \
            "$s0" "$s1")"
        "$ink" --netns "$SRV" detach --iface "$SIF" > /dev/null
    done; done
done
