#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Prepare this machine (Debian 12, as root) to build and test the plugin bundle:
# Slurm daemons and clients, munge, MariaDB, the C toolchain and libclang for bindgen, and a
# configured Slurm source tree of exactly the installed version, with Debian's patches applied.
# Run `tools/slurm-env.sh --help` for details.
set -euo pipefail

prog=${0##*/}

usage() {
    cat <<EOF
Usage: $prog [--help]

Prepares this machine to build and test the energy-aware Slurm plugin bundle.
Must run as root on Debian 12. Idempotent: a second run checks and does nothing else.

  1. Installs (apt-get, --no-install-recommends) the Slurm daemons and clients, munge,
     MariaDB, libslurm-dev, libmunge-dev, clang/libclang-dev (bindgen), build-essential,
     dpkg-dev, pkg-config and expect (for Slurm's own regression tests, tests/slurm-regression).
     'apt-get update' runs only when apt needs it.
  2. Adds a deb-src entry derived from this machine's own apt sources (each 'deb' entry copied
     as 'deb-src') in a file of its own:
       /etc/apt/sources.list.d/slurm-energy-deb-src.sources  (from deb822 *.sources entries)
       /etc/apt/sources.list.d/slurm-energy-deb-src.list     (from one-line sources.list entries)
     It adds nothing when the source package is already reachable.
  3. Fetches the Debian source package slurm-wlm of exactly the installed slurmctld version
     ('apt-get source' applies Debian's patches) into
       \$SLURM_ENERGY_CACHE/slurm-src-<version>        (SLURM_ENERGY_CACHE defaults to
                                                      /var/cache/slurm-energy)
  4. Runs ./configure there once (no build) so that config.h and slurm/slurm_version.h exist,
     which Slurm's internal headers need.
  5. Prints SLURM_SRC_DIR=<tree> (what build.rs reads) and writes it to
     \$SLURM_ENERGY_CACHE/env, for '. \$SLURM_ENERGY_CACHE/env'.

A marker file in the tree (.slurm-energy-configured) makes later runs skip steps 2-4 once the
tree is verified complete. It touches nothing outside apt, the cache directory and the apt
source file it adds.

Environment:
  SLURM_ENERGY_CACHE   cache directory (default /var/cache/slurm-energy)
EOF
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    "") ;;
    *) usage >&2; exit 2 ;;
esac

exec </dev/null
export DEBIAN_FRONTEND=noninteractive
export LC_ALL=C

log() { echo "$prog: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages, writes an apt source file)"
# shellcheck source=tools/apt-src.sh
. "$(cd "$(dirname "$0")" && pwd)/apt-src.sh"
command -v apt-get >/dev/null || die "apt-get not found: this script supports Debian only"

CACHE=${SLURM_ENERGY_CACHE:-/var/cache/slurm-energy}
[[ $CACHE == /* ]] || die "SLURM_ENERGY_CACHE must be an absolute path (got '$CACHE')"
SRC_DEB822=/etc/apt/sources.list.d/slurm-energy-deb-src.sources
SRC_ONELINE=/etc/apt/sources.list.d/slurm-energy-deb-src.list
MARKER_NAME=.slurm-energy-configured

PACKAGES=(
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server
    libslurm-dev libmunge-dev
    clang libclang-dev build-essential pkg-config
    dpkg-dev
    expect
)

# The options of Debian's own build (debian/rules, override_dh_auto_configure, plus what
# dh_auto_configure adds) that reach config.h: install paths, multiple slurmd per host, no debug
# (NDEBUG) and the helper commands. PAM and PMIx only affect plugins we do not build.
# Changing this list re-runs configure.
configure_opts() {
    local multiarch
    multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
    CONFIGURE_OPTS=(
        --prefix=/usr
        --sysconfdir=/etc/slurm
        --localstatedir=/var
        --runstatedir=/run
        "--libdir=/usr/lib/$multiarch"
        --with-munge
        --without-rpath
        --disable-debug
        --enable-multiple-slurmd
        SUCMD=/bin/su
        SLEEP_CMD=/bin/sleep
    )
}

apt_updated=0
apt_update() {
    ((apt_updated)) && return 0
    log "apt-get update"
    # A repository that fails to answer should not stop us when the ones we need did: the
    # checks after each update decide.
    apt-get update -q >&2 || log "warning: apt-get update reported errors"
    apt_updated=1
}

# --- 1. packages ---------------------------------------------------------------------------

missing_packages() {
    local p status
    for p in "${PACKAGES[@]}"; do
        status=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
        [[ $status == installed ]] || echo "$p"
    done
}

mapfile -t missing < <(missing_packages)
if ((${#missing[@]})); then
    # Stale or absent package lists make the install fail (404, unknown package): update
    # first when apt knows no candidate, otherwise try as is and update once on failure.
    if ! grep -q 'Candidate: [0-9]' <<<"$(apt-cache policy slurmctld 2>/dev/null || true)"; then
        apt_update
    fi
    log "installing: ${missing[*]}"
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
        ((apt_updated)) && die "apt-get install failed"
        apt_update
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
fi

# The source version, not the binary one: they differ after a binary-only rebuild.
version=$(dpkg-query -W -f '${source:Version}' slurmctld)
[[ -n $version ]] || die "cannot read the installed slurmctld version"
upstream=${version#*:}
upstream=${upstream%-*}
TREE=$CACHE/slurm-src-${version#*:}
configure_opts

# --- verification of a finished tree ----------------------------------------------------------

marker_content() {
    printf 'slurm-wlm %s\nconfigure %s\n' "$version" "${CONFIGURE_OPTS[*]}"
}

tree_complete() {
    local f
    for f in configure debian/changelog config.h slurm/slurm.h slurm/slurm_version.h \
        src/slurmctld/slurmctld.h src/common/xmalloc.h; do
        [[ -s $TREE/$f ]] || return 1
    done
    # slurm_version.h must describe the installed release (22.05.8 -> 0x160508).
    local major minor micro number
    IFS=. read -r major minor micro <<<"${upstream%%[!0-9.]*}"
    number=$(printf '0x%02x%02x%02x' "$((10#$major))" "$((10#$minor))" "$((10#${micro:-0}))")
    grep -q "^#define SLURM_VERSION_NUMBER $number\$" "$TREE/slurm/slurm_version.h" || return 1
    [[ -f $TREE/$MARKER_NAME ]] && [[ $(cat "$TREE/$MARKER_NAME") == "$(marker_content)" ]]
}

if ! tree_complete; then
    # --- 2. deb-src entry --------------------------------------------------------------------

    source_available() {
        # Not a pipe into grep -q: with pipefail, apt-cache's SIGPIPE would read as "absent".
        local out
        out=$(apt-cache showsrc --only-source slurm-wlm 2>/dev/null || true)
        grep -qx "Version: $version" <<<"$out"
    }

    if ! source_available; then
        # Only the repositories that serve slurmctld (as apt-cache policy lists them): a
        # third-party repository offers no sources and would make the update fail.
        slurm_uris=$(slurm_repo_uris)
        [[ -n $slurm_uris ]] || die "no apt repository of this machine offers slurmctld"
        deb822=$(deb_src_deb822 "$SRC_DEB822" "$slurm_uris")
        oneline=$(deb_src_oneline "$SRC_ONELINE" "$slurm_uris")
        [[ -n $deb822 || -n $oneline ]] || die "no 'deb' entry in this machine's apt sources to derive a deb-src entry from"
        changed=0
        header="# Added by the slurm-energy tools/slurm-env.sh: deb-src copies of this machine's own entries."
        if [[ -n $deb822 ]]; then
            write_if_changed "$SRC_DEB822" "$header"$'\n'"${deb822%$'\n'}" && changed=1
            log "deb-src entry: $SRC_DEB822"
        fi
        if [[ -n $oneline ]]; then
            write_if_changed "$SRC_ONELINE" "$header"$'\n'"$oneline" && changed=1
            log "deb-src entry: $SRC_ONELINE"
        fi
        # Update when the entry is new, or when the lists predate it (no Sources index yet).
        if ((changed)) || ! source_available; then
            apt_update
        fi
        source_available || die "apt does not offer source package slurm-wlm $version (check the deb-src entries)"
    fi

    # --- 3. source tree ------------------------------------------------------------------------

    mkdir -p "$CACHE"
    if [[ ! -s $TREE/configure || ! -s $TREE/debian/changelog || ! -e $TREE/src/slurmctld/slurmctld.h ]]; then
        rm -rf "$TREE"
        work=$(mktemp -d "$CACHE/.fetch.XXXXXX")
        trap 'rm -rf "$work"' EXIT
        log "apt-get source slurm-wlm=$version into $TREE"
        # As root apt warns that the _apt sandbox user cannot write here; running as root is
        # fine for a download that is verified against the signed Sources index.
        (cd "$work" && apt-get source -q -o APT::Sandbox::User=root \
            --only-source "slurm-wlm=$version" >&2)
        extracted=$work/slurm-wlm-$upstream
        [[ -d $extracted ]] || die "apt-get source did not produce $extracted"
        mv "$extracted" "$TREE"
        rm -rf "$work"
        trap - EXIT
    fi
    # dpkg-source records the patches it applied (format 3.0 quilt).
    if [[ -f $TREE/debian/patches/series ]] && grep -q '^[^#[:space:]]' "$TREE/debian/patches/series"; then
        [[ -s $TREE/.pc/applied-patches ]] || die "$TREE has no applied Debian patches; remove it and rerun"
    fi

    # --- 4. configure ------------------------------------------------------------------------

    rm -f "$TREE/$MARKER_NAME"
    log "configuring $TREE (log: $TREE/.slurm-energy-configure.log)"
    if ! (cd "$TREE" && ./configure "${CONFIGURE_OPTS[@]}" >.slurm-energy-configure.log 2>&1); then
        tail -n 30 "$TREE/.slurm-energy-configure.log" >&2
        die "configure failed in $TREE"
    fi
    for f in config.h slurm/slurm_version.h; do
        [[ -s $TREE/$f ]] || die "configure did not write $TREE/$f"
    done
    marker_content >"$TREE/$MARKER_NAME"
    tree_complete || die "$TREE is incomplete after configure (slurm/slurm_version.h not $upstream?)"
fi

# --- 5. report -------------------------------------------------------------------------------

write_if_changed "$CACHE/env" "SLURM_SRC_DIR=$TREE" || true
echo "SLURM_SRC_DIR=$TREE"
