#!/usr/bin/env bash
# README command 1: set up and build, then compare MPI_Allreduce latency of twohop, tuned and han
# on this node (NP ranks, default 4; 8 B .. 16 MiB of MPI_FLOAT) plus twohop over a virtual
# two-node layout (block:2), as one table. See scripts/bench_table.sh for the knobs (NP, SIZES,
# TYPE, ITERS, WARMUP, VNODES, BUILD_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >&2
NP=${NP:-4} SIZES=${SIZES:-8:16777216} TYPE=${TYPE:-mpi_float} VNODES=${VNODES-block:2} \
    exec bash scripts/bench_table.sh
