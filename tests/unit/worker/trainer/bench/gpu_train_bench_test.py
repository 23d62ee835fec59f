#!/usr/bin/env python3
"""worker/trainer/cuda/bench/gpu_train_bench.sh with a stand-in ablate-train (it logs its
arguments, answers --tune-gemm with a table file and trains by printing start and step lines, a
tuned run faster than a plain one): each shape is tuned once, each attention runs plain and with
the table, the table has a row for each, GPU_TRAIN_GEMM_TUNING=0 leaves the tuned runs out, and a
failed tuning leaves its rows saying so without running them untuned."""
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "worker", "trainer", "cuda", "bench", "gpu_train_bench.sh")

FAKE_TRAIN = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
cfg = open(args[args.index("--config") + 1]).read()
if "--tune-gemm" in args:
    if os.environ.get("FAKE_TUNE_FAIL"):
        print("ablate-train: no GPU", file=sys.stderr)
        sys.exit(2)
    open(args[args.index("--tune-gemm") + 1], "w").write("{{}}\\n")
    print("| problem | heuristic ms | chosen ms |")
    sys.exit(0)
tuned = "--gemm-tuning" in args
steps = int(cfg.split("steps: ")[1].split(",")[0])
start = {{"type": "start", "device": "Stand-in GPU", "optimizer_device": "cuda"}}
if tuned:
    start["gemm_tuning"] = {{"digest": "0123456789abcdef"}}
print(json.dumps(start))
for s in range(1, steps + 1):
    print(json.dumps({{"type": "step", "step": s, "tokens_per_s": 1100.0 if tuned else 1000.0,
                      "mfu": 0.4, "step_time_s": 0.01}}))
"""


def read(path):
    with open(path) as f:
        return f.read()


class GpuTrainBenchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.log = os.path.join(self.tmp.name, "train.log")
        self.train = os.path.join(self.tmp.name, "ablate-train")
        with open(self.train, "w") as f:
            f.write(FAKE_TRAIN.format(log=self.log))
        os.chmod(self.train, os.stat(self.train).st_mode | stat.S_IEXEC)
        self.out = os.path.join(self.tmp.name, "out")

    def run_tool(self, env=None):
        return subprocess.run(["bash", TOOL, self.train, self.out, "8", "gpt2s"],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, **(env or {})))

    def calls(self):
        return read(self.log).splitlines()

    def test_each_run_plain_and_tuned_with_one_table_per_shape(self):
        r = self.run_tool()
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = self.calls()
        tunes = [c for c in calls if "--tune-gemm" in c]
        self.assertEqual(tunes, [f"--config {self.out}/gpt2s.tune.yaml --tune-gemm "
                                 f"{self.out}/gpt2s.tuning.json"])
        runs = [c for c in calls if "--tune-gemm" not in c]
        self.assertEqual(len(runs), 4)
        table = os.path.join(self.out, "gpt2s.tuning.json")
        self.assertEqual(sum(c.endswith(f"--gemm-tuning {table}") for c in runs), 2)
        for att in ("fpa", "sagebwd"):
            self.assertIn(f"| ablate-train {att} + adamw (optimizer on cuda) | 1,000 |", r.stdout)
            self.assertIn(f"| ablate-train {att} + adamw, tuned GEMMs (optimizer on cuda) | 1,100 |",
                          r.stdout)
        self.assertIn("kind: fpa", read(os.path.join(self.out, "gpt2s.tune.yaml")))

    def test_tuning_off_leaves_the_tuned_runs_out(self):
        r = self.run_tool({"GPU_TRAIN_GEMM_TUNING": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = self.calls()
        self.assertEqual(len(calls), 2)
        self.assertFalse(any("gemm" in c for c in calls))
        self.assertNotIn("tuned GEMMs", r.stdout)
        self.assertIn("| ablate-train fpa + adamw (optimizer on cuda) | 1,000 |", r.stdout)

    def test_a_failed_tuning_says_so_and_runs_nothing_untuned_in_its_place(self):
        r = self.run_tool({"FAKE_TUNE_FAIL": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--tune-gemm", r.stderr)
        self.assertIn("no GPU", r.stderr)
        runs = [c for c in self.calls() if "--tune-gemm" not in c]
        self.assertEqual(len(runs), 2)
        self.assertFalse(any("--gemm-tuning" in c for c in runs))
        for att in ("fpa", "sagebwd"):
            self.assertIn(f"| ablate-train {att} + adamw, tuned GEMMs (failed: gpt2s.tuning.err) |",
                          r.stdout)
            self.assertIn(f"| ablate-train {att} + adamw (optimizer on cuda) | 1,000 |", r.stdout)

    def test_an_unknown_shape_is_refused(self):
        r = subprocess.run(["bash", TOOL, self.train, self.out, "8", "gpt3"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown shape gpt3", r.stderr)
        self.assertFalse(os.path.exists(self.log))


if __name__ == "__main__":
    unittest.main()
