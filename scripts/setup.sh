#!/usr/bin/env bash
# Idempotent setup: installs the Debian/Ubuntu packages the build and tests need (only when one
# is missing, and only as root; python3-matplotlib is for scripts/plot_bench.py), then configures
# (or reconfigures) and compiles the Meson build.
# Environment: BUILD_DIR (default build), MESON_SETUP_ARGS (extra `meson setup` options).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pkgs=(build-essential meson ninja-build pkg-config openmpi-bin libopenmpi-dev libucx-dev
      libgtest-dev googletest libhwloc-dev rdma-core libibverbs-dev gawk nlohmann-json3-dev
      python3-matplotlib iproute2)
build=${BUILD_DIR:-build}

missing=()
if command -v dpkg-query >/dev/null; then
    for p in "${pkgs[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
else
    echo "setup.sh: no dpkg-query (not Debian/Ubuntu?): skipping package installation" >&2
fi

if ((${#missing[@]} == 0)); then
    echo "setup.sh: all packages present"
elif [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: not root: cannot install missing packages: ${missing[*]}" >&2
    echo "setup.sh: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
else
    echo "setup.sh: installing missing packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A failed install (offline machine, say) is not fatal here: the build below says what is
    # really missing.
    if ! { apt-get update && apt-get install -y "${pkgs[@]}"; }; then
        echo "setup.sh: warning: apt-get failed; continuing with what is installed" >&2
    fi
fi

# shellcheck disable=SC2086 # MESON_SETUP_ARGS is a list of options
if [[ -f $build/meson-private/coredata.dat ]]; then
    meson setup --reconfigure "$build" ${MESON_SETUP_ARGS:-}
else
    meson setup "$build" ${MESON_SETUP_ARGS:-}
fi
meson compile -C "$build"
