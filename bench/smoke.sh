#!/bin/bash
# smoke.sh BENCH DAEMON - checks that ratelimit-bench works, not how fast:
# starts a throwaway redis-server and ratelimitd, runs the tool briefly in
# each mode and requires decisions and no ERR; then, against a second daemon
# with a TLS listener and auth: required, over TLS with a token, and with a
# wrong one (a clear error, exit 1); and on that daemon's gRPC listener,
# --grpc with one and three descriptors (a limit of 5 a minute must deny).
# Run by `meson test --suite bench`.
set -u
bench=${1:?usage: smoke.sh BENCH DAEMON}
daemon=${2:?usage: smoke.sh BENCH DAEMON}
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rl-bench-smoke.XXXXXX") || exit 1
TLS_PID=
trap 'bp_stop "$TLS_PID"; bp_cleanup; rm -rf "$tmp"' EXIT
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

# tls_daemon - a second daemon on the same Redis: a plain line listener (for
# the PING that says it is up), a TLS one with auth: required, whose
# identity's token is in $tmp/tls/bench.token, and a gRPC one with Envoy's
# rules; sets TLS_PORT, GRPC_PORT and TLS_PID.
tls_daemon() {
	local d=$tmp/tls plain
	mkdir -p "$d"
	(cd "$d" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
			-out ca.pem -days 1 -subj /CN=smoke-ca &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
			-out server.csr -subj /CN=localhost &&
		printf 'subjectAltName=IP:127.0.0.1\n' >server.ext &&
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
			-out server.pem -extfile server.ext) >"$d/openssl.log" 2>&1 || {
		echo "FAIL: openssl: $(tail -n 2 "$d/openssl.log")"
		return 1
	}
	echo 0123456789abcdef-smoke >"$d/bench.token"
	echo 0123456789abcdef-wrong >"$d/wrong.token"
	plain=$(bp_free_port) && TLS_PORT=$(bp_free_port) && GRPC_PORT=$(bp_free_port) || return 1
	printf 'domain: smoke\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 1000000000}}\n  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 1000000000}}\n  - {key: flood, rate_limit: {unit: minute, requests_per_unit: 5}}\n' >"$d/envoy.yaml"
	printf 'listen:\n  - "127.0.0.1:%s"\n  - {address: "127.0.0.1:%s", auth: required, tls: {cert_file: server.pem, key_file: server.key}}\n  - {address: "127.0.0.1:%s", protocol: grpc}\nredis: {address: "127.0.0.1:%s", timeout: 5s}\non_store_error: error\nlog_level: warn\nenvoy: {config: envoy.yaml}\nidentities:\n  bench: {token_file: bench.token, rights: [decide]}\npolicies:\n  smoke: {algorithm: funnel, capacity: 1000000000, rate: 1000000000/1s}\n' \
		"$plain" "$TLS_PORT" "$GRPC_PORT" "$BP_REDIS_PORT" >"$d/tls.yaml"
	"$daemon" -c "$d/tls.yaml" 2>>"$d/daemon.log" &
	TLS_PID=$!
	bp_wait_ping "$plain" "$TLS_PID" || {
		local rc=0
		kill -0 "$TLS_PID" 2>/dev/null || { wait "$TLS_PID"; rc=$?; }
		TLS_PID=
		echo "FAIL: the TLS daemon did not start (exit status $rc):"
		sed 's/^/  | /' "$d/daemon.log"
		smoke_state
		return 1
	}
}

# smoke_state - on a failure, whether the others still run: what ended a
# daemon that said nothing is then less of a guess.
smoke_state() {
	local name pid
	for name in BP_REDIS_PID BP_DAEMON_PID; do
		pid=${!name}
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			echo "  $name $pid: running"
		else
			echo "  $name $pid: gone"
		fi
	done
	tail -n 5 "$tmp/redis.log" "$tmp/ratelimitd.log" 2>/dev/null | sed 's/^/  | /'
}

if ! command -v openssl >/dev/null; then
	echo "SKIP: TLS cases, no openssl command"
elif tls_daemon; then
	tls=(--daemon "127.0.0.1:$TLS_PORT" --tls --cacert "$tmp/tls/ca.pem")
	check tls-auth --target daemon "${tls[@]}" --token-file "$tmp/tls/bench.token" \
		--action smoke -c 2 -P 8 -d 1
	check tls-auth-resp --target daemon "${tls[@]}" --resp --action smoke -c 2 -P 8 -n 2000 \
		--token-file "$tmp/tls/bench.token"
	grpc=(--daemon "127.0.0.1:$GRPC_PORT" --grpc smoke)
	check grpc "${grpc[@]}" --action user -c 2 -P 8 -n 2000
	check grpc-3 "${grpc[@]}" --action user --descriptor ip=10.0.0.1 --descriptor flood=x \
		-c 2 -P 4 -n 500 --keys hot
	EXPECT_DENIED=1 check grpc-flood "${grpc[@]}" --action flood -c 1 -P 4 -n 50 --keys hot
	# refused: a wrong token, and none at all; exit 1 with the daemon's answer
	for t in wrong none; do
		if [ $t = wrong ]; then
			args=(--token-file "$tmp/tls/wrong.token")
			want="AUTH with the token in $tmp/tls/wrong.token refused: ERR auth-failed"
		else
			args=()
			want="ERR noauth"
		fi
		echo "== tls-auth-$t: ratelimit-bench ${tls[*]} ${args[*]}"
		out=$(RATELIMIT_BENCH_TOKEN='' "$bench" --config "$tmp/ratelimitd.yaml" --target daemon \
			"${tls[@]}" "${args[@]}" --action smoke -n 10 --csv 2>&1)
		rc=$?
		echo "$out"
		if [ $rc -ne 1 ] || [[ $out != *"$want"* ]]; then
			echo "FAIL: tls-auth-$t: exit status $rc, expected 1 and \"$want\""
			fail=1
		fi
	done
else
	fail=1
fi

# the human-readable report must print too
"$bench" --config "$tmp/ratelimitd.yaml" --target both --action smoke -c 1 -n 10 >/dev/null || {
	echo "FAIL: report"
	smoke_state
	fail=1
}
[ $fail -eq 0 ] && echo "bench-smoke: OK"
exit $fail
