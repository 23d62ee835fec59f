#!/usr/bin/env python3
"""kernels/bench/variant_bench.sh on the real CUDA build tree (argv[1]): the patched copy is what
gets compiled, only the objects that depend on it are compiled again, and bad input is refused
before anything is built. Needs a configured CUDA build (nvcc, no GPU)."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "variant_bench.sh")
BUILD = None
HEADER = "kernels/attention/cuda/fpa_backward_ws.cuh"


def patch_adding(line_after, added):
    """A unified diff that inserts `added` after the first line of HEADER equal to line_after."""
    with open(os.path.join(ROOT, HEADER)) as f:
        lines = f.read().split("\n")
    i = lines.index(line_after)
    return (f"--- a/{HEADER}\n+++ b/{HEADER}\n@@ -{i + 1},1 +{i + 1},2 @@\n"
            f" {lines[i]}\n+{added}\n")


def run(*args):
    return subprocess.run(["bash", TOOL, *args], capture_output=True, text=True, timeout=900)


class VariantBenchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_builds_the_patched_header_into_a_bench_of_its_own(self):
        # A patch that breaks the header must fail the build: the patched copy is the one compiled.
        bad = self.write("bad.patch", patch_adding("#pragma once", "#error variant_bench_test"))
        r = run(BUILD, bad, "broken", os.path.join(self.tmp.name, "out"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("compiling", r.stderr)
        with open(os.path.join(self.tmp.name, "out", "broken", "build.log")) as f:
            self.assertIn("variant_bench_test", f.read())
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out", "bench-broken")))

        good = self.write("good.patch", patch_adding("#pragma once", "// a variant"))
        out = os.path.join(self.tmp.name, "out")
        r = run(BUILD, good, "comment", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.access(os.path.join(out, "bench-comment"), os.X_OK))
        with open(os.path.join(out, "comment", "objects.txt")) as f:
            objs = [os.path.basename(x) for x in f.read().split()]
        self.assertEqual(objs, ["fpa_backward.cu.o"])  # the only includer of the header
        r = subprocess.run([os.path.join(out, "bench-comment"), "--no-such-flag"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)  # the bench's own usage error: it links and starts
        self.assertIn("usage", r.stderr)

    def test_refuses_bad_input(self):
        out = os.path.join(self.tmp.name, "out")
        outside = self.write("outside.patch", "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-x\n+y\n")
        r = run(BUILD, outside, "x", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("under kernels/", r.stderr)
        dots = self.write("dots.patch", "--- a/kernels/../README.md\n+++ b/kernels/../README.md\n")
        r = run(BUILD, dots, "x", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("'..'", r.stderr)
        good = self.write("good.patch", patch_adding("#pragma once", "// a variant"))
        r = run(BUILD, good, "no/slash", out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("NAME", r.stderr)
        r = run(BUILD, os.path.join(self.tmp.name, "missing.patch"), "x", out)
        self.assertEqual(r.returncode, 2)
        stale = self.write("stale.patch", f"--- a/{HEADER}\n+++ b/{HEADER}\n@@ -1,1 +1,1 @@\n"
                           "-not the first line\n+x\n")
        r = run(BUILD, stale, "stale", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not apply", r.stderr)


if __name__ == "__main__":
    BUILD = sys.argv.pop(1)
    unittest.main()
