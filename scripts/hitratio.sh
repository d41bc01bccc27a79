#!/usr/bin/env bash
# The kernel table's hit ratio measured with real traffic, next to the model's prediction for the
# same keys, values and budgets (`inkmodel hitratio`).
#
# Usage: scripts/hitratio.sh MIX KEYS MIB [MIB...]
#   e.g. scripts/hitratio.sh fixed:32 1664406 1 10
# Stock memcached (UDP) in a server namespace gets every key over TCP (value sizes of MIX, as the
# model draws them); then, per MIB: `inkcache attach --cache-mb MIB --item-bytes B` (B: the mix's
# mean item, the split the model uses), WARM_S seconds of UDP gets (Zipf 0.99 over the keys) from
# the client namespace, `inkcache stats` before and after MEASURE_S more seconds, detach.
# Kernel hit ratio = hits / (hits + misses + too_big) over the measured window.
# Env: BIN (target/release), WARM_S (40), MEASURE_S (30), SEED (1, the values' seed), OUT (a temp
# dir: the raw JSON of every step), MC_MB (memcached -m, 4096).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || { sed -n '5,6p' "$0" >&2; exit 2; }
MIX=$1 KEYS=$2; shift 2
MIBS=("$@")
BIN=${BIN:-target/release}
WARM_S=${WARM_S:-40} MEASURE_S=${MEASURE_S:-30} SEED=${SEED:-1} MC_MB=${MC_MB:-4096}
OUT=${OUT:-$(mktemp -d /tmp/inkhr.XXXXXX)}
mkdir -p "$OUT"
ID=$$
SRV=inkhr-s$ID CLI=inkhr-c$ID SIF=ihs$ID CIF=ihc$ID
ADDR=198.18.0.1:11211
MCPID=""
cleanup() {
    set +e
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >/dev/null 2>&1
    [ -n "$MCPID" ] && kill "$MCPID" 2>/dev/null && wait "$MCPID" 2>/dev/null
    netns_del "$SRV" "$CLI"
}
trap cleanup EXIT

# the split the model uses: the mix's mean item (the model reports it)
IB=$("$BIN/inkmodel" hitratio --keys "$KEYS" --mix "$MIX" --seed "$SEED" --warmup 0 \
    --requests 1 --budget-pct 100 --json | jq '.mixes[0].split_item_bytes')

netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
"$BIN/inkcache" --netns "$CLI" veth-peer --iface "$CIF"
ip netns exec "$SRV" memcached -u root -p 11211 -U 11211 -t 1 -m "$MC_MB" &
MCPID=$!
for _ in $(seq 50); do
    ip netns exec "$CLI" bash -c "exec 3<>/dev/tcp/198.18.0.1/11211" 2>/dev/null && break
    sleep 0.1
done
echo "preloading $KEYS keys ($MIX, seed $SEED) ..." >&2
ip netns exec "$CLI" "$BIN/inkmodel" hitratio --preload "$ADDR" --mix "$MIX" --keys "$KEYS" \
    --seed "$SEED" | tee "$OUT/preload.txt" >&2

run_gets() { # SECONDS SEED -> inkbench run JSON
    ip netns exec "$CLI" "$BIN/inkbench" run --server "$ADDR" --get-ratio 1 --keys "$KEYS" \
        --popularity zipf:0.99 --duration "${1}s" --warmup 0 --seed "$2" --json
}
stats() { "$BIN/inkcache" --netns "$SRV" stats --iface "$SIF" --json; }

printf 'measured window per budget:\n' >&2
KERNEL=()
for MIB in "${MIBS[@]}"; do
    "$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" --cache-mb "$MIB" --item-bytes "$IB" \
        --max-age 86400 >"$OUT/attach-$MIB.txt"
    run_gets "$WARM_S" 2 >"$OUT/warm-$MIB.json"
    stats >"$OUT/before-$MIB.json"
    run_gets "$MEASURE_S" 3 >"$OUT/run-$MIB.json"
    stats >"$OUT/after-$MIB.json"
    "$BIN/inkcache" status --json | jq --arg i "$SIF" '[.[] | select(.iface == $i)]' \
        >"$OUT/status-$MIB.json" || true
    "$BIN/inkcache" --netns "$SRV" detach --iface "$SIF" >&2
    # kernel counters over the window; the client's view (server gets / client gets) beside
    jq -n --arg mib "$MIB" --slurpfile b "$OUT/before-$MIB.json" \
        --slurpfile a "$OUT/after-$MIB.json" --slurpfile r "$OUT/run-$MIB.json" \
        --slurpfile w "$OUT/warm-$MIB.json" --slurpfile st "$OUT/status-$MIB.json" '
        def d(f): ($a[0][f] - $b[0][f]);
        {mib: ($mib | tonumber), hits: d("hits"), misses: d("misses"), too_big: d("too_big"),
         fills: d("fills"), fill_skipped: d("fill_skipped"), promoted: d("promoted"),
         expired: d("expired"), invalidations: d("invalidations"),
         warm_gets: $w[0].gets, gets: $r[0].gets, lost: $r[0].lost, throughput: $r[0].throughput,
         server_gets: ($r[0].server.cmd_get // null),
         resident_items: ($st[0][0].items // null)}
        | .hit_ratio = .hits / (.hits + .misses + .too_big)
        | .client_hit_ratio = (if .server_gets then 1 - .server_gets / .gets else null end)' \
        >"$OUT/kernel-$MIB.json"
    jq -c . "$OUT/kernel-$MIB.json" >&2
done

BUDGETS=()
for MIB in "${MIBS[@]}"; do BUDGETS+=(--budget-mib "$MIB"); done
"$BIN/inkmodel" hitratio --keys "$KEYS" --mix "$MIX" --seed "$SEED" --item-bytes "$IB" \
    "${BUDGETS[@]}" --json >"$OUT/model.json"

printf '| mix | keys | budget | kernel: hits / (hits + misses + too_big) | kernel: 1 - server gets / client gets | model | kernel resident items | model resident items | promoted per get, kernel / model |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for i in "${!MIBS[@]}"; do
    MIB=${MIBS[$i]}
    jq -n -r --arg mix "$MIX" --arg keys "$KEYS" --argjson i "$i" \
        --slurpfile k "$OUT/kernel-$MIB.json" --slurpfile m "$OUT/model.json" '
        def p(x): if x == null then "-"
            else (x * 10000 | round) as $v
                | "\($v / 100 | floor).\($v % 100 | tostring | if length < 2 then "0" + . else . end)%"
            end;
        $k[0] as $k | $m[0].rows[$i] as $m |
        "| \($mix) | \($keys) | \($k.mib) MiB | \(p($k.hit_ratio)) | \(p($k.client_hit_ratio)) | " +
        "\(p($m.kernel.hit_ratio)) | \($k.resident_items // "-") | " +
        "\($m.kernel_detail.resident_items) | " +
        "\(p($k.promoted / ($k.hits + $k.misses + $k.too_big))) / " +
        "\(p($m.kernel_detail.promoted_per_request)) |"'
done
echo "split for --item-bytes $IB; raw results in $OUT" >&2
