#!/usr/bin/env python3
"""Plot MPI_Allreduce benchmark output: latency and bus bandwidth against message size.

Reads the benchmarks' own text output and writes two PNGs, PREFIX_latency.png and
PREFIX_busbw.png, with one line per implementation on log-log axes (byte-size ticks).
Accepted inputs, recognised by their header line:

  * the table printed by scripts/bench_table.sh (host buffers): lines for twohop, tuned, han,
    twohop over virtual nodes (when the column has values) and the measured memory bound;
  * mpi_tests/device_allreduce bench output (device buffers; "device buffers" gives the twohop
    line, "staged by hand" the hand-staging line) and mpi_tests/nccl_allreduce output. Several
    such files go into one plot; the HBM bound line comes from the first twohop file.

Bus bandwidth is computed from each latency with the benchmarks' convention,
size / latency * 2(p-1)/p, so every line (including the bound) is on the same scale.

The title names machine, ranks, memory kind and date: each comes from the option of that name,
else from the input ("# machine: ..." and "# date: ..." comment lines, "# np=N" or "N ranks"
in the header comment; the memory kind from the program that wrote the file), else from this
host (host name, the input file's modification date).

Usage (Debian's python3, which python3-matplotlib from scripts/setup.sh installs into):
  /usr/bin/python3 scripts/plot_bench.py [--out-dir DIR] [--prefix NAME] [--machine TEXT]
                                         [--ranks N] [--memory TEXT] [--date TEXT] FILE [FILE ...]

Prints the paths it wrote. On empty or malformed input it prints one line
"plot_bench.py: FILE: reason" on stderr and exits with status 1.
"""

import argparse
import datetime
import math
import os
import re
import socket
import sys

PROG = "plot_bench.py"


class InputError(Exception):
    """Input that is not benchmark output the script understands (one-line message)."""


# Line styles per series: (label, color, linestyle, marker). Order = legend order.
STYLES = {
    "twohop": ("twohop", "C0", "-", "o"),
    "twohop_vn": ("twohop, virtual 2 nodes", "C0", "--", "^"),
    "tuned": ("tuned", "C1", "-", "s"),
    "han": ("han", "C2", "-", "D"),
    "stage": ("hand staging (D2H, tuned on host, H2D)", "C1", "-", "s"),
    "nccl": ("NCCL", "C3", "-", "D"),
    "bound": ("memory bound (all ranks copy n B at once)", "k", ":", None),
    "hbm_bound": ("HBM bound (all ranks copy n B at once)", "k", ":", None),
}

# bench_table.sh column -> series key
TABLE_COLUMNS = {"twohop_us": "twohop", "tuned_us": "tuned", "han_us": "han",
                 "twohop_vn_us": "twohop_vn", "bound_us": "bound"}


def parse_number(text, where):
    """Float of a table cell; None for the cells bench_table.sh prints when a run failed."""
    if text in ("n/a", "-", ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: '{text}' is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: '{text}' is not a valid measurement")
    return value


def read_run(path):
    """Parses one benchmark output file.

    Returns a dict: kind ('table', 'device', 'stage', 'nccl'), ranks (int or None), machine,
    date (str or None) and series {key: [(bytes, latency_us), ...]}.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise InputError("not a text file") from None
    if not any(line.strip() for line in lines):
        raise InputError("empty input (did the benchmark run?)")

    run = {"kind": None, "ranks": None, "machine": None, "date": None, "series": {}}
    header = None
    rows = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            comment = text.lstrip("#").strip()
            m = re.match(r"(machine|date):\s*(.+)", comment)
            if m:
                run[m.group(1)] = m.group(2).strip()
            m = re.match(r"np=(\d+)\b", comment)
            if m:
                run["ranks"] = int(m.group(1))
            m = re.match(r"device_allreduce bench: (\d+) ranks,.*", comment)
            if m:
                run["ranks"] = int(m.group(1))
                run["kind"] = "stage" if "staged by hand" in comment else "device"
            m = re.match(r"nccl_allreduce: (\d+) ranks,.*", comment)
            if m:
                run["ranks"] = int(m.group(1))
                run["kind"] = "nccl"
            continue
        fields = text.split()
        if header is None:
            if fields[0] not in ("size(B)", "bytes"):
                raise InputError(f"line {number}: expected a header starting with 'size(B)' "
                                 f"(bench_table.sh) or 'bytes' (device_allreduce, "
                                 f"nccl_allreduce), got '{text[:40]}'")
            header = fields
            if fields[0] == "size(B)":
                run["kind"] = "table"
            continue
        if len(fields) != len(header):
            raise InputError(f"line {number}: {len(fields)} fields, the header has "
                             f"{len(header)} (truncated output?)")
        rows.append((number, fields))

    if header is None:
        raise InputError("no table header ('size(B) ...' or 'bytes ...'): not benchmark output")
    if not rows:
        raise InputError("no data rows after the header (did the benchmark fail?)")
    if run["kind"] is None:
        raise InputError("no '# device_allreduce bench:' or '# nccl_allreduce:' line: cannot "
                         "tell which program wrote it")

    if run["kind"] == "table":
        columns = {name: key for name, key in TABLE_COLUMNS.items() if name in header}
        if "twohop_us" not in columns:
            raise InputError("no twohop_us column: not bench_table.sh output")
    else:
        for name in ("median_us",) + (("bound_us",) if run["kind"] != "nccl" else ()):
            if name not in header:
                raise InputError(f"no {name} column in the header")
        columns = {"median_us": {"device": "twohop", "stage": "stage", "nccl": "nccl"}[run["kind"]]}
        if run["kind"] == "device":
            columns["bound_us"] = "hbm_bound"

    for number, fields in rows:
        where = f"line {number}"
        try:
            size = int(fields[0])
        except ValueError:
            raise InputError(f"{where}: size '{fields[0]}' is not an integer") from None
        if size <= 0:
            raise InputError(f"{where}: size {size} is not positive")
        for name, key in columns.items():
            value = parse_number(fields[header.index(name)], where)
            if value is not None and value > 0:  # a log axis cannot show 0
                run["series"].setdefault(key, []).append((size, value))
    if not run["series"]:
        raise InputError("no measured values (every column is n/a: did every run fail?)")
    for points in run["series"].values():
        points.sort()
    return run


def byte_label(n):
    """8 -> '8 B', 4096 -> '4 KiB', 2**30 -> '1 GiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def size_ticks(lo, hi):
    """Powers of two from lo to hi (both rounded out to powers of two), about ten of them,
    both ends included where the span allows an even step."""
    k0, k1 = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    span = max(k1 - k0, 1)
    step = next((s for s in range(1, span + 1) if span % s == 0 and span // s <= 10), None)
    if step is None:
        step = math.ceil(span / 10)
    return [2 ** k for k in range(k0, k1 + 1, step)], [2 ** k for k in range(k0, k1 + 1)]


def plot(series, ranks_of, title_info, metric, path):
    """Writes one PNG. series: {key: points}; ranks_of: {key: p} for the busbw conversion."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=110)
    sizes = []
    for key in STYLES:
        if key not in series:
            continue
        label, color, style, marker = STYLES[key]
        xs = [s for s, _ in series[key]]
        if metric == "latency":
            ys = [t for _, t in series[key]]
        else:
            p = ranks_of[key]
            ys = [s / (t * 1e-6) * 2 * (p - 1) / p / 1e9 for s, t in series[key]]
        sizes += xs
        ax.plot(xs, ys, label=label, color=color, linestyle=style, marker=marker,
                markersize=4, linewidth=2 if key == "twohop" else 1.4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    major, minor = size_ticks(min(sizes), max(sizes))
    ax.xaxis.set_major_locator(FixedLocator(major))
    ax.xaxis.set_minor_locator(FixedLocator(minor))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: byte_label(int(round(v)))))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(minor[0] / 1.3, minor[-1] * 1.3)
    lo, hi = ax.get_ylim()
    if hi / lo < 1000:  # few decades: label 1-2-5 steps, not only the powers of ten
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("message size")
    if metric == "latency":
        ax.set_ylabel("latency (µs), lower is better")
        what = "MPI_Allreduce latency"
    else:
        ax.set_ylabel("bus bandwidth (GB/s), higher is better")
        what = "MPI_Allreduce bus bandwidth, size / latency · 2(p−1)/p"
    ax.set_title(f"{what}\n{title_info}", fontsize=10)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", axis="y", alpha=0.15)
    ax.legend(fontsize=8, loc="upper left" if metric == "latency" else "lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE", help="benchmark output")
    ap.add_argument("--out-dir", default=None, help="where the PNGs go (default: next to FILE)")
    ap.add_argument("--prefix", default=None, help="PNG name prefix (default: FILE's name)")
    ap.add_argument("--machine", help="machine description for the title")
    ap.add_argument("--ranks", type=int, help="number of ranks, when the input does not say")
    ap.add_argument("--memory", help="memory kind for the title (default: from the input)")
    ap.add_argument("--date", help="date of the run for the title")
    args = ap.parse_args(argv)

    runs = []
    current = None
    try:
        for current in args.files:
            runs.append(read_run(current))
        current = None
        try:
            import matplotlib  # noqa: F401  (checked before any work is done)
        except ImportError:
            raise InputError("matplotlib is not installed (apt-get install python3-matplotlib, "
                             "or bash scripts/setup.sh as root)") from None

        series, ranks_of = {}, {}
        for i, run in enumerate(runs):
            p = args.ranks or run["ranks"]
            if not p or p < 2:
                current = args.files[i]
                raise InputError("number of ranks not in the input: give --ranks N" if not p
                                 else f"{p} ranks: an allreduce benchmark needs at least 2")
            for key, points in run["series"].items():
                if key in series:  # e.g. a second twohop file: first one wins
                    continue
                series[key], ranks_of[key] = points, p
        current = None
        kinds = {run["kind"] for run in runs}
        if "table" in kinds and len(kinds) > 1 and not args.memory:
            raise InputError("mixes bench_table.sh (host) and device output: give --memory")
        ranks = sorted({ranks_of[k] for k in series})
        memory = args.memory or ("host" if kinds == {"table"} else "device (cudaMalloc)")
        machine = args.machine or next((r["machine"] for r in runs if r["machine"]), None) \
            or socket.gethostname()
        date = args.date or next((r["date"] for r in runs if r["date"]), None) or \
            datetime.date.fromtimestamp(os.path.getmtime(args.files[0])).isoformat()
        rank_text = f"{ranks[0]} ranks" if len(ranks) == 1 else \
            "/".join(map(str, ranks)) + " ranks"
        title_info = f"{machine} · {rank_text} · {memory} buffers · {date}"

        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.files[0]))
        prefix = args.prefix or os.path.splitext(os.path.basename(args.files[0]))[0]
        os.makedirs(out_dir, exist_ok=True)
        for metric in ("latency", "busbw"):
            path = os.path.join(out_dir, f"{prefix}_{metric}.png")
            plot(series, ranks_of, title_info, metric, path)
            print(path)
    except InputError as e:
        print(f"{PROG}: {current + ': ' if current else ''}{e}", file=sys.stderr)
        return 1
    except OSError as e:
        name = e.filename or current
        print(f"{PROG}: {name + ': ' if name else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
