#!/bin/bash
# systemd_verify.sh UNIT BINARY [OTHER_UNIT...] - runs systemd-analyze verify
# on the unit (and the others, e.g. its .socket, copied beside it) with the
# program of its ExecStart= (the installed path, which may not exist here)
# replaced by BINARY everywhere, and fails on any complaint about them; then
# checks that `systemd-analyze security` rates the service's exposure 1.5 or
# less (docs/security.md).
set -eu
unit=$1 bin=$2
shift 2
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
names=("$name")
for other in "$@"; do
	cp "$other" "$tmp/"
	names+=("$(basename "$other")")
done
out=$(cd "$tmp" && systemd-analyze verify "${names[@]}" 2>&1) || { echo "$out"; exit 1; }
# verify exits 0 on some warnings; treat any line naming our units as a failure
for n in "${names[@]}"; do
	if echo "$out" | grep -q "$n"; then
		echo "$out"
		exit 1
	fi
done
echo "systemd-analyze verify: OK (${names[*]})"
# the exposure: 0 (best) to 10, scaled by 10 for --threshold
out=$(systemd-analyze security --offline=true --threshold=15 "$tmp/$name" 2>&1) || {
	echo "$out" | tail -n 5
	echo "systemd-analyze security: exposure above 1.5"
	exit 1
}
echo "$out" | tail -n 1
