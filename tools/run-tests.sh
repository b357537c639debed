#!/usr/bin/env bash
# Runs every test of the workspace like `cargo test --workspace --no-fail-fast`, but with several
# test binaries at once: most live tests (a real local Slurm cluster each, tests/cluster) mostly
# wait, so on two cores several can run side by side (docs/testing.md).
#
#   bash tools/run-tests.sh [ARGS...]      ARGS go to every test binary (e.g. --nocapture)
#
# SLURM_ENERGY_TEST_JOBS: test binaries at once (default 3). Builds every test binary once
# (`cargo test --workspace --no-run`), then runs them longest first, each with its package dir as
# working directory and the variables cargo test gives it at run time (CARGO, CARGO_MANIFEST_DIR,
# CARGO_PKG_NAME, CARGO_CRATE_NAME). Each binary's output is printed in one block when it ends,
# then one line per binary (seconds, pass/fail) and the total. Exit status 1 if any failed.
#
# What makes side by side safe: each cluster has its own base dir, munge, MariaDB and ports, and
# ports come from a registry shared by all processes (tests/cluster/src/util.rs, free_ports).
set -uo pipefail
cd "$(dirname "$0")/.."

jobs="${SLURM_ENERGY_TEST_JOBS:-3}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run-tests: SLURM_ENERGY_TEST_JOBS=$jobs is not a positive number" >&2; exit 2; }
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# Seconds each binary took alone (22.05.8, 2 cores), to start the longest first. A binary not
# listed counts as short (10 s).
declare -A expected_s=(
    [live_slurm_regression]=546 [live_replay]=520 [live_package]=426 [live_heterogeneous]=148
    [live_release_smoke]=137 [live_gpu]=120 [live_soak]=101 [live_site_config]=85
    [live_site_mode]=79 [live_carbon_and_learning]=78 [live_priority_and_hints]=70
    [live_decision_clock]=61 [live_burst_buffer]=59 [live_crash_after_start]=55
    [live_fault_injection]=54 [live_clocks]=39 [live_restart_sched_energy]=31
)

# Binaries that run with no other test binary beside them, and why.
declare -A alone=(
    # Installs the .deb with apt-get into Debian's Slurm plugin dir, which every test cluster
    # searches after its own (PluginDir=<ours>:<stock>), and takes dpkg's lock.
    [live_package]="installs into the system's Slurm plugin dir"
)

# ---- build ----------------------------------------------------------------------------------
cargo=$(command -v cargo) || { echo "run-tests: cargo not found" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
t_build=$SECONDS
echo "run-tests: cargo test --workspace --no-run"
"$cargo" test --workspace --no-run --message-format=json-render-diagnostics >"$work/build.json" || {
    echo "run-tests: building the tests failed" >&2
    exit 1
}
echo "run-tests: built in $((SECONDS - t_build)) s"

# One line per test binary: expected seconds, label, executable, package dir, package name,
# crate name. From cargo's compiler-artifact messages of test profiles with an executable.
re_exe='"executable":"([^"]+)"'
re_test_profile='"profile":\{[^}]*"test":true'
re_manifest='"manifest_path":"([^"]+)"'
re_target='"target":\{"kind":\["([^"]+)"\][^}]*"name":"([^"]+)"'
while IFS= read -r line; do
    [[ "$line" == *'"reason":"compiler-artifact"'* && "$line" =~ $re_test_profile ]] || continue
    [[ "$line" =~ $re_exe ]] || continue
    exe=${BASH_REMATCH[1]}
    [[ "$line" =~ $re_manifest ]] || continue
    dir=$(dirname "${BASH_REMATCH[1]}")
    [[ "$line" =~ $re_target ]] || continue
    kind=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]}
    pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n 1)
    case "$kind" in
        test) label="$pkg --test $name" ;;
        lib | rlib | cdylib | staticlib | dylib | proc-macro) label="$pkg --lib" ;;
        *) label="$pkg --$kind $name" ;;
    esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "${expected_s[$name]:-10}" "$label" "$exe" "$dir" "$pkg" "${name//-/_}"
done <"$work/build.json" >"$work/binaries"
# The doc tests (cargo test runs them after the binaries): one more job, run by cargo.
printf '%s\t%s\t%s\t%s\t%s\t%s\n' 60 "workspace --doc" @doc "$PWD" "" "" >>"$work/binaries"
sort -t $'\t' -k1,1nr -k2,2 "$work/binaries" >"$work/list"
total=$(wc -l <"$work/list")
((total > 0)) || { echo "run-tests: no test binaries in cargo's output" >&2; exit 1; }
echo "run-tests: $total test binaries, $jobs at once"

# ---- run ------------------------------------------------------------------------------------
deps_dir=$(dirname "$(grep -v $'\t@doc\t' "$work/list" | head -n 1 | cut -f 3)")
declare -A pid_of_slot=() label_of=() start_of=() log_of=()
results=()
failed=0

# run_one <index> <label> <exe> <dir> <pkg> <crate> [ARGS...]: in the background.
run_one() {
    local i=$1 label=$2 exe=$3 dir=$4 pkg=$5 crate=$6
    shift 6
    log_of[$i]="$work/$i.log"
    label_of[$i]=$label
    start_of[$i]=$SECONDS
    (
        cd "$dir" || exit 101
        if [[ "$exe" == @doc ]]; then
            exec "$cargo" test --workspace --doc --no-fail-fast -- "$@"
        fi
        CARGO="$cargo" CARGO_MANIFEST_DIR="$dir" CARGO_PKG_NAME="$pkg" CARGO_CRATE_NAME="$crate" \
            LD_LIBRARY_PATH="$deps_dir:$(dirname "$deps_dir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            exec "$exe" "$@"
    ) </dev/null >"${log_of[$i]}" 2>&1 &
    pid_of_slot[$!]=$i
}

# finish <pid> <status>: prints the binary's output as one block and its result line.
finish() {
    local i=${pid_of_slot[$1]} rc=$2
    unset 'pid_of_slot[$1]'
    local s=$((SECONDS - start_of[$i])) verdict=ok
    ((rc == 0)) || { verdict="FAILED (exit $rc)"; failed=$((failed + 1)); }
    echo "==== ${label_of[$i]}: begin output"
    cat "${log_of[$i]}"
    echo "==== ${label_of[$i]}: $verdict, $s s"
    results+=("$(printf '%6d s  %-6s  %s' "$s" "${verdict%% *}" "${label_of[$i]}")")
}

wait_one() {
    local pid rc
    wait -n -p pid
    rc=$?
    finish "$pid" "$rc"
}

# First every binary that may have others beside it, longest first, `jobs` at once; then, with
# nothing else running, the ones that must run alone (at the end, so that no slot idles while
# the pool drains before each of them).
t_run=$SECONDS
i=0
while IFS=$'\t' read -r _ label exe dir pkg crate; do
    i=$((i + 1))
    [[ -z "${alone[${label##* }]:-}" ]] || continue
    while ((${#pid_of_slot[@]} >= jobs)); do wait_one; done
    run_one "$i" "$label" "$exe" "$dir" "$pkg" "$crate" "$@"
done <"$work/list"
while ((${#pid_of_slot[@]} > 0)); do wait_one; done
i=0
while IFS=$'\t' read -r _ label exe dir pkg crate; do
    i=$((i + 1))
    name=${label##* }
    [[ -n "${alone[$name]:-}" ]] || continue
    echo "run-tests: $label runs alone (${alone[$name]})"
    run_one "$i" "$label" "$exe" "$dir" "$pkg" "$crate" "$@"
    wait_one
done <"$work/list"

if ((${#results[@]} != total)); then
    echo "run-tests: only ${#results[@]} of $total test binaries ran" >&2
    failed=$((failed + 1))
fi
echo "run-tests: results (seconds, longest first)"
printf '%s\n' "${results[@]}" | sort -k1,1nr
echo "run-tests: $total test binaries, $failed failed, $((SECONDS - t_run)) s running ($jobs at once), $((SECONDS - t_build)) s with the build"
((failed == 0))
