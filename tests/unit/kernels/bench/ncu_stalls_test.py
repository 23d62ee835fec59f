#!/usr/bin/env python3
"""kernels/bench/ncu_stalls.py: stall reasons and hot instructions from ncu's SASS source page."""
import csv
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ncu_stalls.py")

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
          "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]
# A producer's mbarrier poll (offset 0x0, outside the loop) and a three-instruction loop at
# 0x10..0x30, as `ncu --page source --csv --print-source sass` writes them.
ROWS = [
    ["0x7f0000001000", "@P0   BRA 0x7f0000001000", "90", "12", "88", "2", "88"],
    ["0x7f0000001010", "FENCE.VIEW.ASYNC.S", "7", "64", "6", "1", "6"],
    ["0x7f0000001020", "I2FP.F32.S32 R1, R2", "7", "640", "0", "7", "0"],
    ["0x7f0000001030", "FFMA R3, R1, R4, R3", "3", "640", "0", "3", "0"],
]


def write(path, rows, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void k<128>(P)", ""])
        w.writerow(HEADER)
        w.writerows(rows)


class NcuStallsTest(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)

    def test_whole_kernel(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "src.csv.gz")
            write(path, ROWS, gz=True)
            r = self.run_tool(path, "--top", "2")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            self.assertEqual(lines[0], "void k<128>(P)")
            self.assertEqual(lines[1], "warp samples 107, warp instructions executed 1356")
            # Not-issued columns are not counted again; the producer's poll dominates.
            self.assertTrue(lines[2].startswith("stall_long_sb"), lines[2])
            self.assertIn(" 94 ", lines[2])
            self.assertIn("87.9%", lines[2])
            self.assertIn("('BRA', 88)", lines[2])
            hot = lines[lines.index(next(l for l in lines if l.startswith("instructions"))) + 1:]
            self.assertEqual(len(hot), 2)
            self.assertTrue(hot[0].startswith("90 0 @P0   BRA"), hot[0])
            self.assertTrue(hot[1].startswith("7 10 FENCE"), hot[1])

    def test_offset_range_keeps_one_loop(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "src.csv")
            write(path, ROWS)
            r = self.run_tool(path, "--lo", "10", "--hi", "30")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            self.assertEqual(lines[1],
                             "warp samples 14, warp instructions executed 704 in offsets [10, 30)")
            self.assertTrue(lines[2].startswith("stall_wait"), lines[2])
            self.assertIn("57.1%", lines[2])
            self.assertIn("42.9%", lines[3])  # long_sb 6 of 14: the fence only
            self.assertNotIn("BRA", r.stdout)
            self.assertNotIn("FFMA", r.stdout)  # offset 0x30 is past the range

    def test_errors_say_what_is_wrong(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "src.csv")
            write(path, ROWS)
            r = self.run_tool(path, "--lo", "100")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no instruction in the offset range [100, end)", r.stderr)
            other = os.path.join(d, "details.csv")
            with open(other, "w") as f:
                f.write('"ID","Kernel Name"\n"0","k"\n')
            r = self.run_tool(other)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not an ncu SASS source page", r.stderr)


if __name__ == "__main__":
    unittest.main()
