#!/usr/bin/env python3
"""kernels/bench/lab_run.sh: the lab's steps in order, each logged, and the same-run A/B against a
base bench binary when one is given. The test programs here stand in for the GPU binaries: they
log their name and print gtest's summary line; the benches write the bench's JSON (their ms, so
the A/B's base / new is known)."""
import importlib.util
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "lab_run.sh")
# Without PyTorch (CI) the SDPA step fails, and with it the comparison: exit status 1.
EXPECTED_RC = 0 if importlib.util.find_spec("torch") else 1

TEST = """#!/bin/sh
echo "{name}" >> {log}
echo "[  PASSED  ] 1 test."
"""

BENCH = """#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write("{name} " + " ".join(a[:a.index("--json")]) + "\\n")
results = []
if "--shape" in a:
    shape = [int(x) for x in a[a.index("--shape") + 1].split(",")]
    results.append({{"impl": "fpa", "B": shape[0], "H": shape[1], "N": shape[2], "D": shape[3],
                    "causal": a[a.index("--causal") + 1] == "yes", "pass": "bwd", "ms": {ms},
                    "tflops": 1.0}})
json.dump({{"results": results}}, open(a[a.index("--json") + 1], "w"))
"""


class LabRunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        self.bin = os.path.join(self.d, "bin")
        os.makedirs(self.bin)
        self.log = os.path.join(self.d, "order.log")
        for t in ("wgmma_gpu_test", "fpa_gpu_test", "determinism_gpu_test", "sagebwd_gpu_test"):
            self.write(os.path.join(self.bin, t), TEST.format(name=t, log=self.log))
        self.write(os.path.join(self.bin, "ablate-attention-bench"),
                   BENCH.format(name="new", log=self.log, ms=0.5))
        self.base = os.path.join(self.d, "bench-base")
        self.write(self.base, BENCH.format(name="base", log=self.log, ms=1.0))

    def tearDown(self):
        self.dir.cleanup()

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)

    def run_tool(self, *args):
        return subprocess.run(["bash", TOOL, *args], capture_output=True, text=True)

    def order(self):
        with open(self.log) as f:
            return [l.split()[0] for l in f.read().splitlines()]

    def test_tests_then_ab_then_bench(self):
        out = os.path.join(self.d, "out")
        r = self.run_tool(self.bin, out, self.base)
        self.assertEqual(r.returncode, EXPECTED_RC, r.stdout + r.stderr)
        order = self.order()
        tests = ["wgmma_gpu_test", "fpa_gpu_test", "determinism_gpu_test", "sagebwd_gpu_test"]
        self.assertEqual(order[:4], tests)
        # 2 rounds x 7 shapes, new and base alternately, then the full bench once.
        self.assertEqual(order[4:], ["new", "base"] * 14 + ["new"])
        for t in tests:
            self.assertIn(f"== {t}: exit 0", r.stdout)
        with open(os.path.join(out, "ab", "ab_ablate-attention-bench.md")) as f:
            rows = [l for l in f if l.startswith("| fpa")]
        self.assertEqual(len(rows), 7)
        self.assertTrue(all(l.rstrip().endswith("| 2.000 |") for l in rows), rows)  # base / new
        with open(self.log) as f:
            ab_lines = [l for l in f if l.startswith("base")]
        self.assertTrue(all("--deterministic no" in l for l in ab_lines), ab_lines)

    def test_without_a_base_no_ab(self):
        out = os.path.join(self.d, "out")
        r = self.run_tool(self.bin, out)
        self.assertEqual(r.returncode, EXPECTED_RC, r.stdout + r.stderr)
        self.assertEqual(self.order()[4:], ["new"])
        self.assertFalse(os.path.exists(os.path.join(out, "ab")))

    def test_a_failing_test_fails_the_run_and_the_rest_still_runs(self):
        self.write(os.path.join(self.bin, "fpa_gpu_test"), "#!/bin/sh\nexit 3\n")
        r = self.run_tool(self.bin, os.path.join(self.d, "out"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("== fpa_gpu_test: exit 3", r.stdout)
        self.assertEqual(self.order(), ["wgmma_gpu_test", "determinism_gpu_test",
                                        "sagebwd_gpu_test", "new"])


if __name__ == "__main__":
    unittest.main()
