#!/usr/bin/env bash
# README command 2: set up and build, run every Meson test (unit and MPI) once, then the
# sanitizer builds (scripts/sanitizer_builds.sh: ASan+UBSan and TSan, their 'sanitize' suite), and
# print as the final line "N passed, N failed, N skipped" summed over the testlog.json of every
# build directory (a sanitizer build that does not compile counts as one failed test).
# Exit status: non-zero if a test failed, a build failed, or no test ran.
# Environment: BUILD_DIR (default build); MESON_TEST_ARGS (extra `meson test` options, e.g.
# "--suite mpi"); MPI_TESTS_COLL=tuned runs the MPI tests against plain Open MPI as a baseline;
# SKIP_SANITIZERS=1 skips the sanitizer builds (quick local runs; CI runs them);
# SKIP_STACKS=1 skips the other MPI stacks (scripts/stacks/: MPICH with the PMPI library, Open
# MPI 5.0 in a Debian 13 chroot), which otherwise run their 'portable' suite after the rest.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
build=${BUILD_DIR:-build}
log=$build/meson-logs/testlog.json

if ! bash scripts/setup.sh; then
    echo "run_tests.sh: setup/build failed" >&2
    echo "0 passed, 0 failed, 0 skipped"
    exit 1
fi

rm -f "$log"
# shellcheck disable=SC2086 # MESON_TEST_ARGS is a list of options
meson test -C "$build" --print-errorlogs ${MESON_TEST_ARGS:-}
test_rc=$?

if [[ ! -f $log ]]; then
    echo "run_tests.sh: $log not written" >&2
    echo "0 passed, 0 failed, 0 skipped"
    exit 1
fi

logs=("$log")
san_failed=0
if [[ ${SKIP_SANITIZERS:-0} != 1 ]]; then
    bash scripts/sanitizer_builds.sh asan tsan || test_rc=1
    for d in build-asan build-tsan; do
        if [[ -f $d/meson-logs/testlog.json ]]; then
            logs+=("$d/meson-logs/testlog.json")
        else
            echo "run_tests.sh: $d: no test log (build failed)" >&2
            san_failed=$((san_failed + 1))
        fi
    done
fi

if [[ ${SKIP_STACKS:-0} != 1 ]]; then
    for stack in mpich ompi5; do
        script=scripts/stacks/$stack.sh
        [[ -f $script ]] || continue
        rm -f "build-$stack/meson-logs/testlog.json"
        BUILD_DIR=build-$stack bash "$script" || test_rc=1
        if [[ -f build-$stack/meson-logs/testlog.json ]]; then
            logs+=("build-$stack/meson-logs/testlog.json")
        else
            echo "run_tests.sh: stack $stack: no test log (set-up or build failed)" >&2
            san_failed=$((san_failed + 1))
        fi
    done
fi

# One JSON object per line; its "result" is OK, EXPECTEDFAIL, SKIP, FAIL, TIMEOUT, ERROR or
# UNEXPECTEDPASS. Plain POSIX awk (mawk or gawk).
summary=$(awk '
    match($0, /"result": *"[A-Z]+"/) {
        r = substr($0, RSTART, RLENGTH)
        sub(/^"result": *"/, "", r)
        sub(/"$/, "", r)
        if (r == "OK" || r == "EXPECTEDFAIL") pass++
        else if (r == "SKIP") skip++
        else { fail++; print "run_tests.sh: " r ": " name_of($0) > "/dev/stderr" }
    }
    function name_of(s,   t) {
        match(s, /"name": *"[^"]*"/)
        t = substr(s, RSTART, RLENGTH)
        sub(/^"name": *"/, "", t)
        sub(/"$/, "", t)
        return t
    }
    END { printf "%d %d %d\n", pass, fail, skip }' "${logs[@]}")
read -r passed failed skipped <<<"$summary"
failed=$((failed + san_failed))

echo "$passed passed, $failed failed, $skipped skipped"
if ((failed > 0 || passed + failed + skipped == 0 || (test_rc != 0 && failed == 0))); then
    exit 1
fi
exit 0
