#!/usr/bin/env bash
# Launches an MPI test program through mpirun with twohop (or tuned, or han) selected.
#
# usage: run_mpi.sh -n NP [-c twohop|tuned|han|pmpi] [-l LAUNCHER] [-b BUILD_DIR] [-v VNODES]
#                   [-t TIMEOUT_S] [-m NAME=VALUE]... -- PROGRAM [ARGS...]
#   -n NP        ranks (always --oversubscribe --bind-to none)
#   -c COLL      twohop (default): --mca coll twohop,tuned,basic,libnbc,self and the component
#                path BUILD_DIR/coll before Open MPI's own component directory;
#                tuned: --mca coll tuned,basic,libnbc,self;
#                han: --mca coll han,tuned,basic,libnbc,self --mca coll_han_priority 100;
#                pmpi: the PMPI library BUILD_DIR/pmpi/libtwohop_pmpi.so through LD_PRELOAD,
#                with any MPI: coll_twohop_<name> settings (-m, -v) become TWOHOP_<NAME>
#                environment variables; other -m settings pass to Open MPI's mpirun as --mca
#                and are dropped (with a note) under MPICH's mpiexec
#                mpi: the MPI's own allreduce, nothing of twohop loaded (baselines for
#                other MPIs; under Open MPI the same as tuned)
#   -l LAUNCHER  the MPI's launcher (default mpirun): Open MPI's mpirun, or MPICH's Hydra
#                mpiexec (e.g. mpiexec.mpich; told apart by its --version)
#   -b DIR       meson build directory holding coll/mca_coll_twohop.so (default: ./build)
#   -v VNODES    value of coll_twohop_virtual_nodes (block:K, rr:K, sizes:..., list:...)
#   -t SECONDS   outer watchdog: `timeout` kills mpirun after SECONDS (default 300)
#   -m NAME=VAL  extra MCA parameter (repeatable), e.g. -m coll_twohop_segment_bytes=4096
# Environment: MPI_TESTS_COLL=tuned|han overrides -c and turns the twohop-only checks off
# (`--expect twohop` becomes `--expect none --tolerate-ompi-bugs`, `--expect-twohop` is dropped):
# the same test list then runs as a baseline against plain Open MPI.
# STACKS_ON_HANG=1: 10 s before the watchdog fires, every rank's thread backtraces (gdb, else
# cuda-gdb, when one is installed) go to stderr, so a hang says where it waits.
# Exit status: the program's; 124 when the outer watchdog fired.
set -euo pipefail

np=2 coll=twohop build=./build vnodes='' tmo=300 launcher=mpirun
mca=() mraw=()
while getopts "n:c:l:b:v:t:m:h" opt; do
    case $opt in
    n) np=$OPTARG ;;
    c) coll=$OPTARG ;;
    b) build=$OPTARG ;;
    v) vnodes=$OPTARG ;;
    t) tmo=$OPTARG ;;
    l) launcher=$OPTARG ;;
    m) mca+=(--mca "${OPTARG%%=*}" "${OPTARG#*=}"); mraw+=("$OPTARG") ;;
    h) sed -n '2,22p' "$0"; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
[[ $# -ge 1 ]] || { echo "run_mpi.sh: no program given" >&2; exit 2; }

if [[ -n ${MPI_TESTS_COLL:-} ]]; then
    coll=$MPI_TESTS_COLL
    args=()
    prev=''
    for a in "$@"; do
        if [[ $prev == --expect && $a == twohop ]]; then
            args+=(none --tolerate-ompi-bugs)
        elif [[ $a != --expect-twohop ]]; then
            args+=("$a")
        fi
        prev=$a
    done
    set -- "${args[@]}"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Keep the launcher quiet on machines without InfiniBand/UCX devices.
export OMPI_MCA_btl_base_warn_component_unused=0

# shellcheck disable=SC2054 # commas are part of the MCA value
case $coll in
twohop)
    sysdir=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    so="$build/coll/mca_coll_twohop.so"
    path=$sysdir
    if [[ -f $so ]]; then
        path="$(cd "$build/coll" && pwd):$sysdir"
    else
        # (A directory in the path that does not exist breaks even mpirun's option parsing.)
        echo "run_mpi.sh: warning: $so not found; twohop cannot be selected" >&2
    fi
    # mca_base_component_path REPLACES the default list: repeat Open MPI's own directory.
    sel=(--mca coll twohop,tuned,basic,libnbc,self --mca mca_base_component_path "$path")
    [[ -n $vnodes ]] && sel+=(--mca coll_twohop_virtual_nodes "$vnodes")
    ;;
pmpi | mpi)
    so="$build/pmpi/libtwohop_pmpi.so"
    envs=()
    if [[ $coll == pmpi ]]; then
        [[ -f $so ]] || { echo "run_mpi.sh: $so not found" >&2; exit 2; }
        envs=(LD_PRELOAD "$(cd "$(dirname "$so")" && pwd)/$(basename "$so")")
    fi
    [[ -n $vnodes && $coll == pmpi ]] && envs+=(TWOHOP_VIRTUAL_NODES "$vnodes")
    other=()
    for kv in ${mraw[@]+"${mraw[@]}"}; do
        name=${kv%%=*}
        if [[ $name == coll_twohop_* && $coll == mpi ]]; then
            continue
        elif [[ $name == coll_twohop_* ]]; then
            var=${name#coll_twohop_}
            envs+=("TWOHOP_${var^^}" "${kv#*=}")
        else
            other+=("$kv")
        fi
    done
    version=$("$launcher" --version 2>&1 || true)
    if [[ $version == *HYDRA* ]]; then
        cmd=("$launcher" -n "$np")
        for ((i = 0; i < ${#envs[@]}; i += 2)); do cmd+=(-genv "${envs[i]}" "${envs[i + 1]}"); done
        for kv in ${other[@]+"${other[@]}"}; do
            echo "run_mpi.sh: note: '$kv' is an Open MPI setting; not passed to $launcher" >&2
        done
    else
        cmd=("$launcher" --oversubscribe --bind-to none -np "$np" --mca coll tuned,basic,libnbc,self)
        for ((i = 0; i < ${#envs[@]}; i += 2)); do cmd+=(-x "${envs[i]}=${envs[i + 1]}"); done
        for kv in ${other[@]+"${other[@]}"}; do cmd+=(--mca "${kv%%=*}" "${kv#*=}"); done
    fi
    cmd+=("$@")
    ;;
tuned) sel=(--mca coll tuned,basic,libnbc,self) ;;
han) sel=(--mca coll han,tuned,basic,libnbc,self --mca coll_han_priority 100) ;;
*) echo "run_mpi.sh: unknown coll '$coll'" >&2; exit 2 ;;
esac

if [[ $coll != pmpi && $coll != mpi ]]; then
    cmd=("$launcher" --oversubscribe --bind-to none -np "$np" "${sel[@]}" ${mca[@]+"${mca[@]}"} "$@")
fi
echo "+ ${cmd[*]}" >&2
rc=0
dumper=
if [[ ${STACKS_ON_HANG:-0} == 1 && $tmo -gt 20 ]]; then
    dbg=$(command -v gdb || command -v cuda-gdb || true)
    (
        sleep $((tmo - 10))
        [[ -n $dbg ]] || { echo "run_mpi.sh: no gdb for the backtraces" >&2; exit 0; }
        # The ranks: Open MPI's launcher puts OMPI_COMM_WORLD_RANK into their environment.
        for pid in $(grep -l -s OMPI_COMM_WORLD_RANK= /proc/[0-9]*/environ | cut -d/ -f3); do
            [[ $pid != "$$" && $pid != "$BASHPID" ]] || continue
            echo "==== run_mpi.sh: backtraces of pid $pid" >&2
            timeout 20 "$dbg" -batch -p "$pid" -ex "thread apply all bt 14" 2>&1 |
                grep -E "^Thread|^#" >&2
        done
    ) &
    dumper=$!
fi
timeout --kill-after=15 "$tmo" "${cmd[@]}" || rc=$?
[[ -n $dumper ]] && kill "$dumper" 2>/dev/null
if [[ $rc -eq 124 ]]; then
    echo "run_mpi.sh: WATCHDOG: mpirun killed after $tmo s (hang?)" >&2
fi
exit $rc
