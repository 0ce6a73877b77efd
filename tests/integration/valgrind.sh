#!/bin/bash
# valgrind.sh UNIT_TEST... - runs each Check unit test binary under valgrind
# (in-process: CK_FORK=no) and fails on any memory error or definite leak.
# Registered by tests/integration/meson.build (suite 'valgrind') for builds
# without sanitizers; valgrind cannot run AddressSanitizer binaries.
set -u
if ! command -v valgrind >/dev/null 2>&1; then
	echo "valgrind.sh: valgrind not found (apt-get install valgrind)" >&2
	exit 1
fi
if [ $# -eq 0 ]; then
	echo "valgrind.sh: no unit test binaries given" >&2
	exit 1
fi
# One binary: its report in DIR/N.out, its verdict in DIR/N.ok or DIR/N.fail.
run_one() {
	local n=$1 t=$2 log=$dir/$1.out rc summary
	if [ ! -x "$t" ]; then
		echo "valgrind.sh: $t: not built" >"$log"
		touch "$dir/$n.fail"
		return
	fi
	CK_FORK=no valgrind -q --error-exitcode=1 --leak-check=full \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite \
		"$t" >"$log.raw" 2>&1
	rc=$?
	summary=$(grep -E '^[0-9]+%: Checks' "$log.raw" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "ok   ${t##*/}: ${summary:-no Check summary}" >"$log"
		touch "$dir/$n.ok"
	else
		{
			echo "FAIL ${t##*/} (exit $rc): ${summary:-no Check summary}"
			cat "$log.raw"
		} >"$log"
		touch "$dir/$n.fail"
	fi
}

# As many at once as there are cores (the binaries are independent and
# valgrind is one core each); reported in the order given.
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
max=$(nproc 2>/dev/null || echo 2)
n=0
for t in "$@"; do
	while [ "$(jobs -rp | wc -l)" -ge "$max" ]; do
		wait -n
	done
	run_one "$n" "$t" &
	n=$((n + 1))
done
wait
status=0
for ((i = 0; i < n; i++)); do
	cat "$dir/$i.out"
	[ -e "$dir/$i.ok" ] || status=1
done
exit $status
