#!/usr/bin/env bash
# Multi-host scenario: part of the allreduce matrix (mpi_tests/allreduce_matrix) on three real
# nodes, so twohop's topology comes from host names and hop 2 crosses namespaces over TCP.
#
# usage: sc_matrix.sh BUILD_DIR [-m NAME=VALUE]... [MATRIX_ARGS...]   (default: --quick --shape world)
#   -m   extra MCA parameter for the run (e.g. coll_twohop_hop2_algorithm=1)
# 6 ranks, 2 per node, no impairment; 256 KiB segments and a 64 KiB latency-path budget as in
# the mpi suite, so both paths and several segments are exercised.
# Pass: the driver passes with --expect twohop (exact values, bit-equal across ranks, twohop
# served exactly the calls it should) within 150 s, and nothing is left in the nodes.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mh_init "$1"
shift
mca=()
while [[ ${1:-} == -m ]]; do
    mca+=(-m "$2")
    shift 2
done
(($# > 0)) || set -- --quick --shape world

rc=0
timeout -k 5 150 "$MH_DIR/mh_mpirun.sh" -b "$MH_BUILD" -m coll_twohop_segment_bytes=262144 \
    -m coll_twohop_small_msg_bytes=65536 "${mca[@]}" -- "$MH_BUILD/mpi_tests/allreduce_matrix" \
    --expect twohop --timeout 140 "$@" >"$MH_LOG" 2>&1 || rc=$?
grep -E '^(# pvars|allreduce_matrix:|RESULT|FAIL)' "$MH_LOG" | head -40
[[ $rc -eq 0 ]] || { tail -30 "$MH_LOG"; echo "FAIL: mpirun exit status $rc"; exit 1; }
grep -q '^RESULT: PASS' "$MH_LOG" || { echo "FAIL: no RESULT: PASS"; exit 1; }
mh_leftovers
echo "PASS"
