#!/usr/bin/env python3
"""scripts/results_figures.py: Student's t against published quantiles, Welch's interval worked by
hand, and the committed docs/results/comparisons.md and SVGs are what the committed data gives
(so docs/RESULTS.md's intervals cannot drift from docs/results/*.csv / *.json)."""
import filecmp
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "results_figures.py")
spec = importlib.util.spec_from_file_location("results_figures", SCRIPT)
rf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rf)


class TQuantile(unittest.TestCase):
    def test_published_values(self):
        # Two-sided 95% critical values (t tables) and a one-sided 80% one.
        for df, want in [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423)]:
            self.assertAlmostEqual(rf.t_quantile(0.975, df), want, places=3)
        self.assertAlmostEqual(rf.t_quantile(0.80, 4), 0.9410, places=3)
        self.assertAlmostEqual(rf.t_quantile(0.5, 3), 0.0, places=6)

    def test_welch_by_hand(self):
        a = {"mean": 1.0, "std": 0.3, "n": 3}
        b = {"mean": 0.8, "std": 0.3, "n": 3}
        w = rf.welch(a, b)
        se = (0.09 / 3 + 0.09 / 3) ** 0.5  # equal variances and sizes: df = 4
        self.assertAlmostEqual(w["d"], 0.2)
        self.assertAlmostEqual(w["se"], se)
        self.assertAlmostEqual(w["df"], 4.0)
        self.assertAlmostEqual(w["hi"] - w["d"], 2.7764 * se, places=3)
        self.assertAlmostEqual(w["mdd"], (2.7764 + 0.9410) * se, places=3)


class Studies(unittest.TestCase):
    def test_paired_by_hand(self):
        r = rf.paired([0.1, 0.2, 0.3])
        se = 0.1 / 3 ** 0.5  # sd of 0.1, 0.2, 0.3 is 0.1
        self.assertAlmostEqual(r["d"], 0.2)
        self.assertAlmostEqual(r["hi"] - r["d"], 4.3027 * se, places=3)
        self.assertAlmostEqual(r["mdd"], (4.3027 + rf.t_quantile(0.80, 2)) * se, places=4)

    def test_best_rate_is_chosen_on_common_seeds_of_rates_with_two_or_more(self):
        arm = (("optimizer.p", "1"),)
        cells = {(arm, "0.01"): {"0": 5.0, "1": 5.2, "2": 9.0},   # seed 2 is bad everywhere
                 (arm, "0.03"): {"0": 5.1, "1": 5.0},              # best on seeds 0 and 1
                 (arm, "0.1"): {"0": 4.0}}                          # one seed: not a candidate
        b = rf.best_rates(cells, {arm: dict(arm)}, {arm: {"0.003", "0.01", "0.03", "0.1"}})[arm]
        self.assertEqual(b["lr"], "0.03")
        self.assertEqual(b["seeds"], ["0", "1"])
        self.assertAlmostEqual(b["mean"], 5.05)
        self.assertFalse(b["edge"])
        self.assertEqual(b["beaten"], ["0.1"])  # lower on its one seed: the best is not pinned down
        b = rf.best_rates({(arm, "0.01"): {"0": 5.0, "1": 5.0}, (arm, "0.03"): {"0": 6.0, "1": 6.0}},
                          {arm: dict(arm)}, {arm: {"0.01", "0.03"}})[arm]
        self.assertTrue(b["edge"])


class CommittedOutputs(unittest.TestCase):
    def test_regenerated_outputs_equal_the_committed_ones(self):
        data = os.path.join(ROOT, "docs", "results")
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, SCRIPT, "--data", data, "--out", out], check=True,
                           stdout=subprocess.DEVNULL)
            for name in ["comparisons.md", "intervals.svg", "sigma.svg", "decompose.svg",
                         "bias_noise.svg", "seed_spread.md", "seed_spread.svg", "studies.md",
                         "spectral_lr.svg"]:
                self.assertTrue(filecmp.cmp(os.path.join(out, name), os.path.join(data, name),
                                            shallow=False), name + " differs: rerun "
                                "scripts/results_figures.py and commit its outputs")

    def test_the_paired_interval_equals_ablate_compares(self):
        # The same seeds through `ablate compare` on the GPU machine (its output is committed).
        with open(os.path.join(ROOT, "docs", "results", "seed_spread.md")) as f:
            ours = f.read()
        with open(os.path.join(ROOT, "docs", "results", "gpu_seed_spread_compare.txt")) as f:
            theirs = f.read()
        self.assertIn("-0.0016 [-0.0183, +0.0151]", ours)
        self.assertIn("-0.0016 [-0.0183, 0.0151]", theirs)

    def test_the_studies_intervals_equal_ablate_compares(self):
        # The attention study's first run (run 2 in its trials file: 54 trials, two rates per arm)
        # through `ablate compare --best-over optimizer.lr` on that run's coordinator database (its
        # output is committed) and through this script's study tables on the same trials.
        src = os.path.join(ROOT, "docs", "results", "gpu_study_attention_trials.csv")
        with open(src) as f:
            lines = f.read().splitlines()
        col = lines[0].split(",").index("run")
        first = [lines[0]] + [l for l in lines[1:] if l.split(",")[col] == "2"]
        self.assertEqual(len(first), 1 + 54)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "gpu_study_attention_trials.csv"), "w") as f:
                f.write("\n".join(first) + "\n")
            ours = rf.study_tables(d)
        with open(os.path.join(ROOT, "docs", "results", "gpu_study_attention_compare.txt")) as f:
            theirs = f.read()
        for a, b in [("| +0.0017 | [-0.0718, +0.0752]", "0.0017 [-0.0718, 0.0752]"),
                     ("| -0.0190 | [-0.0945, +0.0566]", "-0.0190 [-0.0945, 0.0566]"),
                     ("| +0.0091 | [-0.0418, +0.0600]", "0.0091 [-0.0418, 0.0600]"),
                     ("| -0.0065 | [-0.0960, +0.0829]", "-0.0065 [-0.0960, 0.0829]")]:
            self.assertIn(a, ours)
            self.assertIn(b, theirs)

    def assert_page_quotes(self, table, rows):
        """docs/RESULTS.md quotes the interval (5th cell) of each markdown row of `table`."""
        with open(os.path.join(ROOT, "docs", "RESULTS.md")) as f:
            page = f.read()
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            interval = cells[4].split("]")[0] + "]"
            # RESULTS.md writes the same bounds with a real minus sign.
            quoted = interval.replace("-", "\u2212")
            self.assertTrue(quoted in page, "docs/RESULTS.md does not quote %s for %s (%s)"
                            % (quoted, cells[1], table))

    def test_results_page_quotes_the_intervals(self):
        with open(os.path.join(ROOT, "docs", "results", "comparisons.md")) as f:
            self.assert_page_quotes("comparisons.md", f.read().splitlines()[2:])

    def test_results_page_quotes_the_studies_intervals(self):
        with open(os.path.join(ROOT, "docs", "results", "studies.md")) as f:
            rows = [r for r in f.read().splitlines() if r.count("|") == 8 and "[" in r]
        self.assertGreater(len(rows), 10)
        self.assert_page_quotes("studies.md", rows)


if __name__ == "__main__":
    unittest.main()
