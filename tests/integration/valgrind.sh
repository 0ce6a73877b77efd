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
status=0
for t in "$@"; do
	if [ ! -x "$t" ]; then
		echo "valgrind.sh: $t: not built" >&2
		status=1
		continue
	fi
	log=$(mktemp)
	CK_FORK=no valgrind -q --error-exitcode=1 --leak-check=full \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite \
		"$t" >"$log" 2>&1
	rc=$?
	summary=$(grep -E '^[0-9]+%: Checks' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "ok   ${t##*/}: ${summary:-no Check summary}"
	else
		echo "FAIL ${t##*/} (exit $rc): ${summary:-no Check summary}"
		cat "$log"
		status=1
	fi
	rm -f "$log"
done
exit $status
