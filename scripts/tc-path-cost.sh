#!/usr/bin/env bash
# eBPF cost per request of a ~1 KB hit answered in XDP (the frame has room) and on the skb path
# (veth: no room, XDP hands it to TC ingress), from the kernel's own accounting
# (its BPF run-time statistics: run_time_ns / run_cnt of each program), plus a small XDP hit and a
# miss for reference. Requests are raw frames (scripts/raw_gets.py): the same request unpadded
# (TC path) or padded with 1100 bytes after the IP packet (the reply fits the frame: XDP path).
# ROUNDS rounds (default 5) of N requests (default 20000) per case; prints medians.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${BIN:-target/release}
ROUNDS=${ROUNDS:-5}
N=${N:-20000}
pinned_memcached tc 64
"$BIN/inkcache" --netns "$SRV" attach --iface "$SIF" --quarantine-ms 50 >/dev/null
bpf_stats_hold
PINS=/sys/fs/bpf/inkcache/$SIF@$SRV
MAC=$(ip netns exec "$SRV" cat "/sys/class/net/$SIF/address")
RAW="python3 $(dirname "$0")/raw_gets.py"

store() { # key bytes (from the client namespace)
    ip netns exec "$CLI" python3 - "$1" "$2" <<'PY'
import socket, sys
key, n = sys.argv[1], int(sys.argv[2])
s = socket.create_connection(("198.18.0.1", 11211))
s.sendall(b"set %s 0 0 %d\r\n" % (key.encode(), n) + b"v" * n + b"\r\n")
assert s.recv(100) == b"STORED\r\n"
PY
}
store big 1000
store small 48
sleep 0.1
ip netns exec "$CLI" $RAW "$CIF" "$MAC" big 256 0 >/dev/null   # fill
ip netns exec "$CLI" $RAW "$CIF" "$MAC" small 256 0 >/dev/null

# each program's run count and time; the server's answers are walked by the `answers` program
# (cgroup egress on the server's sockets), pinned as a link
progstats() {
    local id
    for p in xdp tc_ingress answers; do
        if [ "$p" = answers ]; then
            id=$(bpftool link show pinned "$PINS/link_answers" -j |
                python3 -c "import json,sys; print(json.load(sys.stdin)['prog_id'])")
            set -- id "$id"
        else
            set -- pinned "$PINS/$p"
        fi
        bpftool prog show "$@" -j |
            python3 -c "import json,sys; v=json.load(sys.stdin); print('$p', v.get('run_cnt', 0), v.get('run_time_ns', 0))"
    done
}
phase() { # label key pad [source port]
    progstats >"$OUT/before"
    ip netns exec "$CLI" taskset -c 0 $RAW "$CIF" "$MAC" "$2" "$N" "$3" ${4:-} >/dev/null
    progstats >"$OUT/after"
    paste "$OUT/before" "$OUT/after" |
        awk -v l="$1" '{c = $5 - $2; t = $6 - $3; if (c > 100) printf "%s %s %d %.0f\n", l, $1, c, t / c}'
}
for _ in $(seq "$ROUNDS"); do
    phase "1 KB hit, XDP path (padded frame)" big 1100
    phase "1 KB hit, TC path (veth)" big 0
    phase "48 B hit, XDP path" small 0
    # another source port: the misses stay in `pending` (memcached's END does not clear them), and
    # the hits' replies, seen by the answers program, would find them and fill again
    phase "miss (memcached answers)" nosuchkey 0 40001
done >"$OUT/raw"
python3 - "$OUT/raw" "$ROUNDS" "$N" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    *label, prog, _, ns = line.split()
    rows.setdefault(" ".join(label), collections.OrderedDict()).setdefault(prog, []).append(int(ns))
print(f"median ns per request over {sys.argv[2]} rounds of {sys.argv[3]} requests\n")
print("| case | xdp | tc_ingress | answers | total |")
print("| --- | --- | --- | --- | --- |")
for label, progs in rows.items():
    m = {p: statistics.median(v) for p, v in progs.items()}
    cells = [f"{m[p]:.0f}" if p in m else "-" for p in ("xdp", "tc_ingress", "answers")]
    print(f"| {label} | {' | '.join(cells)} | {sum(m.values()):.0f} |")
PY
