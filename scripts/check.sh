#!/usr/bin/env bash
# make check-consistency: the consistency checker against stock memcached with inkcache attached,
# in network namespaces. Usage: scripts/check.sh [SECONDS] [extra inkcheck args...]
# INKCACHE_ATTACH_ARGS adds arguments to `inkcache attach` (e.g. --debug-no-invalidation).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN=${BIN:-target/release}
SECS=${1:-60}; shift || true
ID=$$
SRV=inkchk-s$ID CLI=inkchk-c$ID SIF=ics$ID CIF=icc$ID
MCPID=""
cleanup() {
    set +e
    [ -n "$MCPID" ] && kill "$MCPID" 2>/dev/null && wait "$MCPID" 2>/dev/null
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null 2>&1
    netns_del "$SRV" "$CLI"
}
trap cleanup EXIT
netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
"$BIN/inkcache" --netns "$CLI" veth-peer --iface "$CIF"
ip netns exec "$SRV" memcached -u root -p 11211 -U 11211 -t 2 -m 64 &
MCPID=$!
sleep 0.5
# shellcheck disable=SC2086
"$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" ${INKCACHE_ATTACH_ARGS:-}
set +e
ip netns exec "$CLI" "$BIN/inkcheck" --server 198.18.0.1:11211 --seconds "$SECS" "$@"
rc=$?
echo "inkcache stats: $("$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json)"
exit $rc
