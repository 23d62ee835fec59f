#!/usr/bin/env python3
"""kernels/bench/gpu_suite.sh: runs a bundle's GPU test binaries in turn and summarizes them. The
binaries here stand in for the gtest programs (GPU only): they print gtest's summary lines and
exit with the status they are told to."""
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "gpu_suite.sh")

FAKE = """#!/bin/sh
echo "[==========] {n} tests ran."
echo "{line}"
echo "{name}" >> {log}
{extra}
exit {rc}
"""


class GpuSuiteTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        self.bin = os.path.join(self.d, "bin")
        os.makedirs(self.bin)
        self.log = os.path.join(self.d, "order.log")

    def tearDown(self):
        self.dir.cleanup()

    def fake(self, name, n, rc, extra=""):
        line = f"[  PASSED  ] {n} tests." if rc == 0 else f"[  FAILED  ] {n} tests, listed below:"
        path = os.path.join(self.bin, name)
        with open(path, "w") as f:
            f.write(FAKE.format(n=n, line=line, name=name, log=self.log, extra=extra, rc=rc))
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)

    def run_tool(self, *args, env=None):
        return subprocess.run(["bash", TOOL, *args], capture_output=True, text=True,
                              env={**os.environ, **(env or {})})

    def test_runs_the_named_tests_in_order_and_summarizes(self):
        self.fake("a_gpu_test", 3, 0)
        self.fake("b_gpu_test", 5, 0)
        out = os.path.join(self.d, "out")
        r = self.run_tool(self.bin, out, "b_gpu_test", "a_gpu_test")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(open(self.log).read().split(), ["b_gpu_test", "a_gpu_test"])
        suite = open(os.path.join(out, "suite.txt")).read().splitlines()
        self.assertEqual(suite, ["b_gpu_test rc=0", "[  PASSED  ] 5 tests.",
                                 "a_gpu_test rc=0", "[  PASSED  ] 3 tests."])
        self.assertEqual(r.stdout.splitlines(), suite)
        self.assertIn("[==========] 3 tests ran.",
                      open(os.path.join(out, "a_gpu_test.log")).read())

    def test_a_failure_or_a_missing_binary_fails_the_suite_and_the_rest_still_run(self):
        self.fake("a_gpu_test", 2, 1)
        self.fake("c_gpu_test", 4, 0)
        out = os.path.join(self.d, "out")
        r = self.run_tool(self.bin, out, "a_gpu_test", "b_gpu_test", "c_gpu_test")
        self.assertEqual(r.returncode, 1)
        suite = open(os.path.join(out, "suite.txt")).read().splitlines()
        self.assertEqual(suite[0:2], ["a_gpu_test rc=1", "[  FAILED  ] 2 tests, listed below:"])
        self.assertTrue(suite[2].startswith("b_gpu_test missing"), suite)
        self.assertEqual(suite[3:], ["c_gpu_test rc=0", "[  PASSED  ] 4 tests."])

    def test_time_limit_per_binary(self):
        self.fake("slow_gpu_test", 1, 0, extra="sleep 5")
        out = os.path.join(self.d, "out")
        r = self.run_tool(self.bin, out, "slow_gpu_test", env={"GPU_SUITE_TIMEOUT": "1"})
        self.assertEqual(r.returncode, 1)
        self.assertEqual(open(os.path.join(out, "suite.txt")).read().splitlines()[0],
                         "slow_gpu_test rc=124")

    def test_default_list_is_every_gpu_test_binary(self):
        names = ["fpa_gpu_test", "sagebwd_gpu_test", "determinism_gpu_test", "wgmma_gpu_test",
                 "sage_scale_gpu_test", "layers_gpu_test", "gemm_tuning_gpu_test",
                 "spectral_gpu_test", "gpt_cuda_test", "train_cuda_test", "optim_gpu_test",
                 "data_parallel_test"]
        # Every test program under tests/gpu (one source file per program) is in the list.
        sources = set()
        for dirpath, _, files in os.walk(os.path.join(ROOT, "tests", "gpu")):
            for f in files:
                stem, ext = os.path.splitext(f)
                if ext in (".cc", ".cu") and stem.endswith("_test"):
                    sources.add(stem)
        self.assertEqual(sorted(sources), sorted(names))
        for n in names:
            self.fake(n, 1, 0)
        r = self.run_tool(self.bin, os.path.join(self.d, "out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            self.assertEqual(f.read().split(), names)

    def test_argument_errors(self):
        r = self.run_tool(self.bin)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("usage", r.stderr)
        r = self.run_tool(self.bin, os.path.join(self.d, "out"), "../evil")
        self.assertEqual(r.returncode, 2)
        self.assertIn("a binary's name, not a path", r.stderr)


if __name__ == "__main__":
    unittest.main()
