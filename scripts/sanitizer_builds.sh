#!/usr/bin/env bash
# Configures, builds and tests the two sanitizer builds (their 'sanitize' Meson suite, see
# sanitize/meson.build): build-asan (-Db_sanitize=address,undefined) and build-tsan
# (-Db_sanitize=thread), each debugoptimized, warnings as errors like CI (GCC's -Wtsan, about
# atomic_thread_fence, stays a warning: TSan cannot model fences).
# usage: sanitizer_builds.sh [asan|tsan]...   (default: both). Each build directory gets its own
# meson-logs/testlog.json; run_tests.sh counts them. Exit status non-zero if a build or test
# failed. Environment: SAN_BUILD_PREFIX (default build-) names the directories.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
prefix=${SAN_BUILD_PREFIX:-build-}
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)

rc=0
for k in "${kinds[@]}"; do
    dir=$prefix$k
    case $k in
    asan) opts=(-Db_sanitize=address,undefined) ;;
    tsan) opts=(-Db_sanitize=thread -Dc_args=-Wno-error=tsan -Dcpp_args=-Wno-error=tsan) ;;
    *) echo "sanitizer_builds.sh: unknown build '$k'" >&2; exit 2 ;;
    esac
    opts+=(-Db_lundef=false -Dbuildtype=debugoptimized -Dwerror_ci=true)
    rm -f "$dir/meson-logs/testlog.json"
    if [[ -f $dir/meson-private/coredata.dat ]]; then
        meson setup --reconfigure "$dir" "${opts[@]}" >/dev/null
    else
        meson setup "$dir" "${opts[@]}" >/dev/null
    fi || { echo "sanitizer_builds.sh: $dir: meson setup failed" >&2; rc=1; continue; }
    if ! meson compile -C "$dir" -j 2 >"$dir/compile.log" 2>&1; then
        tail -40 "$dir/compile.log" >&2
        echo "sanitizer_builds.sh: $dir: build failed" >&2
        rc=1
        continue
    fi
    meson test -C "$dir" --suite sanitize --print-errorlogs || rc=1
done
exit $rc
