# Shared by the scripts in this directory (source it): the two-namespace topology they all use.

# netns_pair SRV_NS CLI_NS SRV_IF CLI_IF: server and client namespaces joined by a veth pair,
# 198.18.0.1/24 on the server end and 198.18.0.2/24 on the client end, everything up.
netns_pair() {
    ip netns add "$1"
    ip netns add "$2"
    ip link add "$3" netns "$1" type veth peer name "$4" netns "$2"
    ip -n "$1" addr add 198.18.0.1/24 dev "$3"
    ip -n "$2" addr add 198.18.0.2/24 dev "$4"
    for ns in "$1" "$2"; do ip -n "$ns" link set lo up; done
    ip -n "$1" link set "$3" up
    ip -n "$2" link set "$4" up
}

# netns_del NS...: deletes the namespaces (and with them their veth ends), ignoring errors.
netns_del() {
    for ns in "$@"; do ip netns del "$ns" 2>/dev/null || true; done
    return 0
}

# pin_napi IF CPU: pins the threaded-NAPI kthreads of IF (napi/IF-N) to CPU; fails if none.
pin_napi() {
    local n=0 pid
    for pid in $(pgrep "^napi/$1-"); do taskset -pc "$2" "$pid" >/dev/null; n=$((n + 1)); done
    [ "$n" -gt 0 ] || { echo "no napi/$1-N thread (is threaded NAPI on?)" >&2; return 1; }
}

# bench_lock: one timed measurement at a time on this machine. They read machine-wide counters
# (bpf_stats, /proc/stat) and time work on one pinned CPU, so two at once would make each
# other's numbers wrong, and the first to finish would turn bpf_stats off under the other. The
# second one fails at once instead (the lock is released when the script exits). `inklab paper`
# and `inklab pagewalk` take the same lock and wait for it (crates/inklab/src/lock.rs).
if [ -z "${BENCH_LOCK:-}" ]; then
    BENCH_LOCK=/run/lock/inkcache-bench.lock
    [ -d /run/lock ] || BENCH_LOCK=/tmp/inkcache-bench.lock
fi
bench_lock() {
    # fd 9 holds it; long-lived children start with 9>&-, so one left behind does not keep it
    exec 9> "$BENCH_LOCK"
    flock -n 9 || {
        echo "$(basename "$0"): another timed measurement holds $BENCH_LOCK; wait for it" >&2
        exit 1
    }
}

# bpf_stats_hold: the kernel's BPF run-time statistics on until this script ends, held by
# scripts/bpf-stats-hold.py (an fd from BPF_ENABLE_STATS; the kernel turns them off when the holder
# exits, which it does when this script does, however it ends). Not kernel.bpf_stats_enabled: a
# run that saves and restores the sysctl around another's can leave it on for every program on
# the host (docs/results/hitcost.md, twenty-third run). Sets STATS_HOLDER (its pid).
bpf_stats_hold() {
    local ready
    ready=$(mktemp)
    python3 "$(dirname "${BASH_SOURCE[0]}")/bpf-stats-hold.py" > "$ready" 9>&- &
    STATS_HOLDER=$!
    for _ in $(seq 100); do
        [ -s "$ready" ] || ! kill -0 "$STATS_HOLDER" 2> /dev/null && break
        sleep 0.05
    done
    grep -q ready "$ready" || {
        rm -f "$ready"
        echo "$(basename "$0"): could not turn on the BPF run-time statistics" >&2
        exit 1
    }
    rm -f "$ready"
}

bpf_stats_release() {
    [ -z "${STATS_HOLDER:-}" ] || kill "$STATS_HOLDER" 2> /dev/null || true
}

# pinned_memcached TAG MB: the benchmark topology of shared/GUIDE.md section 2, after taking
# bench_lock. Sets SRV, CLI, SIF, CIF (named from TAG and the script's pid), OUT (a scratch
# directory) and MCPID: server and client namespaces, a pass-through XDP program on the client
# end, stock memcached -t 1 with MB megabytes on CPU1 in the server namespace. On exit it stops
# memcached, detaches inkcache from SIF, removes the namespaces and OUT, after running
# `cleanup_extra` if the script defines one.
pinned_memcached() {
    local id=$$
    bench_lock
    SRV=ink$1-s$id CLI=ink$1-c$id SIF=i$1s$id CIF=i$1c$id
    MCPID=""
    OUT=$(mktemp -d)
    trap pinned_memcached_cleanup EXIT
    netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
    "$BIN/inkcache" --netns "$CLI" veth-peer --iface "$CIF"
    ip netns exec "$SRV" taskset -c 1 memcached -u root -p 11211 -U 11211 -t 1 -m "$2" 9>&- &
    MCPID=$!
    sleep 0.5
}

pinned_memcached_cleanup() {
    set +e
    declare -F cleanup_extra >/dev/null && cleanup_extra
    bpf_stats_release
    [ -n "$MCPID" ] && kill "$MCPID" 2>/dev/null && wait "$MCPID" 2>/dev/null
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null 2>&1
    netns_del "$SRV" "$CLI"
    rm -rf "$OUT"
}

# napi_thread NS IF CPU: threaded NAPI on IF (in NS), its kthreads pinned to CPU.
napi_thread() {
    ip netns exec "$1" sh -c "echo 1 > /sys/class/net/$2/threaded"
    sleep 0.2
    pin_napi "$2" "$3"
}

# threaded_napi: threaded NAPI on the server veth (SIF in SRV), its kthreads pinned to CPU1 with
# the server (what makes CPU1's busy time the server's cost).
threaded_napi() { napi_thread "$SRV" "$SIF" 1; }

# client_napi: threaded NAPI on the client veth (CIF in CLI), its kthreads pinned to CPU0 with the
# client: its receive path (the replies' skbs, UDP, the socket) then runs on the client's CPU, as
# on a client machine, and not on CPU1 between the server's packets. inklab's topology does this.
client_napi() { napi_thread "$CLI" "$CIF" 0; }
