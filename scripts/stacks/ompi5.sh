#!/usr/bin/env bash
# Builds twohop against Open MPI 5.0 and runs its unit tests and the 'portable' MPI suite there,
# on a Debian 12 host: Open MPI 5.0.7 (UCX, PMIx 5, PRRTE 3) comes from Debian 13 ("trixie")
# packages installed into a debootstrap chroot. docs/stacks/ompi5.md explains the build.
#
# Run as root from anywhere in a checkout; idempotent (the chroot, its packages and the build
# directory are reused; the sources are refreshed from the checkout's files on every run).
# Result: the tests' log in build-ompi5/meson-logs/testlog.json under the repository root;
# exit status non-zero when the build or a test failed.
#
# Environment (all optional):
#   TWOHOP_OMPI5_ROOT=/var/tmp/twohop-trixie   the chroot
#   DEBIAN_MIRROR=http://deb.debian.org/debian
#   TESTS="unit portable"                      "unit" and/or "portable"; empty: build only
# shellcheck disable=SC2016,SC2317 # '${Version}' is dpkg-query's format; cleanup runs from the trap
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$(pwd)
root=${TWOHOP_OMPI5_ROOT:-/var/tmp/twohop-trixie}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tests=${TESTS-unit portable}
suite=trixie
# What the build and the tests need (scripts/setup.sh has the Debian 12 list). libpmix-dev:
# Open MPI 5's internal headers include <pmix.h>.
pkgs=(libopenmpi-dev openmpi-bin libucx-dev libpmix-dev meson ninja-build g++ pkg-config
      libgtest-dev nlohmann-json3-dev python3 xz-utils)
# Inside the chroot: Open MPI's threads headers that Debian does not package (see below), the
# sources and the build directory.
internal=/opt/ompi-internal
src=/src/twohop
build=/src/build-ompi5

[[ $(id -u) -eq 0 ]] || { echo "ompi5.sh: must run as root (debootstrap, chroot)" >&2; exit 1; }
# No stale results: the log is there only when this run's tests ran.
rm -f "$repo/build-ompi5/meson-logs/testlog.json" "$repo/build-ompi5/meson-logs/testlog.txt"

t0=$SECONDS tphase=$SECONDS phase_name=''
timings=()
phase() { # phase NAME: closes the running phase (prints its time) and starts NAME
    if [[ -n $phase_name ]]; then
        timings+=("$(printf '%-12s %4d s' "$phase_name" $((SECONDS - tphase)))")
        echo "ompi5.sh: == $phase_name: $((SECONDS - tphase)) s" >&2
    fi
    phase_name=$1 tphase=$SECONDS
    [[ -n $1 ]] && echo "ompi5.sh: == $1" >&2
    return 0
}

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
    done
}
trap cleanup EXIT

in_root() { # in_root COMMAND...: runs in the chroot with a clean environment
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive "$@"
}

phase debootstrap
if ! command -v debootstrap >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
fi
if [[ ! -x $root/usr/bin/apt-get || ! -f $root/.twohop-debootstrap-done ]]; then
    rm -rf "$root"
    debootstrap --variant=minbase "$suite" "$root" "$mirror"
    touch "$root/.twohop-debootstrap-done"
fi

phase mounts
for m in proc sys dev dev/pts dev/shm; do
    mkdir -p "$root/$m"
    mountpoint -q "$root/$m" && continue
    case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sysfs "$root/sys" ;;
    *) mount --bind "/$m" "$root/$m" ;;
    esac
    mounted+=("$root/$m")
done
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

phase packages
# Sources too: the threads headers come from the openmpi source package.
echo "deb-src $mirror $suite main" >"$root/etc/apt/sources.list.d/twohop-src.list"
missing=()
for p in "${pkgs[@]}"; do
    in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$p")
done
if ((${#missing[@]})) || [[ ! -f $root$internal/.done ]]; then
    in_root apt-get update -q
fi
if ((${#missing[@]})); then
    in_root apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

phase headers
# Open MPI 5's opal_config.h includes opal/mca/threads/pthreads/threads_pthreads_*.h, which
# libopenmpi-dev does not install: taken from the source package of exactly the installed
# version (only those files are extracted).
ver=$(in_root dpkg-query -W -f='${Version}' libopenmpi-dev)
if [[ $(cat "$root$internal/.done" 2>/dev/null) != "$ver" ]]; then
    in_root bash -euc "
        rm -rf /var/tmp/openmpi-src $internal
        mkdir -p /var/tmp/openmpi-src $internal && cd /var/tmp/openmpi-src
        chown _apt . 2>/dev/null || true
        apt-get source --download-only -q openmpi=$ver
        tar -xf openmpi_*.orig.tar.* -C $internal --strip-components=1 --wildcards \
            '*/opal/mca/threads/pthreads/threads_pthreads*.h'
        ls $internal/opal/mca/threads/pthreads/
        cd / && rm -rf /var/tmp/openmpi-src
        echo '$ver' >$internal/.done"
fi

phase sources
# The checkout's files (tracked and untracked-but-not-ignored; CI has a clean checkout).
rm -rf "$root$src"
mkdir -p "$root$src"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -c | tar -x -C "$root$src"

phase build
setup=(meson setup "$build" "$src" -Dwerror_ci=true -Dcuda=disabled -Dtests=enabled
       -Dompi_internal_include="$internal")
[[ -f $root$build/meson-private/coredata.dat ]] && setup+=(--reconfigure)
in_root "${setup[@]}"
in_root meson compile -C "$build"

phase tests
rc=0
if [[ -n $tests ]]; then
    # One meson test run (one testlog.json): the unit tests (no suite of their own) and/or the
    # 'portable' MPI suite, by name.
    names=()
    for t in $tests; do
        case $t in
        unit) sel=(--no-suite mpi --no-suite plots --no-suite multihost) ;;
        portable) sel=(--suite portable) ;;
        *) echo "ompi5.sh: unknown TESTS entry '$t'" >&2; exit 2 ;;
        esac
        mapfile -t -O "${#names[@]}" names < <(in_root meson test -C "$build" --no-rebuild --list \
            "${sel[@]}" | sed -n 's|^.* / ||p')
    done
    in_root meson test -C "$build" --no-rebuild --print-errorlogs "${names[@]}" || rc=$?
    mkdir -p "$repo/build-ompi5/meson-logs"
    cp "$root$build/meson-logs/testlog.json" "$root$build/meson-logs/testlog.txt" \
        "$repo/build-ompi5/meson-logs/"
fi
phase ''

echo "ompi5.sh: Open MPI $(in_root dpkg-query -W -f='${Version}' libopenmpi-dev)," \
     "PMIx $(in_root dpkg-query -W -f='${Version}' libpmix-dev)," \
     "UCX $(in_root dpkg-query -W -f='${Version}' libucx-dev)"
printf 'ompi5.sh: %s\n' "${timings[@]}"
echo "ompi5.sh: total $((SECONDS - t0)) s; tests exit status $rc" \
     "(log: build-ompi5/meson-logs/testlog.json)"
exit $rc
