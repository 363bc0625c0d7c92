#!/usr/bin/env bash
# Multi-host scenario: `kill -9` of one rank in the middle of an allreduce loop.
#
# usage: sc_kill9.sh BUILD_DIR twohop|tuned
# Runs mpi_tests/fault_loop (default error handler) on 6 ranks (2 per node) with twohop or with
# plain tuned selected; once the loop runs, rank 3 (node thmh-n1) gets SIGKILL from outside.
# Pass: mpirun exits within 10 s of the kill, with a non-zero status; 2 s later no file is left
# in any node's /dev/shm or /tmp and no process in any node.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
coll=${2:?twohop|tuned}
mh_init "$1"

timeout -k 5 120 "$MH_DIR/mh_mpirun.sh" -c "$coll" -b "$MH_BUILD" -- \
    "$MH_BUILD/mpi_tests/fault_loop" --seconds 100 --timeout 110 >"$MH_LOG" 2>&1 &
run=$!
for _ in $(seq 300); do grep -q '^# looping' "$MH_LOG" && break; sleep 0.1; done
grep -q '^# looping' "$MH_LOG" || { cat "$MH_LOG"; echo "FAIL: loop did not start"; exit 1; }
sleep 1
pid=$(sed -n 's/^# rank 3 pid \([0-9]*\) host thmh-n1$/\1/p' "$MH_LOG")
[[ -n $pid ]] || { cat "$MH_LOG"; echo "FAIL: rank 3 not on thmh-n1"; exit 1; }
kill -9 "$pid"
t_kill=$(mh_now_ms)
echo "killed rank 3 (pid $pid) at $(mh_elapsed) s"
while kill -0 "$run" 2>/dev/null && (($(mh_now_ms) - t_kill < 10000)); do sleep 0.1; done
if kill -0 "$run" 2>/dev/null; then
    echo "FAIL: mpirun still running 10 s after the kill"
    exit 1
fi
rc=0
wait "$run" || rc=$?
echo "mpirun exited $(mh_elapsed "$t_kill") s after the kill, status $rc"
grep -v '^# rank' "$MH_LOG" | grep -v '^ *$' | head -20
[[ $rc -ne 0 ]] || { echo "FAIL: mpirun reported success"; exit 1; }
mh_leftovers 2
echo "PASS"
