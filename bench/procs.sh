# shellcheck shell=bash
# procs.sh - start a throwaway redis-server and ratelimitd on free loopback
# ports, and stop them again (sourced by bench/smoke.sh and scripts/bench).
#
# bp_start_redis DIR                 sets BP_REDIS_PORT, BP_REDIS_PID; extra
#                                    redis-server options from $BP_REDIS_ARGS
# bp_start_daemon BINARY DIR YAML [REDIS_YAML]
#                                    writes DIR/ratelimitd.yaml: listen and
#                                    redis.address are added, REDIS_YAML
#                                    (indented lines) goes under redis:, so
#                                    YAML must not have listen: or redis:;
#                                    sets BP_DAEMON_PORT, BP_DAEMON_PID,
#                                    BP_HTTP_PORT (a protocol: http listener),
#                                    BP_SPOE_PORT (a protocol: spoe listener),
#                                    BP_ADMIN_PORT (admin: true) and
#                                    BP_METRICS_PORT (metrics.listen), so YAML
#                                    must not have metrics: either
# bp_decisions PORT                  the decisions a daemon has made so far,
#                                    every result and source (the sum of
#                                    ratelimitd_decisions_total on its metrics
#                                    listener at PORT); nothing when unreadable
# bp_errors PORT                     its error replies so far, by code, those
#                                    not 0 ("store-timeout 10, busy 2")
# bp_cleanup                         stops what was started (call from a trap)

BP_REDIS_PID=
BP_DAEMON_PID=

bp_free_port() {
	python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# bp_ping PORT - true when something on 127.0.0.1:PORT answers PING with PONG
# (Redis's "+PONG" or the daemon's "PONG").
bp_ping() {
	local fd line
	exec {fd}<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'PING\r\n' >&"$fd"
	read -r -t 2 line <&"$fd"
	exec {fd}>&-
	[[ $line == *PONG* ]]
}

# bp_wait_ping PORT PID - waits up to 10 s for PONG while PID lives.
bp_wait_ping() {

	for _ in $(seq 100); do
		kill -0 "$2" 2>/dev/null || return 1
		bp_ping "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

bp_start_redis() {
	local dir=$1
	for _ in 1 2 3 4 5; do
		BP_REDIS_PORT=$(bp_free_port) || return 1
		# shellcheck disable=SC2086 # BP_REDIS_ARGS is a list of options
		redis-server --port "$BP_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
			--dir "$dir" --logfile "$dir/redis.log" --daemonize no ${BP_REDIS_ARGS:-} &
		BP_REDIS_PID=$!
		bp_wait_ping "$BP_REDIS_PORT" "$BP_REDIS_PID" && return 0
		kill "$BP_REDIS_PID" 2>/dev/null
		wait "$BP_REDIS_PID" 2>/dev/null
		BP_REDIS_PID=
	done
	echo "procs.sh: redis-server did not start (see $dir/redis.log)" >&2
	return 1
}

bp_start_daemon() {
	local bin=$1 dir=$2 yaml=$3 redis_extra=${4:-}
	for _ in 1 2 3 4 5; do
		BP_DAEMON_PORT=$(bp_free_port) || return 1
		BP_HTTP_PORT=$(bp_free_port) || return 1
		BP_ADMIN_PORT=$(bp_free_port) || return 1
		BP_SPOE_PORT=$(bp_free_port) || return 1
		BP_METRICS_PORT=$(bp_free_port) || return 1
		{
			printf 'listen: ["127.0.0.1:%s", {address: "127.0.0.1:%s", protocol: http}, {address: "127.0.0.1:%s", admin: true}, {address: "127.0.0.1:%s", protocol: spoe}]\n' \
				"$BP_DAEMON_PORT" "$BP_HTTP_PORT" "$BP_ADMIN_PORT" "$BP_SPOE_PORT"
			printf 'metrics: {listen: "127.0.0.1:%s"}\n' "$BP_METRICS_PORT"
			printf 'redis:\n  address: 127.0.0.1:%s\n' "$BP_REDIS_PORT"
			[ -n "$redis_extra" ] && printf '%s\n' "$redis_extra"
			printf '%s\n' "$yaml"
		} >"$dir/ratelimitd.yaml"
		"$bin" -c "$dir/ratelimitd.yaml" 2>>"$dir/ratelimitd.log" &
		BP_DAEMON_PID=$!
		bp_wait_ping "$BP_DAEMON_PORT" "$BP_DAEMON_PID" && return 0
		kill "$BP_DAEMON_PID" 2>/dev/null
		wait "$BP_DAEMON_PID" 2>/dev/null
		BP_DAEMON_PID=
	done
	echo "procs.sh: ratelimitd did not start; its log:" >&2
	tail -n 20 "$dir/ratelimitd.log" >&2
	return 1
}

bp_decisions() {
	python3 -c 'import sys, urllib.request
n = 0
for ln in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10):
    if ln.startswith(b"ratelimitd_decisions_total{"):
        n += int(float(ln.split()[1]))
print(n)' "$1" 2>/dev/null
}

bp_errors() {
	python3 -c 'import sys, urllib.request
out = []
for ln in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10):
    if ln.startswith(b"ratelimitd_errors_total{") and float(ln.split()[1]) > 0:
        out.append("%s %d" % (ln.split(b"\"")[1].decode(), float(ln.split()[1])))
print(", ".join(out) or "none")' "$1" 2>/dev/null
}

bp_stop() {
	local pid=$1
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

bp_cleanup() {
	bp_stop "$BP_DAEMON_PID"
	BP_DAEMON_PID=
	bp_stop "$BP_REDIS_PID"
	BP_REDIS_PID=
}

# csv_field HEADER LINE NAME - the value of column NAME in a CSV line.
csv_field() {
	awk -F, -v want="$3" -v h="$1" -v l="$2" 'BEGIN {
		n = split(h, names, ","); split(l, vals, ",")
		for (i = 1; i <= n; i++) if (names[i] == want) { print vals[i]; exit }
	}'
}
