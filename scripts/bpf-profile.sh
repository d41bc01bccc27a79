#!/usr/bin/env bash
# Profiles a loaded BPF program by source line: perf samples CPU `CPU` for SECS seconds and maps
# those that fall in the program (or its subprograms) to their lines (scripts/bpf_lines.py).
# Usage, while traffic runs (root):
#   scripts/bpf-profile.sh PROG_NAME [SECS=5] [CPU=1] [TOP=40]
# e.g. scripts/bpf-profile.sh inkcache_xdp 5 1, with the server's NAPI on CPU 1 (hit-cost-live.sh's
# topology). Prints markdown tables: the busiest source lines, then the samples per file.
set -euo pipefail
NAME=${1:?usage: bpf-profile.sh PROG_NAME [SECS] [CPU] [TOP]}
SECS=${2:-5}
CPU=${3:-1}
TOP=${4:-40}
HERE=$(dirname "$0")
command -v perf > /dev/null || { echo "bpf-profile: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
ID=$(bpftool prog show -j | python3 -c 'import json, sys
ids = [p["id"] for p in json.load(sys.stdin) if p.get("name") == sys.argv[1]]
print(ids[0] if len(ids) == 1 else "")' "$NAME")
[ -n "$ID" ] || { echo "bpf-profile: no single loaded program named $NAME" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 "$HERE/bpf_lines.py" info "$ID" > "$TMP/lines.txt"
perf record -q -e cycles -C "$CPU" -o "$TMP/perf.data" -- sleep "$SECS" 2> /dev/null
perf script -F ip,sym -i "$TMP/perf.data" 2> /dev/null | python3 "$HERE/bpf_lines.py" map "$TMP/lines.txt" "$TOP"
