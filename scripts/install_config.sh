#!/bin/sh
# install_config.sh SRC DEST - meson install script: installs the example
# configuration SRC as DEST (an absolute path, under $DESTDIR if set) unless
# a file is already there: an operator's configuration is never overwritten.
set -eu
src=$1
dest=${DESTDIR:-}$2
if [ -e "$dest" ] || [ -L "$dest" ]; then
	[ -n "${MESON_INSTALL_QUIET:-}" ] || echo "Keeping existing $dest"
	exit 0
fi
[ -n "${MESON_INSTALL_QUIET:-}" ] || echo "Installing $src to $dest"
[ -z "${MESON_INSTALL_DRY_RUN:-}" ] || exit 0
mkdir -p "$(dirname "$dest")"
# a temporary name first: an interrupted install leaves no half-written config
cp "$src" "$dest.tmp.$$"
chmod 0644 "$dest.tmp.$$"
mv "$dest.tmp.$$" "$dest"
