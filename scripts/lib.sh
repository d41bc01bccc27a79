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
