#!/usr/bin/env bash
# A short run of every fuzz target (fuzz/), so that a target whose invariant the code has outgrown,
# or an easy crash, fails CI instead of waiting for the next campaign.
#
# Built as cargo-fuzz builds (libFuzzer with SanitizerCoverage) but with the stable toolchain and no
# AddressSanitizer, which needs a nightly `-Z` flag: the targets and the code they reach have no
# `unsafe` of their own, so what a short run can find is a panic, and libFuzzer reports those.
#
# FUZZ_SECONDS: seconds per target (default 30). The build goes to $CARGO_TARGET_DIR (default
# fuzz/target), under its own target triple so that the flags never reach build scripts.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-30}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-pc-table"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
RUSTFLAGS+=" --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
export RUSTFLAGS
cargo build --release --locked --target "$triple" --bins
bin="${CARGO_TARGET_DIR:-target}/$triple/release"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
for target in provider_spec prism_decode prism_client_http addresses_csr; do
    mkdir -p "$work/$target"
    # The committed seeds run first (each is a regression input too), then new inputs grow from them.
    if "$bin/$target" "$work/$target" "seeds/$target" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len=16384 -artifact_prefix="$work/$target/" -print_final_stats=1 \
        >"$work/$target.log" 2>&1; then
        echo "fuzz-smoke: $target: $(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log") inputs in ${seconds} s, no failure"
    else
        failed=1
        echo "fuzz-smoke: $target FAILED; the end of its log (the input is its Base64 line):"
        tail -n 40 "$work/$target.log"
    fi
done
exit "$failed"
