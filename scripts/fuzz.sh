#!/usr/bin/env bash
# A short coverage-guided fuzz run of inkproto's request parser on the stable toolchain (make test
# runs it): the libFuzzer target crates/inkproto/fuzz/fuzz_targets/parse_request.rs, built with
# the coverage instrumentation cargo-fuzz uses but no sanitizer (sanitizers need nightly; the
# parser is safe Rust, so what is sought is panics, overflows and hangs), started from the seeds in
# crates/inkproto/fuzz/seeds with the memcache protocol dictionary (memcache.dict).
# Usage: scripts/fuzz.sh [SECONDS] [extra libFuzzer args...]   (default 30 s)
# With nightly and cargo-fuzz: cd crates/inkproto/fuzz && cargo +nightly fuzz run parse_request
# -- -dict=memcache.dict seeds
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}; shift || true
FUZZ=crates/inkproto/fuzz
TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target/fuzz}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
# cargo-fuzz's instrumentation flags (sancov with inline 8-bit counters, PC table and compare
# tracing for libFuzzer), cfg(fuzzing), debug assertions and overflow checks.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps the flags off build scripts and proc macros.
cargo build --release --locked --manifest-path "$FUZZ/Cargo.toml" --target "$TRIPLE" \
    --target-dir "$TARGET_DIR" --bin parse_request
BIN=$TARGET_DIR/$TRIPLE/release/parse_request
CORPUS=$(mktemp -d /tmp/inkproto-fuzz.XXXXXX)
ARTIFACTS=${FUZZ_ARTIFACTS:-$TARGET_DIR/artifacts}
mkdir -p "$ARTIFACTS"
trap 'rm -rf "$CORPUS"' EXIT
"$BIN" "$CORPUS" "$FUZZ/seeds" -dict="$FUZZ/memcache.dict" -max_total_time="$SECS" \
    -max_len=4096 -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/" "$@"
