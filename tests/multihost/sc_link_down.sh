#!/usr/bin/env bash
# Multi-host scenario: node 2's link goes down for 5 s in the middle of an allreduce loop and
# comes back; TCP (Open MPI's and twohop's UCX endpoints) must ride it out.
#
# usage: sc_link_down.sh BUILD_DIR
# Runs mpi_tests/fault_loop --expect-twohop for 16 s on 6 ranks (2 per node); 3 s after the
# loop started the relay drops every frame of node 2 (SIGUSR1), 5 s later it forwards again.
# Pass: fault_loop passes (exact results, twohop served every call) within 90 s, the relay
# dropped frames while down, and nothing is left in the nodes afterwards.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mh_init "$1"

timeout -k 5 90 "$MH_DIR/mh_mpirun.sh" -b "$MH_BUILD" -- \
    "$MH_BUILD/mpi_tests/fault_loop" --seconds 16 --expect-twohop --timeout 80 >"$MH_LOG" 2>&1 &
run=$!
for _ in $(seq 300); do grep -q '^# looping' "$MH_LOG" && break; sleep 0.1; done
grep -q '^# looping' "$MH_LOG" || { cat "$MH_LOG"; echo "FAIL: loop did not start"; exit 1; }
sleep 3
"$MH_DIR/cluster.sh" link down
echo "link down at $(mh_elapsed) s"
sleep 5
"$MH_DIR/cluster.sh" link up
echo "link up at $(mh_elapsed) s"
rc=0
wait $run || rc=$?
echo "mpirun ended at $(mh_elapsed) s"
grep -v '^# rank' "$MH_LOG"
stats=$(mh_relay_stats)
echo "$stats"
[[ $rc -eq 0 ]] || { echo "FAIL: mpirun exit status $rc"; exit 1; }
grep -q 'failures: PASS' "$MH_LOG" || { echo "FAIL: no PASS line"; exit 1; }
[[ $stats == *" dropped-link-down "[1-9]* ]] || { echo "FAIL: nothing dropped while down"; exit 1; }
mh_leftovers
echo "PASS"
