#!/usr/bin/env bash
# README command 1: set up and build, then compare MPI_Allreduce latency of twohop, tuned and han
# on this node (NP ranks, default 4; 8 B .. 16 MiB of MPI_FLOAT) plus twohop over a virtual
# two-node layout (block:2), as one table. See scripts/bench_table.sh for the knobs (NP, SIZES,
# TYPE, ITERS, WARMUP, VNODES, BUILD_DIR).
# The table is also saved as OUT_DIR/bench_npNP.txt (OUT_DIR default: BUILD_DIR/demo, i.e.
# build/demo) with its plots next to it (scripts/plot_bench.py): bench_npNP_latency.png and
# bench_npNP_busbw.png. A plot that cannot be made (no matplotlib) is a warning, not an error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >&2
np=${NP:-4}
out=${OUT_DIR:-${BUILD_DIR:-build}/demo}
mkdir -p "$out"
table=$out/bench_np$np.txt

# Title of the plots: this machine and today's date, kept in the saved table.
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
ompi=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v/Open MPI /p' | head -1 || true)
{
    echo "# machine: $(hostname -s), $(nproc) cores${cpu:+ ($cpu)}${ompi:+, $ompi}"
    echo "# date: $(date +%F)"
} >"$table"
NP=$np SIZES=${SIZES:-8:16777216} TYPE=${TYPE:-mpi_float} VNODES=${VNODES-block:2} \
    bash scripts/bench_table.sh | tee -a "$table"

# Debian's python3: the interpreter python3-matplotlib (scripts/setup.sh) installs into.
py=/usr/bin/python3
[[ -x $py ]] || py=python3
echo
echo "demo.sh: table saved in $table"
if pngs=$("$py" scripts/plot_bench.py --out-dir "$out" "$table"); then
    echo "demo.sh: plots (latency and bus bandwidth vs size): ${pngs//$'\n'/ }"
else
    echo "demo.sh: warning: no plots (reason on the line above)" >&2
fi
