#!/usr/bin/env bash
# Builds the AFL++ targets (cargo-afl, stable toolchain) and fuzzes each for N minutes, one
# after the other on one core, then prints each target's figures from afl's fuzzer_stats.
#
#   fuzz/run.sh [--minutes N | --seconds N] [--no-build] [target...]
#                                              (default: 10 minutes each, every target)
#
# Needs cargo-afl (installed here when missing; it builds its own AFL++ from the sources in the
# crate, nothing else is fetched) and the environment of the main build (SLURM_SRC_DIR for the
# bindings: `bash tools/slurm-env.sh` prints it). Runs on the stable toolchain. Findings stay in
# fuzz/out/<target>/default/{crashes,hangs}; the corpus afl grew in fuzz/out/<target>/default/queue.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
seconds=600
build=1
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) seconds=$(($2 * 60)); shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$here"/src/bin/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

cd "$here"
if ! cargo afl --version > /dev/null 2>&1; then
    cargo install cargo-afl --version 0.18.2 --locked
fi
# Builds AFL++ for this rustc when the install did not (an error if it is built already).
cargo afl config --build > /dev/null 2>&1 || true
if [ "$build" = 1 ]; then
    # One job: the machine is shared.
    CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo afl build --release
fi

# No CPU frequency governor or core-dump pipe to fix on a shared machine; afl would refuse to
# start over them otherwise.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
# Not a single CPU to bind to: another process may be pinned to it.
export AFL_NO_AFFINITY=1

for t in "${targets[@]}"; do
    bin="$here/target/release/$t"
    [ -x "$bin" ] || { echo "no binary $bin (build first)" >&2; exit 1; }
    out="$here/out/$t"
    rm -rf "$out"
    mkdir -p "$out"
    echo "== $t: $seconds s from $(date -u +%FT%TZ)"
    # -V: stop after this many seconds; -t: a run over 1 s is a hang.
    cargo afl fuzz -V "$seconds" -t 1000 -i "$here/corpus/$t" -o "$out" "$bin" > "$out/afl.log" 2>&1 || {
        echo "afl-fuzz failed for $t, see $out/afl.log" >&2
        tail -20 "$out/afl.log" >&2
    }
done

stat() { sed -n "s/^$2 *: *//p" "$1" | head -1; }
printf '\n%-22s %12s %9s %8s %8s %6s %6s %s\n' target execs execs/s corpus run_s crash hang afl
for t in "${targets[@]}"; do
    s="$here/out/$t/default/fuzzer_stats"
    [ -f "$s" ] || { printf '%-22s (no stats)\n' "$t"; continue; }
    run_s=$(( $(stat "$s" last_update) - $(stat "$s" start_time) ))
    printf '%-22s %12s %9s %8s %8s %6s %6s %s\n' "$t" "$(stat "$s" execs_done)" "$(stat "$s" execs_per_sec)" \
        "$(stat "$s" corpus_count)" "$run_s" "$(stat "$s" saved_crashes)" "$(stat "$s" saved_hangs)" "$(stat "$s" afl_version)"
done
