#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build and install one Slurm release other than the distribution's own from Debian's source
# package (or, where the archive serves none, from SchedMD's release tarball in
# ../shared/slurm-src, checked against its SHA256SUMS), into a prefix of its own under the
# cache, for building the bundle against it and for the live tests. Run
# `tools/slurm-release.sh --help` for details.
set -euo pipefail

prog=${0##*/}

usage() {
    cat <<EOF
Usage: $prog [--help] [--full] RELEASE

RELEASE is an upstream Slurm release that Debian carries as source package slurm-wlm in a
suite newer than this machine's (24.11.5: trixie; 26.05.5: forky, sid), or one whose SchedMD
release tarball slurm-RELEASE.tar.xz is listed in \$SLURM_ENERGY_SLURM_SOURCES/SHA256SUMS
(25.11.7, 26.05.3), or the release this machine's own slurmctld package is (22.05.8 on
Debian 12), for which tools/slurm-env.sh does the work and the install is the system's
(prefix /usr).

Must run as root on Debian. For a newer release:

  1. Installs (apt-get, --no-install-recommends) what the build needs from this machine's own
     suites: build-essential, pkg-config, dpkg-dev, libmunge-dev, default-libmysqlclient-dev,
     and munge and mariadb-server to run it.
  2. Adds deb-src entries for the suites $SUITES_DEFAULT, derived from this machine's
     own apt entries that serve slurmctld (same URIs, components and keyring; other Suites), in
       /etc/apt/sources.list.d/slurm-energy-releases.sources  (deb822 entries)
       /etc/apt/sources.list.d/slurm-energy-releases.list     (one-line entries)
     and pins those suites to priority -1 in /etc/apt/preferences.d/slurm-energy-releases, so
     that apt never installs a binary package from them: they serve sources only. 'apt-get
     update' then reads only these entries.
  3. Fetches slurm-wlm of that upstream release ('apt-get source', Debian's patches applied) into
       \$SLURM_ENERGY_CACHE/slurm-RELEASE/src
     If the archive serves only the upstream tarball of it, that alone (without Debian's
     patches). If the archive serves no source of it at all, SchedMD's release tarball
       \$SLURM_ENERGY_SLURM_SOURCES/slurm-RELEASE.tar.xz
     after checking it against the SHA256SUMS file there (a mismatch or a missing entry stops
     the script). A tree without Debian's patches is configured with CPPFLAGS=-DHAVE_NVML (what
     Debian's force-nvml patch does). Which source was used is logged on every run and recorded
     in the marker file.
  4. Configures it with this machine's compilers and libraries, without the optional parts the
     bundle does not use (see OPTIONAL below; from 26.05 on without the --without-lz4 option,
     which 26.05.3's configure fails on), builds it (nice, make -j\$(nproc)) and installs
     it into
       \$SLURM_ENERGY_CACHE/slurm-RELEASE/prefix
     (no system file is touched; run the daemons with their own configuration paths).
     By default only the parts the bundle and its tests start are built and installed (see
     PARTIAL BUILD below); --full builds and installs everything configure enabled.
  5. Prints SLURM_SRC_DIR=<src> (the configured tree build.rs reads) and
     SLURM_ENERGY_SLURM_PREFIX=<prefix> (the install the live tests use) and writes both to
     \$SLURM_ENERGY_CACHE/slurm-RELEASE/env.

A marker file (prefix/.slurm-energy-built) holding the source version and the configure options
makes a second run check and stop: it is fast. Changing the options rebuilds. A full build
satisfies a later run without --full; a partial one is completed by a run with --full.

PARTIAL BUILD (the default; a full make takes 6 to 20 minutes per release on two cores):
  libraries   src/{common,conmgr,interfaces,bcast,curl,database,stepmgr,api} (libslurm,
              libslurmfull, libslurm_pmi; no static archives: libtool --tag=disable-static)
  daemons     slurmctld (slurmscriptd is a fork of it), slurmd, slurmstepd, slurmdbd
  commands    $COMMANDS_DOC
  plugins     $PLUGINS_DOC
              (with each type's common/ helper; a plugin this configure does not enable,
              i.e. one its type's configured Makefile leaves out of SUBDIRS, is skipped)
  headers     prefix/include/slurm
The plugins are the ones the tests' slurm.conf, slurmdbd.conf and gres.conf name plus those the
daemons load without being told (seen in the maps of running 25.11.7 daemons: mpi/*, cgroup/v1,
prep/script, tls/none, serializer/url-encoded, topology/flat, accounting_storage/ctld_relay,
hash/k12; from 26.05 every command's slurm_init() loads certgen/script). Left out: sackd,
sattach, sbcast, sreport, scrun, swait, the static archives, the data_parser plugins (--json
and --yaml output), man pages, and the plugin types nothing configures (stock acct_gather_*,
burst_buffer, stock cli_filter, gpu/nvidia and gpu/nrt, job_container, job_submit, jobcomp,
mcs, metrics, namespace, node_features, preempt, site_factor, switch, task).

OPTIONAL parts left out (each needs a library bookworm lacks at the required version or that the
bundle never uses): slurmrestd and its HTTP/JSON/YAML/JWT stack, PMIx, UCX, HDF5 profiling,
RRD, IPMI, Lua, AMD/Intel/NVIDIA GPU libraries (the bundle brings its own gpu/nvml), eBPF
device constraints, PAM, X11 forwarding, the GTK sview. With these left out every plugin the
bundle and its tests use is built.

Environment:
  SLURM_ENERGY_CACHE   cache directory (default /var/cache/slurm-energy)
  SLURM_ENERGY_SUITES  suites to derive deb-src entries for (default: $SUITES_DEFAULT)
  SLURM_ENERGY_SLURM_SOURCES
                       directory of SchedMD release tarballs and their SHA256SUMS (default:
                       ../shared/slurm-src beside the project)
EOF
}

SUITES_DEFAULT="trixie forky sid"

# What a partial build makes, as directories of the configured tree's src/ (a directory a release
# lacks is skipped). The libraries in link order: libslurm and libslurmfull (src/api) take in
# the convenience libraries before them.
LIB_DIRS=(common conmgr interfaces bcast curl database stepmgr api)
DAEMON_DIRS=(slurmctld slurmd slurmdbd)
# The commands the bundle (its job hints, tools/ soak, demo, report) and the tests run, and the
# ones a user of the test clusters reaches for (sprio, sshare, sstat, strigger, scrontab).
COMMANDS=(sacct sacctmgr salloc sbatch scancel scontrol scrontab sdiag sinfo sprio squeue srun sshare sstat strigger)
# Plugin directories under src/plugins: named in the tests' configurations (select/cons_tres and
# linear, sched/backfill, priority/basic, proctrack/linuxproc, auth and cred munge,
# jobacct_gather/linux, accounting_storage/slurmdbd and mysql, topology/tree, gres/gpu and shard
# with gpu/generic for AutoDetect=off), loaded without being named (see --help; from 26.05 every
# command's slurm_init() loads certgen/script), and their cheap siblings in the same types.
PLUGINS=(
    accounting_storage/ctld_relay accounting_storage/mysql accounting_storage/slurmdbd
    auth/munge certgen/script certmgr/script cgroup/v1 cgroup/v2 compress/lz4 compress/none
    cred/munge gpu/generic gres/gpu gres/mps gres/nic gres/shard hash/k12 hash/sha3 http_auth/local
    jobacct_gather/cgroup jobacct_gather/linux mpi/cray_shasta mpi/pmi2 mpi/pmix
    prep/script priority/basic priority/multifactor proctrack/cgroup proctrack/linuxproc
    proctrack/pgid sched/backfill sched/builtin select/cons_tres select/linear
    serializer/url-encoded tls/none topology/default topology/flat topology/tree
    url_parser/internal
)
# Convenience libraries some of those link (built beside the libraries, before the plugins).
PLUGIN_HELPERS=(
    accounting_storage/common cgroup/common cred/common gpu/common gres/common hash/common_xkcp
    jobacct_gather/common topology/common
)
COMMANDS_DOC=$(fold -s -w 64 <<<"${COMMANDS[*]}" | sed '2,$s/^/              /')
PLUGINS_DOC=$(fold -s -w 64 <<<"${PLUGINS[*]}" | sed '2,$s/^/              /')

release=
full=0
while [[ $# -gt 0 ]]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --full) full=1 ;;
        [0-9]*.[0-9]*.[0-9]*) [[ -z $release ]] || { usage >&2; exit 2; }; release=$1 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done
[[ -n $release ]] || { usage >&2; exit 2; }
[[ $release =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { usage >&2; exit 2; }

exec </dev/null
export DEBIAN_FRONTEND=noninteractive
export LC_ALL=C

log() { echo "$prog: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages, writes apt source files)"
command -v apt-get >/dev/null || die "apt-get not found: this script supports Debian only"

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/apt-src.sh
. "$here/apt-src.sh"
CACHE=${SLURM_ENERGY_CACHE:-/var/cache/slurm-energy}
[[ $CACHE == /* ]] || die "SLURM_ENERGY_CACHE must be an absolute path (got '$CACHE')"
UPSTREAM_DIR=${SLURM_ENERGY_SLURM_SOURCES:-$here/../../shared/slurm-src}
[[ -d $UPSTREAM_DIR ]] && UPSTREAM_DIR=$(cd "$UPSTREAM_DIR" && pwd)
read -r -a SUITES <<<"${SLURM_ENERGY_SUITES:-$SUITES_DEFAULT}"

# --- the distribution's own release: tools/slurm-env.sh ------------------------------------------

system_upstream() {
    local v
    v=$(dpkg-query -W -f '${source:Version}' slurmctld 2>/dev/null || true)
    v=${v#*:}
    echo "${v%-*}"
}

if [[ $(system_upstream) == "$release" ]] || {
    [[ -z $(system_upstream) ]] && grep -qx "Version: [0-9:]*$release-[^ ]*" \
        <<<"$(apt-cache show slurmctld 2>/dev/null || true)"
}; then
    line=$(bash "$here/slurm-env.sh" | grep '^SLURM_SRC_DIR=' | tail -n 1)
    [[ -n $line ]] || die "tools/slurm-env.sh printed no SLURM_SRC_DIR"
    echo "$line"
    echo "SLURM_ENERGY_SLURM_PREFIX=/usr"
    exit 0
fi

BASE=$CACHE/slurm-$release
TREE=$BASE/src
PREFIX=$BASE/prefix
MARKER=$PREFIX/.slurm-energy-built
SRC_DEB822=/etc/apt/sources.list.d/slurm-energy-releases.sources
SRC_ONELINE=/etc/apt/sources.list.d/slurm-energy-releases.list
PIN_FILE=/etc/apt/preferences.d/slurm-energy-releases

PACKAGES=(
    build-essential pkg-config dpkg-dev
    libmunge-dev default-libmysqlclient-dev
    munge mariadb-server
)

# Everything the bundle needs is built; the rest is left out explicitly, so that the result does
# not depend on which optional -dev packages happen to be installed. An option a release does not
# know is only a configure warning.
CONFIGURE_OPTS=(
    "--prefix=$PREFIX"
    "--sysconfdir=$PREFIX/etc"
    --with-munge
    --with-mysql_config=/usr/bin
    --enable-multiple-slurmd
    --disable-debug
    --disable-slurmrestd
    --disable-pam
    --disable-x11
    --disable-sview
    --without-pmix
    --without-ucx
    --without-hdf5
    --without-rrdtool
    --without-freeipmi
    --without-lua
    --without-jwt
    --without-json
    --without-yaml
    --without-http-parser
    --without-libcurl
    --without-nvml
    --without-rsmi
    --without-oneapi
    --without-bpf
    --without-dbus
    --without-hwloc
    --without-lz4
    --without-s2n
    CFLAGS=-O2
)
# Per-release differences. 26.05 (26.05.3 checked): configure stops with "conditional BUILD_LZ4
# was never defined" when given --without-lz4, so that option is left out there.
IFS=. read -r rel_major rel_minor _ <<<"$release"
if ((10#$rel_major * 100 + 10#$rel_minor >= 2605)); then
    opts=()
    for o in "${CONFIGURE_OPTS[@]}"; do [[ $o == --without-lz4 ]] || opts+=("$o"); done
    CONFIGURE_OPTS=("${opts[@]}")
fi
# Added for a tree without Debian's patches (see step 3).
ORIG_OPTS=(CPPFLAGS=-DHAVE_NVML)

# The source a tree comes from: "debian" (apt-get source), "orig" (the archive's upstream tarball
# alone) or "upstream" (SchedMD's tarball from $UPSTREAM_DIR). The version is Debian's
# (1.2.3-1) for the first two, "RELEASE sha256:HASH" of the tarball for the third.
marker_content() { # version, tree kind (a tree without Debian's patches adds ORIG_OPTS)
    local opts=("${CONFIGURE_OPTS[@]}") what=slurm-wlm
    [[ $2 == orig || $2 == upstream ]] && opts+=("${ORIG_OPTS[@]}")
    [[ $2 == upstream ]] && what=slurm
    printf '%s %s\ntree %s\nconfigure %s\n' "$what" "$1" "$2" "${opts[*]}"
}
# The marker's last line for a partial build (a full build has none).
PARTIAL_LINE="build partial (tools/slurm-release.sh --help: PARTIAL BUILD)"

# Says which source the tree came from (stderr: stdout is the two variables only).
log_source() { # version, tree kind
    case $2 in
        debian) log "source: Debian's source package slurm-wlm $1 (Debian's patches applied)" ;;
        orig) log "source: the upstream tarball of Debian's slurm-wlm $1 (the archive serves no Debian diff for it: without Debian's patches)" ;;
        upstream) log "source: SchedMD's release tarball $UPSTREAM_DIR/slurm-$release.tar.xz (${1#* }, checked against SHA256SUMS; the archive serves no source of $release: without Debian's patches)" ;;
    esac
}

# The SHA256SUMS entry of SchedMD's tarball of this release, or nothing.
upstream_sum() {
    [[ -f $UPSTREAM_DIR/SHA256SUMS && -f $UPSTREAM_DIR/slurm-$release.tar.xz ]] || return 0
    awk -v f="slurm-$release.tar.xz" '($2 == f || $2 == "*" f) && $1 ~ /^[0-9a-f]{64}$/ { print $1; exit }' "$UPSTREAM_DIR/SHA256SUMS"
}

installed_ok() {
    [[ -f $MARKER && -x $PREFIX/sbin/slurmctld && -x $PREFIX/sbin/slurmd && -x $PREFIX/sbin/slurmdbd \
        && -x $PREFIX/bin/sbatch && -s $TREE/config.h && -s $TREE/slurm/slurm_version.h ]] || return 1
    local version kind
    version=$(sed -n -e 's/^slurm-wlm //p' -e 's/^slurm //p' "$MARKER" | head -n 1)
    kind=$(sed -n 's/^tree //p' "$MARKER")
    [[ -n $version && $(head -n 3 "$MARKER") == "$(marker_content "$version" "$kind")" ]] || return 1
    # A partial build does for a run without --full; the marker has no other lines.
    local rest
    rest=$(tail -n +4 "$MARKER")
    [[ -z $rest || ($rest == "$PARTIAL_LINE" && $full -eq 0) ]] || return 1
    # SchedMD's tarball: still the one SHA256SUMS names (a new tarball rebuilds).
    if [[ $kind == upstream ]] && [[ -n $(upstream_sum) ]]; then
        [[ $version == "$release sha256:$(upstream_sum)" ]] || return 1
    fi
    [[ -f $PREFIX/lib/slurm/accounting_storage_mysql.so && -f $PREFIX/lib/slurm/auth_munge.so ]] || return 1
    log_source "$version" "$kind"
}

report() {
    local content
    content=$(printf 'SLURM_SRC_DIR=%s\nSLURM_ENERGY_SLURM_PREFIX=%s' "$TREE" "$PREFIX")
    if [[ ! -f $BASE/env ]] || [[ $(cat "$BASE/env") != "$content" ]]; then
        printf '%s\n' "$content" >"$BASE/env"
    fi
    printf '%s\n' "$content"
}

if installed_ok; then
    report
    exit 0
fi

# --- 1. packages ---------------------------------------------------------------------------------

apt_updated=0
apt_update() { # [apt options...]: the system's lists, once
    ((apt_updated)) && return 0
    log "apt-get update"
    apt-get update -q >&2 || log "warning: apt-get update reported errors"
    apt_updated=1
}

missing=()
for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
        apt_update
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
fi

# --- 2. deb-src entries for the newer suites, pinned away ------------------------------------------

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || die "cannot read this machine's release codename from /etc/os-release"

# The repositories that serve slurmctld (as apt-cache policy lists them); an entry is copied when
# it names one of them with this machine's own codename as a suite (the main archive, not
# -updates or -security, which have no counterpart under the other suites' names).
slurm_uris=$(slurm_repo_uris)
[[ -n $slurm_uris ]] || die "no apt repository of this machine offers slurmctld"
deb822=$(deb_src_deb822 "$SRC_DEB822" "$slurm_uris" "$codename" "${SUITES[*]}")
oneline=$(deb_src_oneline "$SRC_ONELINE" "$slurm_uris" "$codename" "${SUITES[*]}")
[[ -n $deb822 || -n $oneline ]] || die "no 'deb' entry for suite $codename in this machine's apt sources to derive deb-src entries from"
header="# Added by the slurm-energy tools/slurm-release.sh: sources only (see $PIN_FILE)."$'\n'"# Copies of this machine's own entries with other suites."
changed=0
if [[ -n $deb822 ]]; then
    write_if_changed "$SRC_DEB822" "$header"$'\n'"${deb822%$'\n'}" && changed=1
    log "deb-src entries: $SRC_DEB822"
fi
if [[ -n $oneline ]]; then
    write_if_changed "$SRC_ONELINE" "$header"$'\n'"$oneline" && changed=1
    log "deb-src entries: $SRC_ONELINE"
fi
pins="# Added by the slurm-energy tools/slurm-release.sh: these suites serve source packages only."
for s in "${SUITES[@]}"; do
    pins+=$'\n\n'"Package: *"$'\n'"Pin: release n=$s"$'\n'"Pin-Priority: -1"
done
write_if_changed "$PIN_FILE" "$pins" || true

# The Debian version of slurm-wlm whose upstream part is $release, from the Sources indexes.
debian_version() {
    apt-cache showsrc --only-source slurm-wlm 2>/dev/null |
        awk -v rel="$release" '/^Version: / { v = $2; u = v; sub(/^[0-9]+:/, "", u); sub(/-[^-]*$/, "", u); if (u == rel) print v }' |
        sort -V | tail -n 1
}

version=$(debian_version)
if [[ -z $version ]] || ((changed)); then
    # Only our entries: the machine's other lists stay as they are, and a slow or broken third
    # party repository does not matter.
    update_opts=(-o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0)
    [[ -f $SRC_DEB822 ]] && update_opts+=(-o "Dir::Etc::sourcelist=$SRC_DEB822")
    [[ -f $SRC_ONELINE && ! -f $SRC_DEB822 ]] && update_opts+=(-o "Dir::Etc::sourcelist=$SRC_ONELINE")
    log "apt-get update (the deb-src entries for ${SUITES[*]} only)"
    apt-get update -q "${update_opts[@]}" >&2 || log "warning: apt-get update reported errors"
    version=$(debian_version)
fi
if [[ -n $version ]]; then
    log "slurm-wlm $version"
elif [[ -n $(upstream_sum) ]]; then
    log "no suite of ${SUITES[*]} offers source package slurm-wlm $release: using SchedMD's tarball in $UPSTREAM_DIR"
else
    die "no suite of ${SUITES[*]} offers source package slurm-wlm $release, and $UPSTREAM_DIR has no slurm-$release.tar.xz listed in its SHA256SUMS"
fi

# --- 3. source tree -------------------------------------------------------------------------------

# What the tree is: "debian" (apt-get source, Debian's patches applied) or "orig" (the upstream
# tarball alone, when the archive serves the .orig.tar but not the .dsc or the Debian diff;
# apt still checks it against the signed Sources index). Recorded in the marker.
tree_kind() {
    if [[ -s $TREE/.pc/applied-patches || -f $TREE/debian/source/format ]] && [[ -f $TREE/.slurm-energy-debian ]]; then
        echo debian
    elif [[ -f $TREE/.slurm-energy-orig ]] && [[ $(cat "$TREE/.slurm-energy-orig") == "$version" ]]; then
        echo orig
    elif [[ -f $TREE/.slurm-energy-upstream ]] && [[ -z $version ]] && [[ $(cat "$TREE/.slurm-energy-upstream") == "$release sha256:$(upstream_sum)" ]]; then
        echo upstream
    fi
}

# SchedMD's tarball: copied, checked against SHA256SUMS (the copy, so that what is checked is
# what is unpacked), unpacked; prints the top directory. $1: the work directory.
fetch_upstream() {
    local work=$1 sum file=slurm-$release.tar.xz tops
    sum=$(upstream_sum)
    [[ -n $sum ]] || die "$UPSTREAM_DIR/SHA256SUMS lists no checksum of $file"
    cp "$UPSTREAM_DIR/$file" "$work/$file"
    (cd "$work" && printf '%s  %s\n' "$sum" "$file" | sha256sum -c --status) ||
        die "$UPSTREAM_DIR/$file does not match its SHA256SUMS entry ($sum): not used"
    log "$UPSTREAM_DIR/$file: sha256 $sum matches SHA256SUMS"
    mkdir "$work/x"
    tar -xf "$work/$file" -C "$work/x"
    mapfile -t tops < <(find "$work/x" -mindepth 1 -maxdepth 1)
    [[ ${#tops[@]} -eq 1 && -d ${tops[0]} ]] || die "$file does not hold exactly one top directory"
    [[ -x ${tops[0]}/configure ]] || die "$file has no configure script"
    printf '%s\n' "$release sha256:$sum" >"${tops[0]}/.slurm-energy-upstream"
    echo "${tops[0]}"
}

mkdir -p "$BASE"
if [[ ! -s $TREE/configure || -z $(tree_kind) ]] ||
    { [[ $(tree_kind) == debian ]] && [[ $(dpkg-parsechangelog -l "$TREE/debian/changelog" -S Version 2>/dev/null || true) != "$version" ]]; }; then
    rm -rf "$TREE" "$PREFIX"
    work=$(mktemp -d "$BASE/.fetch.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # As root apt warns that its sandbox user cannot write here; a download is verified against
    # the signed Sources index either way.
    extracted=
    if [[ -n $version ]]; then
        log "apt-get source slurm-wlm=$version into $TREE"
        if (cd "$work" && apt-get source -q -o APT::Sandbox::User=root --only-source "slurm-wlm=$version" >"$work/apt.log" 2>&1); then
            extracted=$work/slurm-wlm-$release
            [[ -d $extracted ]] || die "apt-get source did not produce $extracted"
            touch "$extracted/.slurm-energy-debian"
        else
            sed 's/^/  /' "$work/apt.log" | grep -E '^  (Err|E):' >&2 || true
            log "warning: the archive does not serve all of slurm-wlm $version; trying the upstream tarball alone (without Debian's patches)"
            rm -rf "${work:?}"/*
            if (cd "$work" && apt-get source -q --download-only --tar-only -o APT::Sandbox::User=root \
                --only-source "slurm-wlm=$version" >"$work/apt.log" 2>&1); then
                orig=$(compgen -G "$work/slurm-wlm_$release.orig.tar.*" | head -n 1)
                [[ -n $orig ]] || die "apt-get source --tar-only produced no slurm-wlm_$release.orig.tar.*"
                mkdir "$work/x"
                tar -xf "$orig" -C "$work/x"
                mapfile -t tops < <(find "$work/x" -mindepth 1 -maxdepth 1)
                [[ ${#tops[@]} -eq 1 && -d ${tops[0]} ]] || die "$orig does not hold exactly one top directory"
                extracted=${tops[0]}
                printf '%s\n' "$version" >"$extracted/.slurm-energy-orig"
            else
                sed 's/^/  /' "$work/apt.log" | grep -E '^  (Err|E):' >&2 || true
                if [[ -z $(upstream_sum) ]]; then
                    rm -rf "$work"
                    trap - EXIT
                    rmdir "$BASE" 2>/dev/null || true
                    die "the archive serves no source of slurm-wlm $version (not even slurm-wlm_$release.orig.tar.*), and $UPSTREAM_DIR has no slurm-$release.tar.xz listed in its SHA256SUMS"
                fi
                log "the archive serves no source of slurm-wlm $version (not even slurm-wlm_$release.orig.tar.*): using SchedMD's tarball in $UPSTREAM_DIR"
                rm -rf "${work:?}"/*
                version=
            fi
        fi
    fi
    if [[ -z $version ]]; then
        log "SchedMD's slurm-$release.tar.xz into $TREE"
        extracted=$(fetch_upstream "$work")
    fi
    mv "$extracted" "$TREE"
    rm -rf "$work"
    trap - EXIT
fi
kind=$(tree_kind)
[[ -n $kind ]] || die "$TREE is not a tree this script fetched; remove it and rerun"
[[ $kind == upstream ]] && version="$release sha256:$(upstream_sum)"
log_source "$version" "$kind"
if [[ $kind == debian && -f $TREE/debian/patches/series ]] && grep -q '^[^#[:space:]]' "$TREE/debian/patches/series"; then
    [[ -s $TREE/.pc/applied-patches ]] || die "$TREE has no applied Debian patches; remove it and rerun"
fi
# Debian's patch force-nvml drops the build-time guard around gpu/nvml autodetection in
# src/interfaces/gpu.c (HAVE_NVML is read nowhere else), so that gres.conf AutoDetect=nvml loads
# a gpu_nvml.so whenever libnvidia-ml.so can be opened. Without Debian's patches the same comes
# from defining HAVE_NVML for the build; --without-nvml still keeps Slurm's own gpu/nvml plugin
# (which would need NVIDIA's headers) out, and the bundle's gpu_nvml.so takes its place.
extra_opts=()
if [[ $kind == orig || $kind == upstream ]]; then
    # The macro itself (-w: 26.05's gpu/nvml plugin reads HAVE_NVML_MEMORY_CLOCK, another one).
    nvml_users=$(grep -rlw --include='*.c' --include='*.h' 'HAVE_NVML' "$TREE/src" | sed "s|^$TREE/||" | sort | tr '\n' ' ')
    [[ $nvml_users == "src/interfaces/gpu.c " || $nvml_users == "src/common/gpu.c " ]] ||
        die "HAVE_NVML is read in more than gpu.c in $release ($nvml_users): check what defining it changes"
    extra_opts=("${ORIG_OPTS[@]}")
fi

# --- 4. configure, build, install -------------------------------------------------------------------

rm -f "$MARKER"
jobs=$(nproc 2>/dev/null || echo 2)
started=$SECONDS
log "configuring $TREE (log: $BASE/configure.log)"
if ! (cd "$TREE" && nice -n 10 ./configure "${CONFIGURE_OPTS[@]}" "${extra_opts[@]}" >"$BASE/configure.log" 2>&1); then
    tail -n 30 "$BASE/configure.log" >&2
    die "configure failed in $TREE"
fi
grep -q '^#define HAVE_MYSQL 1' "$TREE/config.h" || die "configure found no MySQL client library (default-libmysqlclient-dev)"
grep -Eq '^MUNGE *= *auth_munge.la' "$TREE/src/plugins/auth/munge/Makefile" || die "configure found no munge (libmunge-dev)"
# The SUBDIRS of a directory of the configured tree as its Makefile resolved them (configure
# drops what it does not enable there, e.g. cgroup/v2 without dbus: its own Makefile would still
# try to build it).
declare -A subdirs_cache
subdirs_of() { # directory under $TREE
    if [[ -z ${subdirs_cache[$1]+set} ]]; then
        printf 'slurm-energy-print-subdirs:\n\t@echo $(SUBDIRS)\n' >"$BASE/subdirs.mk"
        subdirs_cache[$1]=" $(make -s --no-print-directory -C "$TREE/$1" -f Makefile -f "$BASE/subdirs.mk" \
            slurm-energy-print-subdirs 2>/dev/null || true) "
    fi
    echo "${subdirs_cache[$1]}"
}

# The directories of src/ (under $TREE/src), of those given, that this configured tree builds:
# each listed in its parent's SUBDIRS, up to src/.
present() {
    local d path parent name ok
    for d in "$@"; do
        path=src/$d ok=1
        [[ -f $TREE/$path/Makefile ]] || continue
        while [[ $path == */* && $path != src ]]; do
            parent=${path%/*} name=${path##*/}
            [[ $(subdirs_of "$parent") == *" $name "* ]] || { ok=0; break; }
            path=$parent
        done
        ((ok)) && echo "$d"
    done
    return 0
}

# A partial build's plan as a makefile, so that one jobserver spreads the work over the cores
# across directories: the convenience libraries and the plugins' helpers side by side, then
# src/api (libslurm, libslurmfull: they take the libraries in), then the daemons, commands and
# plugins side by side. A later directory's own rules that make an earlier library find it
# already built.
partial_makefile() {
    local d all=("${leaves[@]}")
    printf '# Generated by tools/slurm-release.sh (partial build).\n.PHONY: all %s\nall: %s\n' \
        "${libs[*]} ${helpers[*]} ${leaves[*]}" "${all[*]}"
    for d in "${libs[@]}"; do
        if [[ $d == api ]]; then
            printf 'api: %s\n' "$(printf '%s ' "${libs[@]}" | sed 's/\bapi\b//')"
        else
            printf '%s:\n' "$d"
        fi
        printf '\t+$(MAKE) -C %s\n' "$TREE/src/$d"
    done
    for d in "${helpers[@]}"; do printf '%s:\n\t+$(MAKE) -C %s\n' "$d" "$TREE/src/$d"; done
    for d in "${leaves[@]}"; do
        printf '%s: %s\n\t+$(MAKE) -C %s\n' "$d" "${libs[*]} ${helpers[*]}" "$TREE/src/$d"
    done
}

if ((full)); then
    # A tree a partial build left (objects without their static twins) starts again from clean.
    if [[ -f $TREE/.slurm-energy-partial ]]; then
        log "the tree was built partially before: make clean"
        (cd "$TREE" && make clean >"$BASE/clean.log" 2>&1) || die "make clean failed in $TREE (see $BASE/clean.log)"
        rm -f "$TREE/.slurm-energy-partial"
    fi
    log "building everything (--full; make -j$jobs, log: $BASE/make.log)"
    if ! (cd "$TREE" && nice -n 10 make -j"$jobs" >"$BASE/make.log" 2>&1); then
        tail -n 40 "$BASE/make.log" >&2
        die "make failed in $TREE"
    fi
    built_at=$SECONDS
    log "installing into $PREFIX"
    rm -rf "$PREFIX"
    if ! (cd "$TREE" && nice -n 10 make install >"$BASE/install.log" 2>&1); then
        tail -n 40 "$BASE/install.log" >&2
        die "make install failed in $TREE"
    fi
else
    mapfile -t libs < <(present "${LIB_DIRS[@]}")
    mapfile -t helpers < <(present "${PLUGIN_HELPERS[@]/#/plugins/}")
    mapfile -t leaves < <(present "${DAEMON_DIRS[@]}" "${COMMANDS[@]}" "${PLUGINS[@]/#/plugins/}")
    [[ " ${libs[*]} " == *" common "* && " ${libs[*]} " == *" api "* ]] || die "$TREE/src has no common/ or api/ Makefile"
    plugins_present=0
    for d in "${leaves[@]}"; do [[ $d == plugins/* ]] && ((++plugins_present)); done
    log "building the parts the bundle and its tests use (make -j$jobs in ${#libs[@]} library, ${#helpers[@]} helper and ${#leaves[@]} other directories: the daemons, $((${#leaves[@]} - ${#DAEMON_DIRS[@]} - plugins_present)) commands, $plugins_present plugins; --full builds everything; log: $BASE/make.log)"
    partial_makefile >"$BASE/partial.mk"
    touch "$TREE/.slurm-energy-partial"
    # Without static archives (nothing uses them): libtool compiles each object once, not twice.
    if ! (cd "$TREE" && nice -n 10 make -j"$jobs" -f "$BASE/partial.mk" LIBTOOLFLAGS=--tag=disable-static \
        >"$BASE/make.log" 2>&1); then
        tail -n 40 "$BASE/make.log" >&2
        die "make failed in $TREE (plan: $BASE/partial.mk)"
    fi
    built_at=$SECONDS
    log "installing into $PREFIX"
    rm -rf "$PREFIX"
    : >"$BASE/install.log"
    for d in "${libs[@]}" "${leaves[@]}"; do
        if ! (cd "$TREE/src/$d" && nice -n 10 make install LIBTOOLFLAGS=--tag=disable-static >>"$BASE/install.log" 2>&1); then
            tail -n 40 "$BASE/install.log" >&2
            die "make install failed in $TREE/src/$d"
        fi
    done
    if ! (cd "$TREE" && make install-pkgincludeHEADERS >>"$BASE/install.log" 2>&1); then
        tail -n 40 "$BASE/install.log" >&2
        die "installing the headers failed in $TREE"
    fi
fi
marker_content "$version" "$kind" >"$MARKER"
((full)) || echo "$PARTIAL_LINE" >>"$MARKER"
installed_ok || die "$PREFIX is incomplete after make install (see $BASE/install.log)"
objects=$(find "$TREE/src" -name '*.o' | wc -l)
shared=$(find "$PREFIX/lib/slurm" -maxdepth 1 -name '*.so' | wc -l)
programs=$(find "$PREFIX/bin" "$PREFIX/sbin" -maxdepth 1 -type f -perm -u+x | wc -l)
log "$( ((full)) && echo built everything || echo built the partial set): $objects objects in the tree; installed $programs programs, $shared shared objects in lib/slurm"
log "built in $((built_at - started)) s (configure included), installed in $((SECONDS - built_at)) s"
report
