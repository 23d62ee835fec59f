#!/usr/bin/env python3
"""kernels/bench/ncu_mix.py: per-pair opcode counts read from ncu's wrapped details page."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ncu_mix.py")

# Two kernels as ncu prints them with --print-metric-instances details (values wrapped over lines).
PAGE = """==PROF== Connected to process 1
  void first_kernel<128>(Params) (16, 64, 1)x(384, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: Command line profiler metrics
    ------------------------------ ----------- ------------------------------
    Metric Name                    Metric Unit                   Metric Value
    ------------------------------ ----------- ------------------------------
    sass__inst_executed_per_opcode                         1,024 (FFMA:
                                                            512; I2FP:
                                                       256; MUFU: 128; BRA:
                                                                   128)
    ------------------------------ ----------- ------------------------------
  my_bprop_kernel (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    sass__inst_executed_per_opcode                         64 (FMUL: 48;
                                                       HGMMA: 16)
"""


class NcuMixTest(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)

    def test_per_pair_counts(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "page.txt")
            with open(path, "w") as f:
                f.write(PAGE)
            # B H N^2 = 1 * 1 * 16^2 = 256 pairs: x 32 / 256 = / 8.
            r = self.run_tool("--pairs", "1,1,16", "--min", "0", f"{path}:first_kernel",
                              f"{path}:bprop")
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]]
                    for l in r.stdout.splitlines()[2:]}
            self.assertEqual(rows["all"], ["128.00", "8.00"])
            self.assertEqual(rows["FFMA"], ["64.00", "0.00"])
            self.assertEqual(rows["I2FP"], ["32.00", "0.00"])
            self.assertEqual(rows["BRA"], ["16.00", "0.00"])
            self.assertEqual(rows["FMUL"], ["0.00", "6.00"])
            self.assertEqual(rows["HGMMA"], ["0.00", "2.00"])
            # Opcodes by their largest count: FFMA first.
            self.assertEqual(r.stdout.splitlines()[3].split("|")[1].strip(), "FFMA")

    def test_unknown_kernel_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "page.txt")
            with open(path, "w") as f:
                f.write(PAGE)
            r = self.run_tool("--pairs", "1,1,16", f"{path}:no_such_kernel")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no_such_kernel", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
