#!/usr/bin/env bash
# Robustness scenarios of twohop under mpirun, each with its pass criterion.
#
# usage: robustness.sh -b BUILD_DIR SCENARIO
#   layouts NP [VNODES]  per-rank datatype layouts of one signature, user op (robustness layouts)
#   intrinsic NP [VNODES] predefined ops on per-rank layouts and counts (mpi_param_check 0)
#   countmismatch [VNODES [NP]] user op, same signature, different counts (rank 0 against
#                        the others; 2 ranks unless NP): every rank gets an error of the same
#                        class, MPI_ERR_TRUNCATE (over virtual nodes: also the ranks told by
#                        their hop-2 neighbours), and a fresh communicator works afterwards
#   selection            one rank runs with coll_twohop_priority -1: the job must fail with a
#                        clear "selection differs" message within 60 s and never print a
#                        wrong result
#   selection_silent     rank 0 runs coll/basic (its allreduce root only receives: twohop's
#                        differing-selection check cannot see it), rank 1 twohop with
#                        coll_twohop_timeout 13: rank 1 must say after 10 s, at the default
#                        verbosity, whom it waits for and what to check, then fail at 13 s
#   vnode_shm_dead_peer  hop 2 between two virtual nodes over UCX shared memory
#                        (coll_twohop_vnode_shm_transport 1: no UCX peer-failure handling): a
#                        rank SIGKILLs itself mid-loop; every survivor must get an MPI error
#                        (twohop's own liveness check) within 10 s (mpirun with
#                        orte_enable_recovery, so it does not kill the survivors first)
#   killsetup            a rank is SIGKILLed before its first allreduce: mpirun exits non-zero
#                        within 15 s; no twohop segment is left in /dev/shm
#   quiet                RC settings on a host without RDMA devices, hop 2 over UCX: no UCX
#                        configuration warning is printed
#   crash                a rank dereferences NULL after twohop used UCX: Open MPI's report only,
#                        no UCX backtrace ("==== backtrace")
#   stale                a segment of a dead twohop process in /dev/shm is removed (and said so)
#   idle_wait [VNODES]   coll_twohop_timeout 2, asynchronous progress off: a rank that computes
#                        2.5 s between its MPI_Iallreduce and MPI_Wait while the others start
#                        2.7 s late must get the exact sums (robustness.c idle_wait)
#   deferred_fallback    coll_twohop_pipeline_depth differs between the two ranks (MPMD), so
#                        every set-up ends in a fallback: calls made while a set-up started by
#                        MPI_Iallreduce ran, before and after each rank saw its end, must end
#                        alike on every rank (robustness.c deferred_fallback), within 60 s
#   shm64                a private 64 MiB /dev/shm (needs root and unshare; else skipped, 77):
#                        12 live communicators of 4 ranks: exact results, twohop serves what
#                        fits, one notice per process for the rest
# Exit status 0 = pass, 77 = skipped, anything else = fail.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=./build
while getopts "b:" opt; do
    case $opt in
    b) build=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
scenario=${1:-}
shift || true
prog=$build/mpi_tests/robustness
run=(bash "$here/run_mpi.sh" -b "$build")
seg=(-m coll_twohop_segment_bytes=262144)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() { echo "robustness.sh $scenario: FAIL: $*" >&2; cat "$out" >&2; exit 1; }

shm_files() { ls /dev/shm 2>/dev/null | grep -c '^twohop-' || true; }

case $scenario in
layouts | intrinsic)
    np=$1 vn=${2:-}
    extra=()
    [[ -n $vn ]] && extra=(-v "$vn")
    [[ $scenario == intrinsic ]] && extra+=(-m mpi_param_check=0)
    "${run[@]}" -n "$np" -t 200 "${seg[@]}" "${extra[@]}" -- "$prog" "$scenario" >"$out" 2>&1 ||
        fail "exit $?"
    grep -q "robustness $scenario: OK" "$out" || fail "no OK line"
    ;;
countmismatch)
    extra=()
    [[ -n ${1:-} ]] && extra=(-v "$1")
    "${run[@]}" -n "${2:-2}" -t 100 "${extra[@]}" -- "$prog" countmismatch >"$out" 2>&1 ||
        fail "exit $?"
    grep -q "UCX  WARN" "$out" && fail "UCX warnings"
    grep -q "robustness countmismatch: OK" "$out" || fail "no OK line"
    grep -q "different message sizes" "$out" || fail "no reason printed"
    ;;
selection)
    # MPMD: rank 0 with twohop disabled, rank 1 with twohop; everything else identical.
    sysdir=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    path="$(cd "$build/coll" && pwd):$sysdir"
    start=$SECONDS
    rc=0
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 90 \
        mpirun --oversubscribe --bind-to none --mca coll twohop,tuned,basic,libnbc,self \
        --mca mca_base_component_path "$path" \
        -np 1 env OMPI_MCA_coll_twohop_priority=-1 "$prog" simple : -np 1 "$prog" simple \
        >"$out" 2>&1 || rc=$?
    took=$((SECONDS - start))
    [[ $rc -ne 0 ]] || fail "the job succeeded although selection differs"
    [[ $rc -ne 124 && $took -le 60 ]] || fail "no error within 60 s (took $took s, rc $rc)"
    grep -q "WRONG" "$out" && fail "a wrong result was returned"
    grep -q "selection differs" "$out" || fail "no 'selection differs' message"
    echo "selection: failed cleanly after $took s"
    ;;
selection_silent)
    sysdir=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    path="$(cd "$build/coll" && pwd):$sysdir"
    start=$SECONDS
    rc=0
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 60 \
        mpirun --oversubscribe --bind-to none --mca mca_base_component_path "$path" \
        -np 1 env OMPI_MCA_coll=basic,libnbc,self "$prog" simple : \
        -np 1 env OMPI_MCA_coll=twohop,tuned,basic,libnbc,self OMPI_MCA_coll_twohop_timeout=13 \
        "$prog" simple >"$out" 2>&1 || rc=$?
    took=$((SECONDS - start))
    [[ $rc -ne 0 ]] || fail "the job succeeded although selection differs"
    [[ $rc -ne 124 && $took -le 40 ]] || fail "no end within 40 s (took $took s, rc $rc)"
    grep -q "WRONG" "$out" && fail "a wrong result was returned"
    grep -q "has waited 10 s for rank 0" "$out" || fail "no notice naming rank 0 after 10 s"
    grep -q "coll_twohop_priority differ" "$out" || fail "the notice does not say what to check"
    echo "selection_silent: notice, then failed after $took s"
    ;;
idle_wait)
    extra=()
    [[ -n ${1:-} ]] && extra=(-v "$1")
    "${run[@]}" -n 4 -t 60 -m coll_twohop_timeout=2 -m coll_twohop_async_progress=0 \
        "${extra[@]}" -- "$prog" idle_wait >"$out" 2>&1 || fail "exit $?"
    grep -q "robustness idle_wait: OK" "$out" || fail "no OK line"
    ;;
deferred_fallback)
    sysdir=$(ompi_info --parsable --path pkglibdir | cut -d: -f3)
    path="$(cd "$build/coll" && pwd):$sysdir"
    rc=0
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 60 \
        mpirun --oversubscribe --bind-to none --mca coll twohop,tuned,basic,libnbc,self \
        --mca mca_base_component_path "$path" \
        -np 1 env OMPI_MCA_coll_twohop_pipeline_depth=2 "$prog" deferred_fallback : \
        -np 1 env OMPI_MCA_coll_twohop_pipeline_depth=4 "$prog" deferred_fallback \
        >"$out" 2>&1 || rc=$?
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "a call hung (rc $rc)"
    [[ $rc -eq 0 ]] || fail "exit $rc"
    grep -q "robustness deferred_fallback: OK" "$out" || fail "no OK line"
    grep -q "ended in a fallback" "$out" || fail "the set-up did not fail as arranged"
    grep "^deferred_fallback" "$out"
    ;;
vnode_shm_dead_peer)
    start=$SECONDS
    rc=0
    # orte_enable_recovery: mpirun lets the survivors run on after rank 1's death instead of
    # killing them at once, so each has the time to report its error (without it the test
    # raced mpirun's abort of the job).
    "${run[@]}" -n 4 -t 60 -v rr:2 -m coll_twohop_vnode_shm_transport=1 \
        -m orte_enable_recovery=1 -- \
        "$build/mpi_tests/fault_loop" --seconds 20 --errors-return --die-rank 1 --die-after 30 \
        --timeout 40 >"$out" 2>&1 || rc=$?
    took=$((SECONDS - start))
    # (with recovery enabled mpirun's exit status need not say that a rank died)
    [[ $rc -ne 124 ]] || fail "the watchdog ended mpirun"
    n=$(grep -c "ERROR-RETURNED" "$out")
    [[ $n -eq 3 ]] || fail "$n of 3 survivors got an MPI error (rc $rc)"
    grep -q WATCHDOG "$out" && fail "a survivor hung"
    [[ $took -le 30 ]] || fail "took $took s"
    echo "vnode_shm_dead_peer: 3 survivors got an error, $took s"
    ;;
killsetup)
    before=$(shm_files)
    start=$SECONDS
    rc=0
    "${run[@]}" -n 4 -t 60 -v sizes:3,1 -- "$prog" killsetup >"$out" 2>&1 || rc=$?
    took=$((SECONDS - start))
    [[ $rc -ne 0 ]] || fail "mpirun exited 0"
    [[ $took -le 15 ]] || fail "mpirun took $took s"
    sleep 1
    after=$(shm_files)
    [[ $after -le $before ]] || fail "twohop segments left in /dev/shm ($before -> $after)"
    pgrep -f "$prog killsetup" >/dev/null && fail "processes left"
    echo "killsetup: mpirun exited $rc after $took s, /dev/shm clean"
    ;;
quiet)
    [[ -d /sys/class/infiniband ]] && { echo "host has RDMA devices"; exit 77; }
    "${run[@]}" -n 2 -t 60 -v block:2 -m coll_twohop_rc_timeout=20 -m coll_twohop_rc_sl=3 \
        -m coll_twohop_rc_adaptive_routing=1 -- "$prog" simple >"$out" 2>&1 || fail "exit $?"
    grep -qi "invalid configuration\|UCX  WARN" "$out" && fail "UCX printed warnings"
    grep -q "robustness simple: OK" "$out" || fail "no OK line"
    ;;
crash)
    rc=0
    "${run[@]}" -n 2 -t 60 -v block:2 -- "$prog" crash >"$out" 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || fail "the crash went unnoticed"
    grep -q "Segmentation fault\|signal 11" "$out" || fail "no crash report"
    grep -q "==== backtrace" "$out" && fail "UCX printed its backtrace"
    ;;
stale)
    sh -c 'exit 0' &
    dead=$!
    wait $dead
    pidns=$(stat -L -c %i /proc/self/ns/pid)
    f=/dev/shm/twohop-$(id -u)-$pidns-$dead-00000000deadbeef
    head -c 1048576 /dev/zero >"$f" || fail "cannot create $f"
    "${run[@]}" -n 2 -t 60 -- "$prog" simple >"$out" 2>&1 || fail "exit $?"
    [[ -e $f ]] && { rm -f "$f"; fail "stale segment $f still there"; }
    grep -q "removed 1 shared-memory segment" "$out" || fail "removal not reported"
    ;;
shm64)
    [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null || { echo "needs root"; exit 77; }
    unshare --mount --propagation private true 2>/dev/null || { echo "no mount ns"; exit 77; }
    cmd="mount -t tmpfs -o size=64m tmpfs /dev/shm && $(printf '%q ' "${run[@]}") -n 4 -t 200 -- $(printf '%q' "$prog") manycomms 12"
    unshare --mount --propagation private bash -c "$cmd" >"$out" 2>&1 || fail "exit $?"
    grep -q "robustness manycomms: OK" "$out" || fail "no OK line"
    grep -q "twohop served [1-9]" "$out" || fail "twohop served no communicator"
    grep -q "fell back [1-9]" "$out" || fail "expected some communicators to fall back in 64 MiB"
    n=$(grep -c "does not serve this communicator" "$out")
    [[ $n -ge 1 && $n -le 4 ]] || fail "$n resource notices (want 1 per process at most)"
    grep "manycomms:" "$out"
    ;;
*)
    echo "robustness.sh: unknown scenario '$scenario'" >&2
    exit 2
    ;;
esac
echo "robustness.sh $scenario: PASS"
