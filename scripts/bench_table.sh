#!/usr/bin/env bash
# Runs twohop_osu_allreduce with twohop, tuned and han on one node (and twohop over a virtual
# two-node layout) and prints one table: size, latency of each, twohop speedups, twohop busbw.
# Bash + POSIX awk only. Needs a built tree (scripts/setup.sh).
#
# Environment (all optional):
#   NP=4                 ranks
#   SIZES=8:16777216     -m [MIN:]MAX in bytes
#   TYPE=mpi_float       -T datatype
#   ITERS, WARMUP        -i / -x (default: osu defaults, 1000/200 small, 100/10 large)
#   VNODES=block:2       layout of the "twohop (virtual 2 nodes)" column; empty to skip it
#   BUILD_DIR=build      Meson build directory
#   TIMEOUT=900          outer watchdog per run, seconds
#   KEEP=DIR             keep the raw benchmark outputs in DIR
#   MPI_STACK=mpich      MPICH instead of Open MPI (BUILD_DIR built with -Dmpi=mpich): twohop is
#                        the PMPI library under mpiexec.mpich, the second column MPICH's own
#                        allreduce, no han column
# speedup = other latency / twohop latency (> 1: twohop is faster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

np=${NP:-4} sizes=${SIZES:-8:16777216} dtype=${TYPE:-mpi_float} build=${BUILD_DIR:-build}
vnodes=${VNODES-block:2} tmo=${TIMEOUT:-900} stack=${MPI_STACK:-ompi}
# Per stack: the launcher option and the run_mpi.sh modes of twohop and of the baselines.
if [[ $stack == mpich ]]; then
    launch=(-l mpiexec.mpich) c_twohop=pmpi c_base=mpi base_name=mpich
else
    launch=() c_twohop=twohop c_base=tuned base_name=tuned
fi
bench=$build/mpi_tests/twohop_osu_allreduce
[[ -x $bench ]] || { echo "bench_table.sh: $bench not built (run scripts/setup.sh)" >&2; exit 1; }
out=${KEEP:-$(mktemp -d)}
mkdir -p "$out"
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$out"' EXIT

bargs=(-m "$sizes" -T "$dtype" -f)
[[ -n ${ITERS:-} ]] && bargs+=(-i "$ITERS")
[[ -n ${WARMUP:-} ]] && bargs+=(-x "$WARMUP")

# run_one LABEL COLL [VNODES]: benchmark output in $out/LABEL.txt (empty on failure).
run_one() {
    local label=$1 coll=$2 vn=${3:-}
    local extra=()
    [[ -n $vn ]] && extra=(-v "$vn")
    echo "bench_table.sh: $label (np=$np)..." >&2
    if ! bash mpi_tests/run_mpi.sh -n "$np" -c "$coll" ${launch[@]+"${launch[@]}"} -b "$build" \
        -t "$tmo" ${extra[@]+"${extra[@]}"} -- \
        "$bench" "${bargs[@]}" >"$out/$label.txt" 2>"$out/$label.err"; then
        echo "bench_table.sh: $label failed (see below); its column shows n/a" >&2
        tail -5 "$out/$label.err" >&2
    fi
}

run_one twohop "$c_twohop"
run_one tuned "$c_base"
if [[ $stack == mpich ]]; then : >"$out/han.txt"; else run_one han han; fi
[[ -n $vnodes ]] && run_one twohop_vn "$c_twohop" "$vnodes"
[[ -n $vnodes ]] || : >"$out/twohop_vn.txt"
# The memory-traffic bound, measured now: every rank copies n bytes at once (2·p·n bytes).
echo "bench_table.sh: copy bound (np=$np)..." >&2
bash mpi_tests/run_mpi.sh -n "$np" -c "$c_base" ${launch[@]+"${launch[@]}"} -b "$build" -t "$tmo" -- \
    "$build/mpi_tests/copy_bandwidth" -m "$sizes" >"$out/copy.txt" 2>"$out/copy.err" ||
    : >"$out/copy.txt"

for label in twohop twohop_vn; do
    sed -n "s/^# twohop:/# $label run:/p" "$out/$label.txt"
done
echo "# np=$np type=$dtype sizes=$sizes; latency in us (avg over ranks);" \
     "speedup = other / twohop; busbw in GB/s"
awk -v vn="$vnodes" -v bname="$base_name" '
    # Benchmark rows: size avg min max iterations busbw (comment lines start with #).
    # Column by file name (an empty file, e.g. no virtual-node run, has no first record).
    FNR == 1 {
        n_ = split(FILENAME, parts, "/"); base = parts[n_]
        f = 5
        if (base == "twohop.txt") f = 1
        else if (base == "tuned.txt") f = 2
        else if (base == "han.txt") f = 3
        else if (base == "twohop_vn.txt") f = 4
    }
    /^#/ || NF < 2 { next }
    {
        size = $1
        if (!(size in seen)) { seen[size] = 1; order[++n] = size }
        lat[f, size] = $2
        bw[f, size] = $NF
        if (f == 5) copy[size] = $2
    }
    function cell(v) { return v == "" ? "n/a" : v }
    function pct(a, b) {
        if (a != "" && a + 0 < 0.005) return "-" # copy too short to time
        return (a == "" || b == "" || b + 0 == 0) ? "n/a" : sprintf("%.0f%%", 100 * a / b)
    }
    function ratio(a, b) {
        return (a == "" || b == "" || b + 0 == 0) ? "n/a" : sprintf("%.2f", a / b)
    }
    END {
        printf "%-10s %12s %12s %12s %14s %12s %12s %13s %10s %9s\n", "size(B)", "twohop_us",
               bname "_us", "han_us", "twohop_vn_us", "x_vs_" bname, "x_vs_han", "twohop_busbw",
               "bound_us", "of_bound"
        for (i = 1; i <= n; i++) {
            s = order[i]
            printf "%-10s %12s %12s %12s %14s %12s %12s %13s %10s %9s\n", s, cell(lat[1, s]),
                   cell(lat[2, s]), cell(lat[3, s]), cell(lat[4, s]),
                   ratio(lat[2, s], lat[1, s]), ratio(lat[3, s], lat[1, s]), cell(bw[1, s]),
                   cell(copy[s]), pct(copy[s], lat[1, s])
        }
        printf "# bound_us: all ranks memcpy n bytes at once (2*p*n bytes moved, measured now);"
        printf " of_bound = bound_us / twohop_us\n"
        if (vn != "") printf "# twohop_vn_us: twohop with coll_twohop_virtual_nodes=%s\n", vn
    }' "$out/twohop.txt" "$out/tuned.txt" "$out/han.txt" "$out/twohop_vn.txt" "$out/copy.txt"
