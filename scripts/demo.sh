#!/usr/bin/env bash
# make demo: stock memcached in a network namespace, a client namespace joined by a veth pair,
# a short UDP get load without and with inkcache attached, and a table of what happened.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN=${BIN:-target/release}
ID=$$
SRV=inkdemo-s$ID CLI=inkdemo-c$ID
SIF=ids$ID CIF=idc$ID
PORT=11211
SECS=${DEMO_SECONDS:-5}
MCPID=""
OUT=$(mktemp -d "${TMPDIR:-/tmp}/inkdemo.XXXXXX")

cleanup() {
    set +e
    [ -n "$MCPID" ] && kill "$MCPID" 2>/dev/null && wait "$MCPID" 2>/dev/null
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null 2>&1
    netns_del "$SRV" "$CLI"
    rm -rf "$OUT"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "demo: must run as root (namespaces, XDP)" >&2; exit 1; }

echo "== namespaces $SRV (server, 198.18.0.1) and $CLI (client, 198.18.0.2)"
netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
# XDP_TX on a veth reaches the peer only if the peer has an XDP program too
"$BIN/inkcache" --netns "$CLI" veth-peer --iface "$CIF"

echo "== stock memcached $(memcached -V | cut -d' ' -f2) with UDP on port $PORT"
ip netns exec "$SRV" memcached -u root -l 198.18.0.1 -p $PORT -U $PORT -t 2 -m 64 &
MCPID=$!
for _ in $(seq 50); do
    ip netns exec "$CLI" bash -c "exec 3<>/dev/tcp/198.18.0.1/$PORT" 2>/dev/null && break
    sleep 0.1
done

load() { # $1 = label
    ip netns exec "$CLI" "$BIN/inkbench" run --server 198.18.0.1:$PORT --proto udp \
        --keys 10000 --key-size 16 --value-size 32 --popularity zipf:0.99 --get-ratio 1.0 \
        --inflight 32 --duration "${SECS}s" --warmup 1s $2 --json > "$OUT/$1.json"
}

echo "== filling 10000 keys and running ${SECS}s of UDP gets without inkcache"
load plain --preload
echo "== attaching inkcache to $SIF"
"$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" --port $PORT
echo "== running ${SECS}s of UDP gets with inkcache"
load inkcache ""
"$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json > "$OUT/stats.json"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
r = {k: json.load(open(f"{out}/{k}.json")) for k in ("plain", "inkcache")}
st = json.load(open(f"{out}/stats.json"))
print()
print(f"{'run':<22}{'requests/s':>12}{'p99 us':>10}{'kernel hits':>13}{'memcached get_hits':>20}")
for k, label in (("plain", "memcached"), ("inkcache", "memcached + inkcache")):
    x = r[k]
    mc = (x.get("server") or {}).get("get_hits", 0)
    kh = st["hits"] if k == "inkcache" else 0
    print(f"{label:<22}{x['throughput']:>12,.0f}{x['latency']['p99_us']:>10.1f}{kh:>13,}{mc:>20,}")
print()
print("kernel counters:", ", ".join(f"{k}={v}" for k, v in st.items()))
PY
