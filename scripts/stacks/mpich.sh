#!/usr/bin/env bash
# The MPICH stack: Debian 12's MPICH 4.0.2 (ch4:ucx) beside Open MPI, twohop as the PMPI library
# libtwohop_pmpi.so (LD_PRELOAD under mpiexec.mpich). Installs mpich and libmpich-dev when
# missing (as root), builds in BUILD_DIR (default build-mpich) against pkg-config 'mpich', and
# runs the 'portable' test suite; its results are in BUILD_DIR/meson-logs/testlog.json.
# Environment: MESON_SETUP_ARGS (extra `meson setup` options, e.g. -Dwerror_ci=true).
# Exit status: non-zero when the build or a test failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${BUILD_DIR:-build-mpich}
start=$SECONDS

pkgs=(mpich libmpich-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "stacks/mpich.sh: not root: cannot install ${missing[*]}" >&2
        exit 1
    fi
    echo "stacks/mpich.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "stacks/mpich.sh: $(mpichversion 2>/dev/null | head -2 | tr -s ' \t' ' ' | paste -sd' ')"

# shellcheck disable=SC2086 # MESON_SETUP_ARGS is a list of options
if [[ -f $build/meson-private/coredata.dat ]]; then
    meson setup --reconfigure "$build" -Dmpi=mpich ${MESON_SETUP_ARGS:-} >/dev/null
else
    meson setup "$build" -Dmpi=mpich ${MESON_SETUP_ARGS:-} >/dev/null
fi
meson compile -C "$build"
echo "stacks/mpich.sh: built in $((SECONDS - start)) s"
rc=0
meson test -C "$build" --print-errorlogs --suite portable || rc=$?
echo "stacks/mpich.sh: done in $((SECONDS - start)) s (exit $rc)"
exit $rc
