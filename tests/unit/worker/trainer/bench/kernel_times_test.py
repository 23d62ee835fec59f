#!/usr/bin/env python3
"""worker/trainer/cuda/bench/kernel_times.sh and kernel_times.py with a stand-in ncu and trainer:
the stand-in ncu "profiles" a run whose kernels are a fixed start-up and final evaluation plus,
per training step, two RMSNorm launches and three GEMMs, and exports them as ncu's raw CSV (a
units row in nanoseconds, demangled names with parameter lists). The table must hold only the
per-step kernels, grouped by name, with their launches and times per step; the configs of both
runs must be the base config with only the steps (and the intervals) changed; bad arguments and
mismatched runs are refused."""
import json
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "worker", "trainer", "cuda", "bench", "kernel_times.sh")
SUMMARY = os.path.join(ROOT, "worker", "trainer", "cuda", "bench", "kernel_times.py")

FAKE_TRAIN = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
cfg = open(args[args.index("--config") + 1]).read()
if "--print-config" in args:
    steps = 100 if "steps: 100" in cfg else json.loads(cfg)["train"]["steps"]
    print(json.dumps({"config_hash": "x", "config": {"train": {"steps": steps, "warmup": 5,
        "eval_every": 0, "checkpoint_every": 0, "diagnostics_every": 0}, "device": "cuda"}}))
"""

FAKE_NCU = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if "--import" in args:
    rows = json.load(open(args[args.index("--import") + 1]))
    print('"ID","Kernel Name","gpu__time_duration.sum"')
    print('"","","nsecond"')
    for i, (name, ns) in enumerate(rows):
        print(f'"{{i}}","{{name}}","{{ns:,}}"')
    sys.exit(0)
cfg = json.load(open(args[args.index("--config") + 1]))
steps = cfg["train"]["steps"]
rows = [("void init_weights<float>(float*, int)", 5000)] * 4
for _ in range(steps):
    rows += [("void ablate::RmsNormForward<float, __nv_bfloat16>(float const*, int)", 10000)] * 2
    rows += [("sm90_xmma_gemm_bf16bf16_bf16f32", 50000)] * 3
rows += [("void eval_loss(float*)", 7000)] * 2
json.dump(rows, open(args[args.index("-o") + 1] + ".ncu-rep", "w"))
"""


def read(path):
    with open(path) as f:
        return f.read()


class KernelTimesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        d = self.tmp.name
        self.path = os.path.join(d, "path")
        os.makedirs(self.path)
        self.log = os.path.join(d, "ncu.log")
        self.exe(os.path.join(self.path, "ncu"), FAKE_NCU.format(log=self.log))
        self.train = os.path.join(d, "ablate-train")
        self.exe(self.train, FAKE_TRAIN)
        self.out = os.path.join(d, "out")
        self.env = dict(os.environ, PATH=self.path + os.pathsep + os.environ["PATH"])

    def exe(self, path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)

    def run_tool(self, *args):
        return subprocess.run(["bash", TOOL, self.train, self.out, *args], capture_output=True,
                              text=True, env=self.env, timeout=60)

    def test_the_table_holds_one_step_of_kernels(self):
        r = self.run_tool("gpt2s", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("5 kernel launches per step, 0.170 ms of kernel time per step (2 kernels",
                      r.stdout)
        self.assertIn("| `sm90_xmma_gemm_bf16bf16_bf16f32` | 3.0 | 150.0 | 50.00 | 88.2% |",
                      r.stdout)
        self.assertIn("| `ablate::RmsNormForward<float, __nv_bfloat16>` | 2.0 | 20.0 | 10.00 | "
                      "11.8% |", r.stdout)
        self.assertNotIn("init_weights", r.stdout)
        self.assertNotIn("eval_loss", r.stdout)
        self.assertEqual(read(os.path.join(self.out, "kernels.md")).strip(), r.stdout.strip())
        # Two profiled runs, 3 and 6 steps, of the base config with only the steps changed.
        profiled = [l for l in read(self.log).splitlines() if " -o " in l]
        self.assertEqual(len(profiled), 2)
        for n in (3, 6):
            c = json.loads(read(os.path.join(self.out, f"steps_{n}.yaml")))
            self.assertEqual(c["train"]["steps"], n)
            self.assertEqual(c["train"]["warmup"], min(5, n))
            self.assertEqual(c["train"]["eval_every"], 0)
            self.assertEqual(c["device"], "cuda")

    def test_bad_arguments_are_refused_before_profiling(self):
        for args, message in [(("gpt3",), "unknown shape gpt3"),
                              (("gpt2s", "0"), "STEPS must be a positive number"),
                              ((os.path.join(self.tmp.name, "none.yaml"),), "no config")]:
            r = self.run_tool(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)
        self.assertFalse(os.path.exists(self.log))

    def test_runs_that_do_not_nest_are_refused(self):
        a = os.path.join(self.tmp.name, "a.csv")
        b = os.path.join(self.tmp.name, "b.csv")
        with open(a, "w") as f:
            f.write('"ID","Kernel Name","gpu__time_duration.sum"\n"","","usecond"\n"0","k()","5"\n'
                    '"1","k()","5"\n')
        with open(b, "w") as f:
            f.write('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k()","5000"\n')
        r = subprocess.run(["python3", SUMMARY, "--steps", "1", "--base", a, b],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not a shorter run of the same config", r.stderr)
        # Without a base: a units row in microseconds, and none (ncu's nanoseconds).
        r = subprocess.run(["python3", SUMMARY, "--steps", "2", a], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| `k` | 1.0 | 5.0 | 5.00 | 100.0% |", r.stdout)
        r = subprocess.run(["python3", SUMMARY, "--steps", "1", b], capture_output=True, text=True)
        self.assertIn("| `k` | 1.0 | 5.0 | 5.00 | 100.0% |", r.stdout)


if __name__ == "__main__":
    unittest.main()
