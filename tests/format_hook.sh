#!/bin/bash
# format_hook.sh SRCDIR - the pre-commit hook of scripts/git-hooks, as a
# developer installs it (git config core.hooksPath scripts/git-hooks), in a
# throwaway repository holding the project's format script and style: an
# unformatted staged C file is refused, the same file formatted is taken,
# and the staged contents count, not the work tree's.
set -u
src=$1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
cd "$tmp" || exit 1
git init -q . || fail "git init"
git config user.email test@example.invalid
git config user.name test
mkdir -p scripts/git-hooks
cp "$src/scripts/format" "$src/scripts/lib.sh" scripts/
cp "$src/scripts/git-hooks/pre-commit" scripts/git-hooks/
cp "$src/.clang-format" .
git add -A && git commit -q --no-verify -m base || fail "base commit"
git config core.hooksPath scripts/git-hooks

printf 'int  f(void){return 1;}\n' >bad.c
git add bad.c
out=$(git commit -q -m unformatted 2>&1) && fail "an unformatted file was committed"
case $out in
*"bad.c: not formatted as staged"*) ;;
*) fail "the refusal does not name the file: $out" ;;
esac

scripts/format || fail "scripts/format"
git add bad.c
git commit -q -m formatted || fail "a formatted file was refused"

# staged formatted, then spoiled in the work tree only: the commit is of the index
printf 'int g(void)\n{\n\treturn 2;\n}\n' >good.c
git add good.c
printf 'int  g(void){return 2;}\n' >good.c
git commit -q -m staged-ok || fail "judged by the work tree, not by what was staged"
# and the other way round: spoiled in the index, formatted in the work tree
printf 'int  h(void){return 3;}\n' >h.c
git add h.c
printf 'int h(void)\n{\n\treturn 3;\n}\n' >h.c
git commit -q -m staged-bad 2>/dev/null && fail "an unformatted staged file passed because the work tree was formatted"
echo "ok"
