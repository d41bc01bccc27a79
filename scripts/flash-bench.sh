#!/usr/bin/env bash
# The flash tier benchmark (docs/results/flash): in one run, on the same RAM and storage file
# size, over TCP (memcached refuses UDP with extstore):
#   inkcached with its flash tier (-o ext_path=FILE:SIZE),
#   inkcached with the same RAM and no flash,
#   stock memcached with its extstore (-o ext_path=FILE:SIZE).
# Each server runs alone on CPU1 in a server namespace, inside a memory cgroup of the same size
# (so memcached's buffered storage file cannot use the page cache as free extra RAM); the client
# (inkbench) runs on CPU0 in a client namespace. For each popularity (Zipf 0.99, uniform) a
# fresh server is preloaded with every key (values 1-16 KB) and then loaded (closed loop, 90%
# gets); after the Zipf run, the paced sampler (one TCP get per ms) records a latency timeline
# while the same load runs.
#
# usage: BIN=target/release scripts/flash-bench.sh [OUTDIR]   (root; OUTDIR default
#        docs/results/flash). Knobs (env): RAM_MB (64), FILE_MB (512), KEYS (100000),
#        WARMUP (10s), DURATION (15s), SAMPLE (15s), CG_MB (RAM_MB + 96), DIR (/work: files).
set -euo pipefail
BIN=${BIN:-target/release}
OUTDIR=${1:-docs/results/flash}
RAM_MB=${RAM_MB:-64}
FILE_MB=${FILE_MB:-512}
KEYS=${KEYS:-100000}
WARMUP=${WARMUP:-10s}
DURATION=${DURATION:-15s}
SAMPLE=${SAMPLE:-15s}
CG_MB=${CG_MB:-$((RAM_MB + 96))}
DIR=${DIR:-/work}
VALUES=uniform:1024:16384
. "$(dirname "$0")/lib.sh"

id=$$
SRV=fl-s$id CLI=fl-c$id SIF=fls$id CIF=flc$id
CG=/sys/fs/cgroup/memory/fl-bench-$id
WORK=$(mktemp -d "$DIR/fl-bench.XXXXXX")
SPID=""
cleanup() {
    set +e
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    netns_del "$SRV" "$CLI"
    [ -d "$CG" ] && rmdir "$CG"
    rm -rf "$WORK"
}
trap cleanup EXIT
netns_pair "$SRV" "$CLI" "$SIF" "$CIF"
mkdir -p "$OUTDIR" "$CG"
echo $((CG_MB << 20)) > "$CG/memory.limit_in_bytes"

# start NAME: a fresh server of that kind, pinned to CPU1, in the cgroup.
start() {
    rm -f "$WORK"/store-*
    sync
    echo 3 > /proc/sys/vm/drop_caches
    case $1 in
        inkcached-flash) set -- "$BIN/inkcached" -t 1 -m "$RAM_MB" -o "ext_path=$WORK/store-ink:${FILE_MB}m" ;;
        inkcached-ram) set -- "$BIN/inkcached" -t 1 -m "$RAM_MB" ;;
        memcached-extstore) set -- /usr/bin/memcached -u root -t 1 -m "$RAM_MB" -o "ext_path=$WORK/store-mc:${FILE_MB}m" ;;
    esac
    ip netns exec "$SRV" taskset -c 1 "$@" -p 11211 -U 0 -l 198.18.0.1 &
    SPID=$!
    echo "$SPID" > "$CG/cgroup.procs"
    for _ in $(seq 50); do
        ip netns exec "$CLI" bash -c 'exec 3<>/dev/tcp/198.18.0.1/11211' 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server $1 did not start" >&2
    exit 1
}

stop() {
    kill "$SPID" && wait "$SPID" 2>/dev/null || true
    SPID=""
}

# server_stats NAME POP: the server's stats and memory at the end of a run, as JSON.
server_stats() {
    local rss
    rss=$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$SPID/status")
    ip netns exec "$CLI" bash -c 'exec 3<>/dev/tcp/198.18.0.1/11211; printf "stats\r\nquit\r\n" >&3; cat <&3' |
        tr -d '\r' | awk -v name="$1" -v pop="$2" -v rss="$rss" -v cg="$(cat "$CG/memory.max_usage_in_bytes")" '
        BEGIN { printf "{\"server\":\"%s\",\"popularity\":\"%s\",\"peak_rss\":%s,\"cgroup_peak\":%s", name, pop, rss, cg }
        $1 == "STAT" && $3 ~ /^[0-9]+$/ && ($2 ~ /extstore|^get_|^evictions$|^curr_items$|^bytes$|^cmd_/) { printf ",\"%s\":%s", $2, $3 }
        END { print "}" }'
    echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null || true
}

run() { # run POP -> inkbench JSON
    ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" run --server 198.18.0.1:11211 --proto tcp \
        --keys "$KEYS" --value-size "$VALUES" --popularity "$1" --get-ratio 0.9 \
        --connections 8 --pipeline 4 --warmup "$WARMUP" --duration "$DURATION" --timeout 2s \
        --preload --json
}

lscpu | grep 'Model name' | sed 's/  */ /g' > "$OUTDIR/machine.txt"
: > "$WORK/runs.jsonl"
: > "$WORK/servers.jsonl"
for pop in zipf:0.99 uniform; do
    for s in inkcached-flash inkcached-ram memcached-extstore; do
        echo "== $s $pop" >&2
        start "$s"
        run "$pop" | jq -c --arg s "$s" --arg p "$pop" '. + {name: $s, pop: $p}' >> "$WORK/runs.jsonl"
        server_stats "$s" "$pop" >> "$WORK/servers.jsonl"
        if [ "$pop" != uniform ]; then
            echo "== $s sampler" >&2
            ip netns exec "$CLI" taskset -c 0 "$BIN/inkbench" sample --server 198.18.0.1:11211 \
                --proto tcp --keys "$KEYS" --interval 1ms --duration "$SAMPLE" --timeout 2s \
                --out "$WORK/sample-$s" --with-load --load-proto tcp --load-connections 8 \
                --load-inflight 32 --load-value-size "$VALUES" --load-popularity "$pop" --json \
                | jq -c --arg s "$s" 'del(.samples) + {name: $s}' >> "$WORK/samples.jsonl"
            cp "$WORK/sample-$s/timeline.svg" "$OUTDIR/timeline-$s.svg"
        fi
        stop
    done
done
jq -s '{runs: .}' "$WORK/runs.jsonl" > "$OUTDIR/runs.json"
jq -s '{servers: .}' "$WORK/servers.jsonl" > "$OUTDIR/servers.json"
jq -s '{samples: .}' "$WORK/samples.jsonl" > "$OUTDIR/samples.json"

# The table: one row per server and popularity, ratios against memcached-extstore.
jq -r -s '
  def r(x): (x * 100 | round) / 100;
  (map({key: (.name + " " + .pop), value: .}) | from_entries) as $all
  | "| popularity | server | hit ratio | throughput (req/s) | vs memcached | p50 µs | p99 µs | p99.9 µs |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    (.[] | $all["memcached-extstore " + .pop] as $m
      | "| \(.pop) | \(.name) | \(r(.hit_ratio)) | \(.throughput | round) | \(r(.throughput / $m.throughput))x | \(.latency.p50_us | round) | \(.latency.p99_us | round) | \(.latency.p999_us | round) |")
' "$WORK/runs.jsonl" | tee "$OUTDIR/table.md"
