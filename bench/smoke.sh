#!/bin/bash
# smoke.sh BENCH DAEMON - checks that ratelimit-bench works, not how fast:
# starts a throwaway redis-server and ratelimitd, runs the tool briefly in
# each mode and requires decisions and no ERR. Run by `meson test --suite bench`.
set -u
bench=${1:?usage: smoke.sh BENCH DAEMON}
daemon=${2:?usage: smoke.sh BENCH DAEMON}
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rl-bench-smoke.XXXXXX") || exit 1
trap 'bp_cleanup; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v redis-server >/dev/null || { echo "SKIP: no redis-server"; exit 77; }
bp_start_redis "$tmp" || exit 1
bp_start_daemon "$daemon" "$tmp" '
on_store_error: error
log_level: warn
policies:
  smoke: {algorithm: funnel, capacity: 1000000000, rate: 1000000000/1s}
  smoke_sw: 1000/1m
  flood: 5/1m' '  timeout: 5s' || exit 1

header=$("$bench" --csv-header)
fail=0

# check NAME ARGS... - one run; every target run must decide, without ERR.
check() {
	local name=$1 line t dps err allowed denied
	shift
	echo "== $name: ratelimit-bench $*"
	line=$("$bench" --config "$tmp/ratelimitd.yaml" --flushdb --csv "$@")
	local rc=$?
	echo "$line"
	if [ $rc -ne 0 ] || [ -z "$line" ]; then
		echo "FAIL: $name: exit status $rc"
		fail=1
		return
	fi
	for t in direct daemon; do
		dps=$(csv_field "$header" "$line" "${t}_dps")
		[ -n "$dps" ] || continue
		err=$(csv_field "$header" "$line" "${t}_err")
		allowed=$(csv_field "$header" "$line" "${t}_allowed")
		denied=$(csv_field "$header" "$line" "${t}_denied")
		if [ $((allowed + denied)) -eq 0 ] || [ "$err" != 0 ]; then
			echo "FAIL: $name: $t: allowed $allowed denied $denied err $err"
			fail=1
		fi
		if [ -n "${EXPECT_DENIED:-}" ] && [ "$denied" -eq 0 ]; then
			echo "FAIL: $name: $t: expected denials"
			fail=1
		fi
	done
}

check both-funnel --target both --action smoke -c 4 -P 8 -d 1 --keys uniform:1000
check both-sliding-zipf --target both --action smoke_sw -c 2 -P 4 -n 2000 --keys zipf:1000:1.1
EXPECT_DENIED=1 check flood-hot --target both --action flood -c 2 -P 16 -n 1000 --keys hot
check latency --target both --latency --action smoke -n 200 --cost 3
check policy-arg --target redis --action other --policy "funnel 15 30/60000" -n 100 --keys hot
check rate --target daemon --action smoke -c 4 -P 4 -d 0.5 --rate 2000
check idle --target both --action smoke -c 2 -P 2 -n 200 --idle-connections 50

# the human-readable report must print too
"$bench" --config "$tmp/ratelimitd.yaml" --target both --action smoke -c 1 -n 10 >/dev/null || {
	echo "FAIL: report"
	fail=1
}
[ $fail -eq 0 ] && echo "bench-smoke: OK"
exit $fail
