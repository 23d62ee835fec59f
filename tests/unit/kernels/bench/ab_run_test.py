#!/usr/bin/env python3
"""kernels/bench/ab_run.sh: runs every binary on every shape in turn, round after round, and
tables each against the last. The binaries here stand in for ablate-attention-bench (GPU only):
they take its flags, log their order and write its JSON with a fixed time per binary."""
import json
import os
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ab_run.sh")

FAKE = """#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
shape = [int(x) for x in a[a.index("--shape") + 1].split(",")]
causal = a[a.index("--causal") + 1] == "yes"
with open({log!r}, "a") as f:
    f.write("{name} " + " ".join(a[:a.index("--json")]) + "\\n")
r = {{"impl": "sagebwd", "B": shape[0], "H": shape[1], "N": shape[2], "D": shape[3],
      "causal": causal, "pass": "bwd", "ms": {ms}, "tflops": 1.0}}
json.dump({{"results": [r]}}, open(a[a.index("--json") + 1], "w"))
"""


class AbRunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        self.log = os.path.join(self.d, "order.log")

    def tearDown(self):
        self.dir.cleanup()

    def fake(self, sub, name, ms):
        os.makedirs(os.path.join(self.d, sub), exist_ok=True)
        path = os.path.join(self.d, sub, name)
        with open(path, "w") as f:
            f.write(FAKE.format(log=self.log, name=f"{sub}/{name}", ms=ms))
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        return path

    def run_tool(self, *args, env=None):
        return subprocess.run(["bash", TOOL, *args], capture_output=True, text=True,
                              env={**os.environ, **(env or {})})

    def test_alternates_and_tables_against_the_last(self):
        new, other, base = (self.fake("a", "new", 0.5), self.fake("b", "other", 2.0),
                            self.fake("c", "base", 1.0))
        out = os.path.join(self.d, "out")
        r = self.run_tool(out, "2", "4,16,2048,128:no 1,2,64,64:yes", new, other, base,
                          env={"AB_FLAGS": "--impl sage"})
        self.assertEqual(r.returncode, 0, r.stderr)
        order = [l.split()[0] for l in open(self.log).read().splitlines()]
        self.assertEqual(order, ["a/new", "b/other", "c/base"] * 4)  # 2 rounds x 2 shapes
        self.assertTrue(all("--impl sage" in l for l in open(self.log)))
        self.assertEqual(sorted(os.listdir(os.path.join(out, "new"))),
                         ["1_1,2,64,64_yes.json", "1_4,16,2048,128_no.json",
                          "2_1,2,64,64_yes.json", "2_4,16,2048,128_no.json"])
        rows = [l for l in open(os.path.join(out, "ab_new.md")) if l.startswith("| sagebwd")]
        self.assertEqual(len(rows), 2)
        self.assertTrue(all(l.rstrip().endswith("| 2.000 |") for l in rows), rows)  # base / new
        rows = [l for l in open(os.path.join(out, "ab_other.md")) if l.startswith("| sagebwd")]
        self.assertTrue(all(l.rstrip().endswith("| 0.500 |") for l in rows), rows)
        self.assertFalse(os.path.exists(os.path.join(out, "ab_base.md")))

    def test_bad_arguments_say_what_is_wrong(self):
        a, b = self.fake("a", "bench", 1.0), self.fake("b", "bench", 1.0)
        r = self.run_tool(os.path.join(self.d, "o"), "1", "1,1,64,64:no", a, b)
        self.assertEqual(r.returncode, 2)
        self.assertIn("two binaries named bench", r.stderr)
        c = self.fake("c", "base", 1.0)
        r = self.run_tool(os.path.join(self.d, "o"), "1", "1,1,64,64:maybe", a, c)
        self.assertEqual(r.returncode, 2)
        self.assertIn("1,1,64,64:maybe: causal must be yes or no", r.stderr)
        r = self.run_tool(os.path.join(self.d, "o"), "1", "1,1,64,64:no", a)
        self.assertEqual(r.returncode, 2)
        self.assertIn("at least two binaries", r.stderr)


if __name__ == "__main__":
    unittest.main()
