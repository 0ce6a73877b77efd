#!/bin/bash
# run_one.sh HARNESS FUZZDIR NAME - runs one libFuzzer harness for
# ${RL_FUZZ_SECONDS:-30} seconds on a scratch corpus seeded from
# FUZZDIR/corpus/NAME (the repo's corpus is only read), with FUZZDIR/NAME.dict.
# Prints libFuzzer's final stats; exits non-zero on any crash, leak or
# sanitizer report, saving the input under FUZZDIR/crashes-found/
# (1, not libFuzzer's default 77, which meson would count as a skip).
set -eu
harness=$1 dir=$2 name=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
mkdir -p "$dir/crashes-found"
"$harness" "$scratch" "$dir/corpus/$name" \
	-max_total_time="${RL_FUZZ_SECONDS:-30}" -timeout=25 -rss_limit_mb=2048 \
	-error_exitcode=1 \
	-dict="$dir/$name.dict" -print_final_stats=1 \
	-artifact_prefix="$dir/crashes-found/$name-" 2>&1 | tail -n 15
exit "${PIPESTATUS[0]}"
