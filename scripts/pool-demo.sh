#!/usr/bin/env bash
# make pool-demo: a pool of three stock memcached servers, each in its own network namespace with
# inkcache attached, and a client namespace whose clients shard keys by consistent hashing
# (pylibmc's libmemcached ketama, pymemcache's rendezvous hashing), writing over TCP and reading
# with UDP gets. Shows the placement, the kernel answering the second round of gets, status and
# metrics of all three from one command each, and that killing one server loses only its keys.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN=${BIN:-target/release}
P=${POOL_PREFIX:-inkpool}$$
CLI=$P-c
IFP=${POOL_IFPREFIX:-ip}$$
KEYS=${POOL_KEYS:-300}
PORT=11211
PIDS=()

cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    for i in 1 2 3; do
        "$BIN/inkcache" --netns "$P-s$i" detach --iface "${IFP}s$i" >/dev/null 2>&1
    done
    netns_del "$P-s1" "$P-s2" "$P-s3" "$CLI"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "pool-demo: must run as root (namespaces, XDP)" >&2; exit 1; }

ip netns add "$CLI"
ip -n "$CLI" link set lo up
SERVERS=""
for i in 1 2 3; do
    ns=$P-s$i sif=${IFP}s$i cif=${IFP}c$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$sif" netns "$ns" type veth peer name "$cif" netns "$CLI"
    ip -n "$ns" addr add "198.18.1$i.1/24" dev "$sif"
    ip -n "$CLI" addr add "198.18.1$i.2/24" dev "$cif"
    ip -n "$ns" link set "$sif" up
    ip -n "$CLI" link set "$cif" up
    # XDP_TX on a veth reaches the peer only if the peer has an XDP program too
    "$BIN/inkcache" --netns "$CLI" veth-peer --iface "$cif"
    SERVERS="$SERVERS${SERVERS:+,}198.18.1$i.1:$PORT"
done
for i in 1 2 3; do
    echo "== server $i: inkcache attached to ${IFP}s$i in $P-s$i, memcached on 198.18.1$i.1"
    ip netns exec "$P-s$i" "$BIN/inkcache" attach --iface "${IFP}s$i" --cache-mb 16 |
        sed 's/^/   /'
    # memcached started after attach: inkcache notices when a server it saw bind goes away (a
    # server already running at attach is not noticed yet when it dies)
    ip netns exec "$P-s$i" memcached -u root -p $PORT -U $PORT -t 2 -m 64 &
    PIDS+=($!)
done
sleep 0.5

client() { ip netns exec "$CLI" /usr/bin/python3 "$(dirname "$0")/pool_client.py" "$SERVERS" "$@" --keys "$KEYS"; }
echo "== $KEYS keys per client written over TCP (pylibmc ketama, pymemcache rendezvous)"
client write >/dev/null
# pymemcache writes with noreply: nothing answers them, so their keys fill only after the write
# quarantine (--quarantine-ms, 1 s)
sleep 1
echo "== where the keys are (each client's choice checked against every server's content)"
client place --text
echo "== UDP gets, first round (memcached answers; its replies fill the kernel caches)"
client udp --text
echo "== UDP gets, second round (the kernel answers)"
client udp --text
echo "== inkcache status --all-netns (one command, all three)"
"$BIN/inkcache" status --all-netns | grep -E '^[^ ]|netns|holds' | sed 's/^/   /'
echo "== inkcache metrics --all-netns --server ... (one command, all three)"
"$BIN/inkcache" metrics --all-netns \
    --server "198.18.11.1:$PORT@$P-s1" --server "198.18.12.1:$PORT@$P-s2" \
    --server "198.18.13.1:$PORT@$P-s3" |
    grep -E '^(inkcache_hits_total|inkcache_misses_total|inkcache_current_items|memcached_up|memcached_current_items)' |
    sed 's/^/   /'
echo "== killing server 2 (memcached in $P-s2)"
kill "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
sleep 0.2
echo "== UDP gets after the kill: only server 2's keys are lost"
client udp --text
echo "== TCP gets through the clients after the kill"
client tcp --text
