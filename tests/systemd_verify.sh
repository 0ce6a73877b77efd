#!/bin/bash
# systemd_verify.sh UNIT BINARY - runs systemd-analyze verify on the unit with
# ExecStart pointed at the freshly built binary (the installed path may not
# exist here), and fails on any complaint about the unit.
set -eu
unit=$1 bin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/sbin/ratelimitd|$bin|g" "$unit" > "$tmp/ratelimitd.service"
out=$(systemd-analyze verify "$tmp/ratelimitd.service" 2>&1) || { echo "$out"; exit 1; }
# verify exits 0 on some warnings; treat any line naming our unit as a failure
if echo "$out" | grep -q "ratelimitd.service"; then
	echo "$out"
	exit 1
fi
echo "systemd-analyze verify: OK"
