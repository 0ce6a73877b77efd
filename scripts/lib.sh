# lib.sh - shell helpers shared by scripts/run and scripts/test (sourced, not run).

# Debian packages needed to build the daemon and run it against a local Redis
# (python3-yaml: scripts/run reads the config's addresses with it; tzdata:
# calendar windows' time zones).
RL_BUILD_PACKAGES="build-essential pkg-config meson ninja-build python3
	libevent-dev libhiredis-dev libyaml-dev libsystemd-dev check
	libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler scdoc libssl-dev
	redis-server redis-tools netcat-openbsd python3-yaml tzdata"
# What scripts/package needs to build and check the Debian package (no
# fakeroot: debian/control says Rules-Requires-Root: no). The test suite
# builds the package too (tests/package_check.py), so these are test
# packages as well.
RL_DEB_PACKAGES="debhelper dpkg-dev lintian"
# What scripts/image takes into the container image besides the build's
# libraries: time zones and the CA certificates.
RL_IMAGE_PACKAGES="tzdata ca-certificates"
# Extra packages for the test suite (systemd-analyze comes with systemd;
# python3-redis is redis-py, a real client of the RESP tests; nginx-light
# (with auth_request) and caddy are the proxies of the forward-auth tests,
# haproxy (2.6) the one of it-haproxy's SPOE;
# python3-grpcio and python3-protobuf the gRPC client of it-grpc,
# nghttp2-client's h2load scripts/bench's gRPC load; prometheus (with
# promtool) checks /metrics, scrapes the daemon and checks docs/alerts.yml in
# it-metrics, which reads that file with python3-yaml; gnuplot-nox draws
# the figures of docs/ and graphviz's dot the architecture diagram, with
# scripts/plots, whose --check the suite runs; faketime sets a daemon's
# clock in it-calendar; nftables cuts a replica from its master, and
# util-linux's unshare gives that test its own network namespace, in
# it-durability; chromium, driven by chromium-driver's chromedriver, is the
# real browser of it-console and of scripts/plots' console screenshot;
# podman loads and runs the container image of scripts/image in the image
# test, with runc, as crun cannot run containers on every host's cgroups,
# and iproute2's ip brings up the loopback of its network namespace).
RL_TEST_PACKAGES="clang libclang-rt-14-dev clang-format systemd valgrind python3-redis
	nginx-light caddy haproxy curl python3-grpcio python3-protobuf nghttp2-client prometheus
	python3-yaml gnuplot-nox graphviz faketime nftables util-linux chromium chromium-driver
	podman runc iproute2 $RL_DEB_PACKAGES $RL_IMAGE_PACKAGES"
# Valkey 8, the other store the suite tests (it-valkey), from Debian 12's
# bookworm-backports: only these three packages come from there (each is
# asked for as PKG/bookworm-backports, so their dependencies and everything
# else stay bookworm's; backports' own priority, 100, installs nothing by
# itself). Not valkey-redis-compat, whose redis-* names would replace
# redis-server 7, which every other test uses.
RL_VALKEY_PACKAGES="valkey-server valkey-sentinel valkey-tools"
RL_BACKPORTS_SOURCES=/etc/apt/sources.list.d/bookworm-backports.sources
# Node.js and npm for the Node Redis clients of the RESP tests (npm then
# fetches the pinned clients from its registry): Debian's, unless a node
# with its own npm is installed already.
RL_NODE_PACKAGES="nodejs npm"

rl_say() {
	printf '%s: %s\n' "${0##*/}" "$*" >&2
}

rl_die() {
	rl_say "$*"
	exit 1
}

# The repository root: the parent of the directory holding this file.
rl_root() {
	cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}

rl_have_package() {
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

# rl_install_packages PKG... - installs with apt-get only the packages that are
# not installed yet; runs `apt-get update` once, and only if something is missing.
rl_install_packages() {
	local missing=() p
	command -v dpkg-query >/dev/null 2>&1 ||
		rl_die "dpkg-query not found: this script expects Debian 12 (install the packages by hand: $*)"
	for p in "$@"; do
		rl_have_package "$p" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0

	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 ||
			rl_die "missing packages (${missing[*]}) and not root: run as root or install them"
		sudo=(sudo)
	fi
	rl_say "installing ${missing[*]}"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
		rl_die "apt-get update failed"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}" ||
		rl_die "apt-get install failed"
}

# rl_install_backports PKG... - installs the missing PKGs from
# bookworm-backports, adding that suite as an apt source first when it is not
# one yet (a copy of debian.sources' bookworm entry: the same mirror and key,
# Suites: bookworm-backports).
rl_install_backports() {
	local missing=() p
	command -v dpkg-query >/dev/null 2>&1 ||
		rl_die "dpkg-query not found: this script expects Debian 12 (install the packages by hand: $*)"
	for p in "$@"; do
		rl_have_package "$p" || missing+=("$p/bookworm-backports")
	done
	[ ${#missing[@]} -eq 0 ] && return 0

	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 ||
			rl_die "missing packages (${missing[*]}) and not root: run as root or install them"
		sudo=(sudo)
	fi
	if ! grep -rqs '^Suites:.*bookworm-backports' /etc/apt/sources.list.d/ &&
		! grep -rqs '^deb .* bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		local entry
		entry=$(awk 'BEGIN { RS = "" } /(^|\n)Suites:([^\n]* )?bookworm( |\n|$)/ { print; exit }' \
			/etc/apt/sources.list.d/debian.sources 2>/dev/null)
		[ -n "$entry" ] || entry="Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
		rl_say "adding bookworm-backports as $RL_BACKPORTS_SOURCES"
		printf '%s\n' "$entry" | sed -e '/^#/d' -e 's/^Suites:.*/Suites: bookworm-backports/' |
			"${sudo[@]}" tee "$RL_BACKPORTS_SOURCES" >/dev/null ||
			rl_die "cannot write $RL_BACKPORTS_SOURCES"
	fi
	rl_say "installing ${missing[*]}"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
		rl_die "apt-get update failed"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}" ||
		rl_die "apt-get install failed"
}

# rl_meson_setup DIR [OPTION...] - configures DIR, or reconfigures it when it
# was configured before (options given again are applied).
rl_meson_setup() {
	local dir=$1
	shift
	if [ -f "$dir/meson-private/coredata.dat" ]; then
		meson setup --reconfigure "$dir" "$@" ||
			meson setup --wipe "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}
