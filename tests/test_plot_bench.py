#!/usr/bin/env python3
"""Meson test (suite 'plots') of scripts/plot_bench.py on recorded benchmark output.

Good input: the recorded host tables (docs/bench/) and GPU runs (docs/gpu/) give two non-empty
PNGs each. Bad input (empty, not benchmark output, truncated, non-numeric, header only, every
run failed, a missing file): one line "plot_bench.py: FILE: reason" on stderr, no traceback,
exit status 1, no PNG. Exits 77 (Meson: skipped) when matplotlib is not installed.
"""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "plot_bench.py")
HOST_SAMPLE = os.path.join(ROOT, "docs", "bench", "host16_np8.txt")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_plot(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


class GoodInput(unittest.TestCase):
    def check_pngs(self, out_dir, prefix, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        for metric in ("latency", "busbw"):
            path = os.path.join(out_dir, f"{prefix}_{metric}.png")
            self.assertIn(path, result.stdout.splitlines())
            with open(path, "rb") as f:
                data = f.read()
            self.assertTrue(data.startswith(PNG_MAGIC), path)
            self.assertGreater(len(data), 10000, path)

    def test_host_tables(self):
        for name in ("host16_np8", "host16_np16"):
            with tempfile.TemporaryDirectory() as out:
                result = run_plot("--out-dir", out, os.path.join(ROOT, "docs", "bench", f"{name}.txt"))
                self.check_pngs(out, name, result)

    def test_gpu_runs(self):
        gpu = os.path.join(ROOT, "docs", "gpu")
        with tempfile.TemporaryDirectory() as out:
            result = run_plot("--out-dir", out, "--prefix", "two", "--machine", "2 GPUs",
                              "--date", "2026-11-30", os.path.join(gpu, "bench_twohop_2gpu.txt"),
                              os.path.join(gpu, "bench_nccl_2gpu.txt"))
            self.check_pngs(out, "two", result)
            result = run_plot("--out-dir", out, "--prefix", "one",
                              os.path.join(gpu, "bench_twohop_np8.txt"),
                              os.path.join(gpu, "bench_stage_np8.txt"))
            self.check_pngs(out, "one", result)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        with open(HOST_SAMPLE, encoding="utf-8") as f:
            self.sample = f.read().splitlines()

    def tearDown(self):
        self.tmp.cleanup()

    def check_fails(self, name, text, reason):
        path = os.path.join(self.tmp.name, name)
        if text is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(self.tmp.name, "out")
        result = run_plot("--out-dir", out, path)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith(f"plot_bench.py: {path}: "), lines[0])
        self.assertIn(reason, lines[0])
        self.assertFalse(os.path.exists(out) and os.listdir(out), "PNG written on bad input")

    def test_empty(self):
        self.check_fails("empty.txt", "", "empty input")
        self.check_fails("blank.txt", "\n  \n", "empty input")

    def test_not_benchmark_output(self):
        self.check_fails("junk.txt", "mpirun noticed that process rank 0 exited\n",
                         "expected a header")

    def test_truncated_row(self):
        rows = self.sample[:12]
        rows[-1] = rows[-1].rsplit(None, 3)[0]
        self.check_fails("truncated.txt", "\n".join(rows) + "\n", "fields, the header has")

    def test_not_a_number(self):
        rows = [r.replace(" 1.43 ", " 1.4e ") for r in self.sample]
        self.check_fails("nan.txt", "\n".join(rows) + "\n", "'1.4e' is not a number")

    def test_header_only(self):
        rows = [r for r in self.sample if r.startswith("#") or r.startswith("size(B)")]
        self.check_fails("header.txt", "\n".join(rows) + "\n", "no data rows")

    def test_every_run_failed(self):
        rows = [r if r.startswith(("#", "size")) else r.split()[0] + " n/a" * 9
                for r in self.sample]
        self.check_fails("allna.txt", "\n".join(rows) + "\n", "no measured values")

    def test_gpu_without_program_line(self):
        with open(os.path.join(ROOT, "docs", "gpu", "bench_twohop_np8.txt")) as f:
            rows = f.read().splitlines()[1:]
        self.check_fails("gpu.txt", "\n".join(rows) + "\n", "cannot tell which program")

    def test_missing_file(self):
        self.check_fails("missing.txt", None, "No such file")


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed (python3-matplotlib): skipped")
        sys.exit(77)
    unittest.main(verbosity=2)
