#!/usr/bin/env bash
# memcached's own test suite (t/*.t of its source tree) against a server binary, one test at a
# time, each with a time limit: a line per test (exit status, tests passed and failed).
#
#   scripts/memcached-suite.sh MEMCACHED_SRC SERVER_BIN [OUT]
#
# MEMCACHED_SRC: a memcached source tree (t/ and timedrun.c are used; nothing is built but
# timedrun), e.g. `git archive 1.6.18 t timedrun.c | tar -x -C DIR` of github.com/memcached/memcached.
# SERVER_BIN: /usr/bin/memcached or target/release/inkcached. The tree is copied to OUT (default
# a new temporary directory), where SERVER_BIN is linked as the `memcached-debug` its tests start.
# Debian's memcached has no seccomp, so the copy's tests do not pass `-o relaxed_privileges`.
# TLS, proxy, and tests that need memcached's git tree or special hooks are not run. TMO (seconds,
# default 90) limits each test; ONLY="stats watcher" runs just those. Needs perl.
set -euo pipefail
src=${1:?memcached source tree}
bin=$(realpath "${2:?server binary}")
out=${3:-$(mktemp -d "${TMPDIR:-/tmp}/mc-suite.XXXXXX")}
command -v perl >/dev/null || { echo "memcached-suite: perl is needed" >&2; exit 2; }
mkdir -p "$out"
cp -r "$src/t" "$out/"
sed -i 's/^\( *\)\$args \.= " -o relaxed_privileges";/\1# (relaxed_privileges: not in this build)/' \
    "$out/t/lib/MemcachedTest.pm"
cc -O2 -o "$out/timedrun" "$src/timedrun.c"
ln -sf "$bin" "$out/memcached-debug"
cd "$out"
mkdir -p logs
for t in t/*.t; do
    name=$(basename "$t" .t)
    case $name in ssl_* | proxy | whitespace | refhang | slabhang) continue ;; esac
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
    rc=0
    timeout -k 5 "${TMO:-90}" perl "$t" >"logs/$name.log" 2>&1 || rc=$?
    printf '%-28s exit %-3s ok %-6s not-ok %s\n' "$name" "$rc" \
        "$(grep -c '^ok' "logs/$name.log" || true)" "$(grep -c '^not ok' "logs/$name.log" || true)"
done
echo "memcached-suite: logs in $out/logs"
