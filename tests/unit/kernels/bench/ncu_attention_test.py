#!/usr/bin/env python3
"""kernels/bench/ncu_attention.sh with a stand-in ncu on the PATH (it logs its arguments, writes
the report files it is asked for and prints a raw CSV on import): the three kernels are profiled
with the shape and causality asked for, each report is exported, the summary has a column per
kernel, and bad arguments are refused before anything runs."""
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ncu_attention.sh")

FAKE_NCU = """#!/usr/bin/env python3
import sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if "--import" in args:
    rep = args[args.index("--import") + 1]
    if "--csv" in args:
        name = open(rep).read().strip()
        print('"ID","Kernel Name","gpu__time_duration.sum"')
        print('"","","us"')
        print('"0","' + name + '","12.5"')
    else:
        print("details of " + rep)
    sys.exit(0)
out = args[args.index("-o") + 1]
kernel = args[args.index("-k") + 1].split(":", 1)[1]
with open(out + ".ncu-rep", "w") as f:
    f.write(kernel + "Kernel\\n")
"""


class NcuAttentionTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        d = self.tmp.name
        self.bin = os.path.join(d, "bin")
        self.path = os.path.join(d, "path")
        os.makedirs(self.bin)
        os.makedirs(self.path)
        self.log = os.path.join(d, "ncu.log")
        self.exe(os.path.join(self.path, "ncu"), FAKE_NCU.format(log=self.log))
        self.exe(os.path.join(self.bin, "ablate-attention-bench"), "#!/bin/sh\nexit 0\n")
        self.env = dict(os.environ, PATH=self.path + os.pathsep + os.environ["PATH"])

    def exe(self, path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)

    def run_tool(self, *args):
        return subprocess.run(["bash", TOOL, self.bin, os.path.join(self.tmp.name, "out"), *args],
                              capture_output=True, text=True, env=self.env, timeout=60)

    def test_profiles_the_three_backwards_and_tables_them(self):
        r = self.run_tool("2,8,4096,64", "yes")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            calls = f.read().splitlines()
        profiles = [c for c in calls if " -o " in c]
        self.assertEqual(len(profiles), 3)
        for c in profiles:
            self.assertIn("--clock-control none", c)
            self.assertIn("--set full", c)
        self.assertIn("-k regex:FpaBackwardWs", profiles[0])
        self.assertIn("--impl fpa --shape 2,8,4096,64 --causal yes", profiles[0])
        self.assertIn("-k regex:SageBackwardKernel", profiles[1])
        self.assertIn("--impl sage --shape 2,8,4096,64 --causal yes", profiles[1])
        self.assertIn("-k regex:bprop", profiles[2])
        out = os.path.join(self.tmp.name, "out")
        with open(os.path.join(out, "cudnn_bwd.py")) as f:
            script = f.read()
        self.assertIn("torch.randn(2, 8, 4096, 64,", script)
        self.assertIn("is_causal=True", script)
        self.assertEqual(sum("--import" in c for c in calls), 6)  # details and raw, per kernel
        self.assertIn("| metric | fpa_bwd | sage_bwd | cudnn_bwd |", r.stdout)
        self.assertIn("| kernel | FpaBackwardWsKernel | SageBackwardKernelKernel | bpropKernel |",
                      r.stdout)
        self.assertIn("| time (us) | 12.5 | 12.5 | 12.5 |", r.stdout)
        with open(os.path.join(out, "summary.md")) as f:
            self.assertEqual(f.read(), r.stdout)

    def test_non_causal_by_default(self):
        r = self.run_tool()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp.name, "out", "cudnn_bwd.py")) as f:
            script = f.read()
        self.assertIn("torch.randn(4, 16, 2048, 128,", script)
        self.assertIn("is_causal=False", script)

    def test_refuses_bad_arguments_before_profiling(self):
        for args, what in ((("4,16,2048,96",), "shape"), (("4,16,2048,128", "maybe"), "causal"),
                           (("4,16,2048",), "shape")):
            r = self.run_tool(*args)
            self.assertEqual(r.returncode, 2)
            self.assertIn(what, r.stderr)
        os.remove(os.path.join(self.bin, "ablate-attention-bench"))
        r = self.run_tool()
        self.assertEqual(r.returncode, 2)
        self.assertIn("ablate-attention-bench", r.stderr)
        self.assertFalse(os.path.exists(self.log))


if __name__ == "__main__":
    unittest.main()
