#!/usr/bin/env bash
# Benchmarks of issue 14 in one run (docs/results/bypass/): the server's CPU cost per request
# (CPU1 busy time / requests the server executed) in the topology of GUIDE section 2 (client and
# its veth's NAPI thread on CPU0; server, its veth's threaded NAPI on CPU1).
#
#   miss-*   inkcached alone (0% kernel hits), UDP gets of preloaded keys: sockets vs AF_XDP,
#            one worker, and two workers with and without key steering
#   mixed-*  UDP gets, zipf 0.99 over 100K keys, with inkcache in front (kernel hits and misses):
#            transparent vs cooperative, sockets vs AF_XDP
#   set-*    TCP sets: inkcached alone, behind transparent inkcache, behind cooperative inkcache
#
# Usage: scripts/bench-bypass.sh [OUT.jsonl]   Env: REPS (1), DURATION (5s), KEYS (100000),
#   CONFIGS (all), BIN (target/release). Must run as root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

OUT=${1:-/tmp/bench-bypass.jsonl}
REPS=${REPS:-1}
DURATION=${DURATION:-5s}
KEYS=${KEYS:-100000}
BIN=${BIN:-target/release}
CONFIGS=${CONFIGS:-"miss-sock-t1 miss-afxdp-t1 miss-sock-t2 miss-sock-steer-t2 miss-afxdp-t2 \
    miss-afxdp-steer-t2 mixed-transparent-sock mixed-coop-sock mixed-coop-afxdp \
    set-alone set-transparent set-coop"}
SRV=198.18.0.1
ID=$$
NS_S=bypb-s$ID NS_C=bypb-c$ID IF_S=bypbs$ID IF_C=bypbc$ID
PID=""

cleanup() {
    set +e
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    PID=""
    "$BIN/inkcache" --netns "$NS_S" detach --iface "$IF_S" >/dev/null 2>&1
    netns_del "$NS_S" "$NS_C"
}
trap cleanup EXIT

cpu1_busy() { awk '$1=="cpu1"{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
HZ=$(getconf CLK_TCK)

# topo SERVER_XDP: fresh namespaces; SERVER_XDP is pass (an XDP_PASS program), inkcache,
# inkcache-coop, or own (inkcached attaches its own: threaded NAPI is set up after it starts)
topo() {
    cleanup
    netns_pair "$NS_S" "$NS_C" "$IF_S" "$IF_C"
    "$BIN/inkcache" --netns "$NS_C" veth-peer --iface "$IF_C"
    case $1 in
        pass) "$BIN/inkcache" --netns "$NS_S" veth-peer --iface "$IF_S" ;;
        inkcache) "$BIN/inkcache" --netns "$NS_S" attach --iface "$IF_S" >/dev/null ;;
        inkcache-coop) "$BIN/inkcache" --netns "$NS_S" attach --iface "$IF_S" --cooperative >/dev/null ;;
        own) ;;
    esac
    ip netns exec "$NS_C" sh -c "echo 1 > /sys/class/net/$IF_C/threaded"
    [ "$1" = own ] || napi_server
    sleep 0.3
    pin_napi "$IF_C" 0
}
napi_server() {
    ip netns exec "$NS_S" sh -c "echo 1 > /sys/class/net/$IF_S/threaded"
    sleep 0.3
    pin_napi "$IF_S" 1
}

start() { # inkcached args...
    taskset -c 1 nsenter --net=/run/netns/"$NS_S" "$BIN/inkcached" -l $SRV -p 11211 -U 11211 \
        -m 1024 -c 4096 "$@" &
    PID=$!
    for _ in $(seq 50); do
        ip netns exec "$NS_C" bash -c "exec 3<>/dev/tcp/$SRV/11211" 2>/dev/null && return
        sleep 0.1
    done
    echo "bench-bypass: inkcached did not start" >&2
    exit 1
}

bench() {
    ip netns exec "$NS_C" taskset -c 0 "$BIN/inkbench" run --server $SRV:11211 --keys "$KEYS" \
        --key-size 16 --value-size 100 --json "$@"
}

run() { # config
    local c=$1 wl
    case $c in
        miss-sock-t1) topo pass; start -t 1 ;;
        miss-afxdp-t1) topo own; start -t 1 --afxdp "$IF_S"; napi_server ;;
        miss-sock-t2) topo pass; start -t 2 ;;
        miss-sock-steer-t2) topo pass; start -t 2 --steer ;;
        miss-afxdp-t2) topo own; start -t 2 --afxdp "$IF_S"; napi_server ;;
        miss-afxdp-steer-t2) topo own; start -t 2 --afxdp "$IF_S" --steer; napi_server ;;
        mixed-transparent-sock) topo inkcache; start -t 1 ;;
        mixed-coop-sock) topo inkcache-coop; start -t 1 --cooperative "$IF_S" ;;
        mixed-coop-afxdp) topo inkcache-coop; start -t 1 --cooperative "$IF_S" --afxdp "$IF_S" ;;
        set-alone) topo pass; start -t 1 ;;
        set-transparent) topo inkcache; start -t 1 ;;
        set-coop) topo inkcache-coop; start -t 1 --cooperative "$IF_S" ;;
    esac
    bench --proto tcp --preload --duration 200ms --warmup 0 --no-server-stats >/dev/null
    case $c in
        miss-*) wl="--proto udp --get-ratio 1 --connections 8 --inflight 64 --popularity uniform" ;;
        mixed-*) wl="--proto udp --get-ratio 1 --connections 8 --inflight 64 --popularity zipf:0.99" ;;
        set-*) wl="--proto tcp --get-ratio 0 --connections 8 --pipeline 16 --popularity zipf:0.99" ;;
    esac
    local b0 b1 res
    # shellcheck disable=SC2086
    bench $wl --duration 1s --warmup 0 --no-server-stats >/dev/null # warm-up, not measured
    b0=$(cpu1_busy)
    # shellcheck disable=SC2086
    res=$(bench $wl --duration "$DURATION" --warmup 0)
    b1=$(cpu1_busy)
    local ks
    ks=$("$BIN/inkcache" --netns "$NS_S" stats --iface "$IF_S" --json 2>/dev/null || echo '{}')
    python3 - "$c" "$b0" "$b1" "$HZ" "$res" "$ks" >>"$OUT" <<'PY'
import json, sys
c, b0, b1, hz, res, ks = sys.argv[1:]
r = json.loads(res)
srv = r.get("server") or {}
ks = json.loads(ks)
reqs = r["responses"]
busy = (int(b1) - int(b0)) / int(hz)
print(json.dumps({
    "config": c, "throughput": r["throughput"], "responses": reqs, "lost": r["lost"],
    "errors": r["errors"], "p50_us": r["latency"]["p50_us"], "p99_us": r["latency"]["p99_us"],
    "server_gets": srv.get("cmd_get"), "server_sets": srv.get("cmd_set"),
    "kernel_hits": ks.get("hits"), "cpu1_busy_s": busy,
    "cpu1_ns_per_req": busy * 1e9 / reqs if reqs else None,
}))
PY
    tail -n1 "$OUT" >&2
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

for _ in $(seq "$REPS"); do
    for c in $CONFIGS; do run "$c"; done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["config"], []).append(r)
print("| config | req/s | CPU1 ns/req | req/s per CPU1 core | kernel hits | lost |")
print("| --- | --- | --- | --- | --- | --- |")
for c, rs in by.items():
    t = statistics.median(r["throughput"] for r in rs)
    ns = statistics.median(r["cpu1_ns_per_req"] for r in rs)
    kh = rs[-1]["kernel_hits"]
    print(f"| {c} | {t:,.0f} | {ns:,.0f} | {1e9/ns:,.0f} | {kh if kh is not None else '-'} | {sum(r['lost'] for r in rs)} |")
PY
