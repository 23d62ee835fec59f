#!/usr/bin/env python3
"""kernels/bench/ncu_summary.py: the metrics it picks from ncu's raw CSV, the units row, the
stall ranking, and a missing report."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ncu_summary.py")
sys.path.insert(0, os.path.dirname(TOOL))
import ncu_summary  # noqa: E402

HEADER = ['"ID"', '"Kernel Name"', '"gpu__time_duration.sum"',
          '"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"',
          '"launch__registers_per_thread"', '"sm__throughput.avg.pct_of_peak_sustained_elapsed"',
          '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"',
          '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"',
          '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"',
          '"unrelated__metric.sum"']
UNITS = ['""', '""', '"us"', '"%"', '"register/thread"', '"%"', '"ratio"', '"ratio"', '"ratio"', '""']


def row(name, us, tensor, regs, stalls):
    return ['"0"', f'"{name}"', f'"{us}"', f'"{tensor}"', f'"{regs}"', '"71.5"',
            *[f'"{s}"' for s in stalls], '"9"']


class NcuSummaryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def csv(self, name, rows, notes=True):
        path = os.path.join(self.tmp.name, name + ".csv")
        with open(path, "w") as f:
            if notes:
                f.write("==PROF== Disconnected from process 1\n")
            for r in rows:
                f.write(",".join(r) + "\n")
        return path

    def test_picks_the_limits_of_each_kernel(self):
        a = self.csv("fpa_bwd", [HEADER, UNITS,
                                 row("first launch", "999", "1", "1", ["0", "0", "0"]),
                                 row("FpaBackwardWsKernel<128, false>", "1,234.5", "61.2", "168",
                                     ["0.40", "2.50", "1.10"])])
        b = self.csv("cudnn_bwd", [HEADER, row("cudnn_generated_fort_native_sdpa_sm90_flash_bprop",
                                               "987.0", "80.1", "255", ["3.0", "0.2", "0"])],
                     notes=False)
        r = subprocess.run([sys.executable, TOOL, "--title", "B4 H16 N2048 d128", "--stalls", "2",
                            a, b, os.path.join(self.tmp.name, "sage_bwd.csv")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("| metric | fpa_bwd | cudnn_bwd | sage_bwd |", lines)
        self.assertIn("| kernel | FpaBackwardWsKernel<128, false> | "
                      "cudnn_generated_fort_native_sdpa_sm90_flash_bprop | not profiled |", lines)
        # The last launch of a file, its unit from the units row (none where the file has none).
        self.assertIn("| time (us) | 1,234.5 | 987.0 |  |", lines)
        self.assertIn("| tensor pipe (sm__pipe_tensor_op_gmma_cycles_active) (%) | 61.2 | 80.1 |  |",
                      lines)
        self.assertIn("| registers / thread (register/thread) | 168 | 255 |  |", lines)
        self.assertFalse(any("unrelated" in line for line in lines))
        # The two leading stall reasons, largest first; a zero reason is left out.
        self.assertIn("| stalls of fpa_bwd (cycles per issue) | long_scoreboard 2.50, wait 1.10 |  |  |",
                      lines)
        self.assertIn("| stalls of cudnn_bwd (cycles per issue) |  | barrier 3.00, long_scoreboard 0.20 |  |",
                      lines)
        self.assertFalse(any(line.startswith("| stalls of sage_bwd") for line in lines))

    def test_nothing_profiled_exits_one(self):
        empty = self.csv("fpa_bwd", [["==ERROR== The application returned an error code (1)."]],
                         notes=False)
        r = subprocess.run([sys.executable, TOOL, empty], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not profiled", r.stdout)
        self.assertIsNone(ncu_summary.read_report(os.path.join(self.tmp.name, "missing.csv")))


if __name__ == "__main__":
    unittest.main()
