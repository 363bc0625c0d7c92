#!/usr/bin/env bash
# Multi-host scenario: MPI_ERRORS_RETURN and a dead peer. The survivors must get an error from
# MPI_Allreduce, not hang.
#
# usage: sc_dead_peer.sh BUILD_DIR twohop|tuned
# Runs mpi_tests/fault_loop --errors-return --die-rank 3 on 6 ranks (2 per node) under
# `mpirun --enable-recovery` (without it Open MPI 4.1's mpirun kills the whole job as soon as a
# rank dies, so no survivor would be left to observe anything); rank 3 (node thmh-n1) raises
# SIGKILL at iteration 20.
# Pass: each of the 5 survivors prints ERROR-RETURNED (a non-success return code) at most 10 s
# after entering the call that involved the dead rank; none prints WATCHDOG (still inside a call
# 20 s after start). Exit 1 when a survivor
# hung, 99 when the loop never started (so an expected-fail test cannot hide a broken cluster).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
coll=${2:?twohop|tuned}
mh_init "$1"

# fault_loop's watchdog (--timeout) ends hung survivors; mpirun with recovery may then still
# wait, hence the outer timeout.
rc=0
timeout -k 5 30 "$MH_DIR/mh_mpirun.sh" -c "$coll" -b "$MH_BUILD" -o --enable-recovery -- \
    "$MH_BUILD/mpi_tests/fault_loop" --seconds 100 --errors-return --die-rank 3 --die-after 20 \
    --timeout 20 >"$MH_LOG" 2>&1 || rc=$?
echo "mpirun ended at $(mh_elapsed) s, status $rc"
grep -E '^(ERROR-RETURNED|WATCHDOG|# rank 3 raises|FAIL)' "$MH_LOG"
grep -q '^# rank 3 raises' "$MH_LOG" || { cat "$MH_LOG"; echo "ERROR: rank 3 never died"; exit 99; }
errs=$(awk '/^ERROR-RETURNED/ && $(NF - 3) + 0 <= 10 { n++ } END { print n + 0 }' "$MH_LOG")
hung=$(grep -c '^WATCHDOG' "$MH_LOG")
echo "survivors with an error within 10 s: $errs of 5, watchdog: $hung"
((errs == 5 && hung == 0)) || { echo "FAIL: not every survivor got an error"; exit 1; }
# mpirun itself had to be killed (with --enable-recovery it waits on): its session directory in
# TMPDIR may stay; /dev/shm and the process lists must be clean.
mh_leftovers 2 shm
echo "PASS"
