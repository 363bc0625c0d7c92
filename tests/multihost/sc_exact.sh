#!/usr/bin/env bash
# Multi-host scenario: exact allreduce results across three real nodes, node 2's link impaired
# by the relay (or not), twohop serving every call.
#
# usage: sc_exact.sh BUILD_DIR SECONDS [RELAY_ARGS...]
#   e.g. sc_exact.sh build 8 -l 5            5 % loss each way on node 2's link
#        sc_exact.sh build 8 -d 1000 -r 25   1 ms delay, 25 % of the frames overtake the others
# Runs mpi_tests/fault_loop (MPI_INT SUM, counts 1 / 1000 / 70000, every element checked) for
# SECONDS on 6 ranks (2 per node) with --expect-twohop.
# Pass: fault_loop passes (exact results, twohop served every call, none fell back) within
# SECONDS + 60 s, the relay really impaired traffic (its lost/reordered counter > 0 when asked
# to), and nothing is left in the nodes' /dev/shm, /tmp or process lists.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
secs=${2:?seconds}
build=$1
shift 2
mh_init "$build" "$@"

rc=0
timeout -k 5 $((secs + 60)) "$MH_DIR/mh_mpirun.sh" -b "$MH_BUILD" -- \
    "$MH_BUILD/mpi_tests/fault_loop" --seconds "$secs" --expect-twohop --timeout $((secs + 50)) \
    2>&1 | tee "$MH_LOG" | grep -v '^# rank' || true
rc=${PIPESTATUS[0]}
stats=$(mh_relay_stats)
echo "$stats"
[[ $rc -eq 0 ]] || { echo "FAIL: mpirun exit status $rc"; exit 1; }
grep -q 'failures: PASS' "$MH_LOG" || { echo "FAIL: no PASS line"; exit 1; }
if [[ " $* " == *" -l "* && $stats != *" lost "[1-9]* ]]; then
    echo "FAIL: the relay lost no frame"; exit 1
fi
if [[ " $* " == *" -r "* && $stats != *" reordered "[1-9]* ]]; then
    echo "FAIL: the relay reordered no frame"; exit 1
fi
mh_leftovers
echo "PASS"
