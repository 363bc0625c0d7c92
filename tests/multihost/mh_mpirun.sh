#!/usr/bin/env bash
# Runs an MPI program across the nodes of the multi-host test cluster (cluster.sh up): mpirun
# starts on node thmh-n0 and reaches thmh-n1/thmh-n2 through node_exec.sh as its rsh agent;
# ob1 + TCP BTL and the out-of-band channel on the cluster subnet; twohop's own UCX worker
# over TCP on eth0.
#
# usage: mh_mpirun.sh [-c twohop|tuned|han] [-n NP] [-b BUILD_DIR] [-m NAME=VALUE]...
#                     [-o MPIRUN_OPTION]... -- PROGRAM [ARGS...]
#   -c   collective selection, as in mpi_tests/run_mpi.sh (default twohop)
#   -n   ranks (default 6: two per node, mapped by slot: ranks 0,1 on n0, 2,3 on n1, 4,5 on n2)
#   -b   meson build directory with coll/mca_coll_twohop.so (default ./build)
#   -m   extra MCA parameter; -o extra mpirun option (e.g. -o --enable-recovery)
# Exit status: mpirun's. No watchdog of its own: callers wrap it in `timeout`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
coll=twohop np=6 build=./build
extra=()
while getopts "c:n:b:m:o:" opt; do
    case $opt in
    c) coll=$OPTARG ;;
    n) np=$OPTARG ;;
    b) build=$OPTARG ;;
    m) extra+=(--mca "${OPTARG%%=*}" "${OPTARG#*=}") ;;
    o) extra+=("$OPTARG") ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
[[ $# -ge 1 ]] || { echo "mh_mpirun.sh: no program given" >&2; exit 2; }
build=$(cd "$build" && pwd)

# shellcheck disable=SC2054 # commas are part of the MCA value
case $coll in
twohop)
    sysdir=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    sel=(--mca coll twohop,tuned,basic,libnbc,self
         --mca mca_base_component_path "$build/coll:$sysdir") ;;
tuned) sel=(--mca coll tuned,basic,libnbc,self) ;;
han) sel=(--mca coll han,tuned,basic,libnbc,self --mca coll_han_priority 100) ;;
*) echo "mh_mpirun.sh: unknown coll '$coll'" >&2; exit 2 ;;
esac

printf 'thmh-n0 slots=2\nthmh-n1 slots=2\nthmh-n2 slots=2\n' >/run/thmh/hostfile
# Six ranks on two cores: ranks must yield while waiting (mpirun does not know the cores are
# shared between "nodes").
cmd=(mpirun --hostfile /run/thmh/hostfile -np "$np" --bind-to none
     --mca plm_rsh_agent "$here/node_exec.sh" --mca pml ob1 --mca btl tcp,vader,self
     --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
     --mca btl_base_warn_component_unused 0 --mca mpi_yield_when_idle 1
     -x UCX_TLS=tcp -x UCX_NET_DEVICES=eth0 "${sel[@]}" "${extra[@]}" "$@")
echo "+ ${cmd[*]}" >&2
printf -v line '%q ' "${cmd[@]}"
exec "$here/node_exec.sh" thmh-n0 \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 exec $line"
