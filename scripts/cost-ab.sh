#!/usr/bin/env bash
# Two builds' test-run costs compared round by round (issue 11). This VM's speed moves by a half
# within seconds (docs/results/hitcost.md), more than most changes to the hit path, so separate
# runs of two builds say little, and even runs a second apart differ by ±10%. Here both builds'
# test binaries run one cost measurement of crates/inkcache/tests/unit/cost.rs (default
# hot_hit_cost) at once on CPU1, taking turns round by round through two FIFOs (COST_LOCKSTEP),
# so the rounds compared ran milliseconds apart; each round's mean goes to a log
# (COST_ROUND_LOG). Prints, for each measurement the test makes (numbered in the order it makes
# them), both builds' median round, the median of the per-round ratios B/A with its quartiles
# (each round of B against A's rounds before and after it) and how many rounds had B lower; then
# what each build printed. A round next to a set-up of the other build's (its load, a
# measurement's keys) is slower: the medians are not moved by a few such. Where each build's
# programs land also moves its cost, by a few percent from one load to the next (hitcost.md,
# nineteenth and twenty-fifth runs): COST_AB_SITTINGS=N (default 1) repeats the whole comparison
# N times, each build loaded afresh each time, prints each sitting's table and then, for each
# measurement, the median and range of the sittings' median ratios and how many sittings had B
# lower. A build whose only change is a branch never taken measured 0.956-1.035 in single
# sittings and ~1.5-2% dearer in both orders over 8 (twenty-seventh run): differences under ~2%
# may be the build's placement, not its logic. Usage (root; the binaries from
# `cargo test --release -p inkcache --test bpf_unit --no-run` of each build):
#   scripts/cost-ab.sh BPF_UNIT_A BPF_UNIT_B [TEST] [ROUNDS]    (defaults: hot_hit_cost, 40)
# Each build is stopped after COST_AB_TIMEOUT seconds (default 600). Takes lib.sh's bench_lock.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '/^set -euo/q; 2,$p' "$0" >&2; exit 2; } # the comment above
. "$(dirname "$0")/lib.sh"
bench_lock
A=$1 B=$2 TEST=${3:-hot_hit_cost}
export COST_ROUNDS=${4:-40}
SITTINGS=${COST_AB_SITTINGS:-1}
[[ $SITTINGS =~ ^[1-9][0-9]*$ ]] || { echo "cost-ab: COST_AB_SITTINGS must be a positive count" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cd "$(dirname "$0")/../crates/inkcache" # the tests' paths are the crate's

run() { # binary its-turn next-turn log
    COST_LOCKSTEP="$2,$3" COST_ROUND_LOG="$4" timeout "${COST_AB_TIMEOUT:-600}" \
        taskset -c 1 "$1" "unit::cost::$TEST" --ignored --nocapture --exact --test-threads 1
}
failed() { # name binary output
    echo "cost-ab: $1 ($2) failed:" >&2
    cat "$3" >&2
}
sitting() { # number: both builds loaded and run in turns, logs in $OUT/sN/{a,b}.{log,out}
    local d=$OUT/s$1 ok=0 pa pb
    mkdir "$d"
    mkfifo "$d/ta" "$d/tb"
    exec 3<> "$d/ta" 4<> "$d/tb" # held open: a turn passed after the other build ended is kept
    printf t >&3                  # A's first turn
    run "$A" "$d/ta" "$d/tb" "$d/a.log" > "$d/a.out" 2>&1 & pa=$!
    run "$B" "$d/tb" "$d/ta" "$d/b.log" > "$d/b.out" 2>&1 & pb=$!
    wait $pa || { ok=1; failed A "$A" "$d/a.out"; kill $pb 2> /dev/null || true; }
    wait $pb || { ok=1; failed B "$B" "$d/b.out"; }
    exec 3>&- 4>&-
    return $ok
}
for s in $(seq "$SITTINGS"); do
    sitting "$s" || exit 1
done
python3 - "$OUT" "$SITTINGS" <<'PY'
import statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def rounds(path):
    r = {}
    try:
        lines = open(path).readlines()
    except FileNotFoundError:
        sys.exit("cost-ab: a build logged no round (is TEST one of cost.rs's measurements?)")
    for line in lines:
        m, i, ns = map(int, line.split())
        r.setdefault(m, {})[i] = ns
    return r
medians = {}
for s in range(1, n + 1):
    a, b = rounds(f"{out}/s{s}/a.log"), rounds(f"{out}/s{s}/b.log")
    if not a or a.keys() != b.keys():
        sys.exit("cost-ab: the two builds made different measurements")
    if n > 1:
        print(f"sitting {s} of {n}:")
    print("| measurement | rounds | A median ns | B median ns | B/A per round: median (quartiles) | B lower |")
    print("| ---: | ---: | ---: | ---: | --- | ---: |")
    for m in sorted(a):
        # B's round i ran between A's rounds i and i + 1: it is compared with both (their
        # geometric mean), so a drift of the host's speed and the order of the turns cancel out
        idx = [i for i in sorted(b[m]) if i in a[m] and i + 1 in a[m]]
        if not idx:
            sys.exit(f"cost-ab: measurement {m} has too few rounds")
        ref = {i: (a[m][i] * a[m][i + 1]) ** 0.5 for i in idx}
        r = sorted(b[m][i] / ref[i] for i in idx)
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        ma = statistics.median(a[m][i] for i in idx)
        mb = statistics.median(b[m][i] for i in idx)
        lower = sum(b[m][i] < ref[i] for i in idx)
        medians.setdefault(m, []).append(q[1])
        print(f"| {m} | {len(idx)} | {ma:.0f} | {mb:.0f} | {q[1]:.3f} ({q[0]:.3f}-{q[2]:.3f}) | "
              f"{lower} of {len(idx)} |")
if n > 1:
    print(f"over the {n} sittings:")
    print("| measurement | sittings | B/A: the sittings' medians, median (range) | sittings with B lower |")
    print("| ---: | ---: | --- | ---: |")
    for m, r in sorted(medians.items()):
        print(f"| {m} | {len(r)} | {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}) | "
              f"{sum(x < 1 for x in r)} of {len(r)} |")
PY
for x in a b; do
    echo "${x^^} printed (sitting $SITTINGS):"
    grep -E 'ns|^\|' "$OUT/s$SITTINGS/$x.out" | sed 's/^/  /'
done
