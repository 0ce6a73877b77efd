#!/bin/bash
# systemd_verify.sh UNIT BINARY - runs systemd-analyze verify on the unit with
# the program of its ExecStart= (the installed path, which may not exist
# here) replaced by BINARY everywhere, and fails on any complaint about the
# unit.
set -eu
unit=$1 bin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
installed=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" | head -n 1)
case $installed in
/*) ;;
*) echo "$unit: no ExecStart= with an absolute path"; exit 1 ;;
esac
# the unit's file name matters to systemd-analyze: keep it
name=$(basename "$unit")
sed "s|$installed|$bin|g" "$unit" > "$tmp/$name"
out=$(systemd-analyze verify "$tmp/$name" 2>&1) || { echo "$out"; exit 1; }
# verify exits 0 on some warnings; treat any line naming our unit as a failure
if echo "$out" | grep -q "$name"; then
	echo "$out"
	exit 1
fi
echo "systemd-analyze verify: OK"
