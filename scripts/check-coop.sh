#!/usr/bin/env bash
# The consistency checker against inkcached in cooperative mode (it installs and invalidates the
# kernel cache itself) behind inkcache attached with --cooperative, in network namespaces.
# Usage: scripts/check-coop.sh [SECONDS] [extra inkcheck args...]
# INKCACHED_ARGS adds arguments to inkcached (e.g. "--afxdp IFACE" is added by AFXDP=1).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN=${BIN:-target/release}
SECS=${1:-60}; shift || true
ID=$$
SRV=bypchk-s$ID CLI=bypchk-c$ID SIF=bypcs$ID CIF=bypcc$ID
PID=""
cleanup() {
    set +e
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null 2>&1
    netns_del "$SRV" "$CLI"
}
trap cleanup EXIT
netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
"$BIN/inkcache" --netns "$CLI" veth-peer --iface "$CIF"
"$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" --cooperative
EXTRA=${INKCACHED_ARGS:-}
[ "${AFXDP:-0}" = 1 ] && EXTRA="$EXTRA --afxdp $SIF"
# nsenter keeps this mount namespace: inkcached finds the attachment's pins in /sys/fs/bpf
# shellcheck disable=SC2086
nsenter --net=/run/netns/"$SRV" "$BIN/inkcached" -p 11211 -U 11211 -t 2 -m 64 \
    --cooperative "$SIF" $EXTRA &
PID=$!
for _ in $(seq 50); do
    ip netns exec "$CLI" bash -c 'exec 3<>/dev/tcp/198.18.0.1/11211' 2>/dev/null && break
    sleep 0.1
done
set +e
ip netns exec "$CLI" "$BIN/inkcheck" --server 198.18.0.1:11211 --seconds "$SECS" "$@"
rc=$?
echo "inkcache stats: $("$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json)"
printf 'stats\r\nquit\r\n' | ip netns exec "$CLI" timeout 2 bash -c \
    'exec 3<>/dev/tcp/198.18.0.1/11211; cat >&3; cat <&3' | grep -E 'coop|afxdp' | tr -d '\r'
exit $rc
