"""The Python client against the real system on loopback: ablated (--http), one ablate-worker on
two CPU slots running the real ablate-train, and a 24-trial CPU sweep submitted with the real
`ablate` CLI (attention.kind x attention.qk_norm x train.max_loss x 3 seeds; train.max_loss 5.4
is below the first step's loss, so half the trials diverge at step 1 and lack most metrics).
What the client returns is checked against independent readings:
- trials(): the SQLite database read with Python's sqlite3 (trial ids, states, attempts, seeds,
  builds, axis values as the config's typed JSON, the latest value of every metric or None);
- metrics(): the `metrics` table's rows of those names (one per step, the latest attempt's);
- export(csv): the same rows as trials()' JSON lines;
- series(): the same table, whole and downsampled;
- compare(): `ablate compare SWEEP --factor K --format json` run with the real CLI;
- sweeps()/sweep(): the sweep by name, id and sweep:ID; from_data_dir() and both address forms;
- errors: a wrong token is ApiError 401, an unknown sweep or trial 404, a bad parameter 400.

    python3 python/tests/test_coordinator.py --ablated BIN --worker BIN --cli BIN --trainer BIN
Binaries default to $ABLATED, $ABLATE_WORKER, $ABLATE_CLI, $ABLATE_TRAIN, else build/bin/.
Exit 77 (skip) when one is missing. ABLATE_PY_TEST_KEEP=1 keeps the scratch folder.
"""
import argparse
import csv
import io
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import ablate  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = {}  # ablated, worker, cli, trainer: set in main()

SWEEP = "py-client"
SPEC = """name: py-client
base:
  data:      {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model:     {seq_len: 32, layers: 1, d_model: 32, heads: 2, mlp: gelu, tie_embeddings: true}
  attention: {kind: sagebwd, qk_norm: true, smooth_k: true}
  optimizer: {kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, newton_iters: 10}
  train:     {steps: 40, tokens_per_step: 512, micro_batch: 16, warmup: 4, schedule: cosine,
              eval_every: 20, diagnostics_every: 20, checkpoint_every: 20, threads: 1}
  device: cpu
grid:
  attention.kind: [fpa, sagebwd]
  attention.qk_norm: [true, false]
  train.max_loss: [20, 5.4]
seeds: [0, 1, 2]
order: grid
resources: {gpus: 0}
max_attempts: 2
"""
AXES = ["attention.kind", "attention.qk_norm", "train.max_loss"]
PROVENANCE = ["trial_id", "state", "attempt", "seed", "build_version", "build_commit",
              "numerics_version"]


def wait_file(path, proc, log, seconds=30):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                return text
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}:\n{read(log)}")
        time.sleep(0.05)
    raise RuntimeError(f"{path} did not appear within {seconds} s:\n{read(log)}")


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def dotted(config, key):
    """config['a']['b'] for 'a.b' (the typed value the spec gave the trainer)."""
    v = config
    for part in key.split("."):
        v = v[part]
    return v


def same(a, b):
    """Equal JSON values, bools kept apart from numbers (True == 1 in Python)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class CoordinatorTest(unittest.TestCase):
    procs = []

    @classmethod
    def start(cls, name, args):
        log = os.path.join(cls.dir, name + ".log")
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        with open(log, "ab") as out:
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=env)
        cls.procs.append(p)
        return p, log

    @classmethod
    def cli(cls, *args, check=True, timeout=60):
        r = subprocess.run([BIN["cli"], *args], capture_output=True, text=True, env=cls.env,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"ablate {' '.join(args)}: exit {r.returncode}\n{r.stdout}"
                                 f"{r.stderr}")
        return r

    @classmethod
    def setUpClass(cls):
        cls.t0 = time.monotonic()
        cls.dir = tempfile.mkdtemp(prefix="ablate_py_")
        try:
            cls._setup()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _setup(cls):
        cls.coord = os.path.join(cls.dir, "coord")
        ablated, log = cls.start("ablated", [BIN["ablated"], "--data-dir", cls.coord, "--grpc",
                                             "127.0.0.1:0", "--http", "127.0.0.1:0"])
        cls.grpc = wait_file(os.path.join(cls.coord, "ablated.addr"), ablated, log)
        cls.http = wait_file(os.path.join(cls.coord, "ablated.http"), ablated, log)
        cls.token_file = os.path.join(cls.coord, "token")
        cls.token = read(cls.token_file).strip()
        cls.env = dict(os.environ, ABLATE_COORDINATOR=cls.grpc, ABLATE_TOKEN_FILE=cls.token_file)
        cls.start("worker", [BIN["worker"], "--coordinator", cls.grpc, "--token-file",
                             cls.token_file, "--gpus", "none", "--cpu-slots", "2", "--work-dir",
                             os.path.join(cls.dir, "worker"), "--trainer", BIN["trainer"]])
        spec = os.path.join(cls.dir, "py.yaml")
        with open(spec, "w", encoding="utf-8") as f:
            f.write(SPEC)
        out = cls.cli("submit", spec).stdout
        assert "24 trials" in out, out
        # Exit 7: finished with failed or canceled trials; the diverged ones are expected here.
        w = cls.cli("watch", SWEEP, check=False, timeout=240)
        assert w.returncode in (0, 7), f"watch: exit {w.returncode}\n{w.stdout}{w.stderr}"
        cls.sweep_seconds = time.monotonic() - cls.t0
        cls.client = ablate.Client.from_data_dir(cls.coord)
        cls.db = sqlite3.connect(f"file:{os.path.join(cls.coord, 'ablate.db')}?mode=ro",
                                 uri=True)
        cls.db.row_factory = sqlite3.Row
        cls.sweep_id = cls.db.execute("SELECT id FROM sweeps WHERE name = ?",
                                      (SWEEP,)).fetchone()[0]

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "db", None) is not None:
            cls.db.close()
        for p in reversed(cls.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        cls.procs = []
        if os.environ.get("ABLATE_PY_TEST_KEEP") == "1":
            print(f"kept {cls.dir}", file=sys.stderr)
        else:
            shutil.rmtree(cls.dir, ignore_errors=True)
        print(f"sweep ready after {getattr(cls, 'sweep_seconds', float('nan')):.1f} s, "
              f"all done after {time.monotonic() - cls.t0:.1f} s", file=sys.stderr)

    # ---- independent readings ---------------------------------------------------------------

    def db_trials(self):
        return self.db.execute("SELECT * FROM trials WHERE sweep_id = ? ORDER BY id",
                               (self.sweep_id,)).fetchall()

    def db_points(self, names):
        """{(trial_id, name, step): value} of the metrics table, the latest attempt per step."""
        marks = ",".join("?" * len(names))
        rows = self.db.execute(
            f"SELECT m.trial_id, m.name, m.step, m.value FROM metrics m JOIN trials t "
            f"ON t.id = m.trial_id WHERE t.sweep_id = ? AND m.name IN ({marks}) "
            f"ORDER BY m.trial_id, m.name, m.step, m.attempt", (self.sweep_id, *names))
        return {(r[0], r[1], r[2]): r[3] for r in rows}  # later attempts overwrite

    # ---- the checks -------------------------------------------------------------------------

    def test_sweeps_and_sweep(self):
        by_name = {s["name"]: s for s in self.client.sweeps()}
        self.assertIn(SWEEP, by_name)
        s = by_name[SWEEP]
        self.assertEqual((s["id"], s["total"], s["finished"]), (self.sweep_id, 24, True))
        self.assertEqual(s["counts"]["succeeded"] + s["counts"]["diverged"], 24)
        self.assertIn(SWEEP, [x["name"] for x in self.client.sweeps(archived=True)])
        for ref in (SWEEP, self.sweep_id, str(self.sweep_id), f"sweep:{self.sweep_id}", s):
            one = self.client.sweep(ref)
            self.assertEqual((one["id"], one["name"]), (self.sweep_id, SWEEP), ref)
        self.assertIn("train.max_loss", self.client.sweep(SWEEP)["spec_yaml"])

    def test_addresses_and_data_dir(self):
        for c in (ablate.Client(self.http, self.token),
                  ablate.Client("http://" + self.http + "/", self.token + "\n"),
                  ablate.Client.from_data_dir(self.coord, token_file=self.token_file)):
            self.assertEqual(c.sweep(SWEEP)["id"], self.sweep_id)
        old = os.environ.get("ABLATE_DATA_DIR")
        os.environ["ABLATE_DATA_DIR"] = self.coord
        try:
            self.assertEqual(ablate.Client.from_data_dir().sweep(SWEEP)["id"], self.sweep_id)
        finally:
            if old is None:
                del os.environ["ABLATE_DATA_DIR"]
            else:
                os.environ["ABLATE_DATA_DIR"] = old

    def test_errors(self):
        for token in ("wrong", "", None):
            with self.assertRaises(ablate.ApiError) as e:
                ablate.Client(self.http, token).sweeps()
            self.assertEqual(e.exception.status, 401, token)
            self.assertIn("token", e.exception.message)
        odd = "no such sweep?&#%+"  # reaches the server whole only when escaped
        for call in (lambda: self.client.sweep(odd), lambda: self.client.trials(odd),
                     lambda: self.client.metrics(odd, ["loss"]),
                     lambda: self.client.compare(odd, "attention.kind")):
            with self.assertRaises(ablate.ApiError) as e:
                call()
            self.assertEqual(e.exception.status, 404)
            self.assertIn(odd, e.exception.message)
        with self.assertRaises(ablate.ApiError) as e:
            self.client.series(10 ** 9, "loss")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(ablate.ApiError) as e:
            self.client.series(self.db_trials()[0]["id"], "loss", points=1)
        self.assertEqual(e.exception.status, 400)
        self.assertIn("points", e.exception.message)
        with self.assertRaises(ablate.ApiError) as e:
            self.client.compare(SWEEP, "no.such.axis")
        self.assertIn(e.exception.status, (400, 404))

    def test_trials_equal_the_database(self):
        rows = self.client.trials(SWEEP)
        db = self.db_trials()
        self.assertEqual([r["trial_id"] for r in rows], [t["id"] for t in db])
        latest = {}
        for m in self.db.execute("SELECT l.trial_id, l.name, l.value FROM latest_metrics l JOIN "
                                 "trials t ON t.id = l.trial_id WHERE t.sweep_id = ?",
                                 (self.sweep_id,)):
            latest.setdefault(m[0], {})[m[1]] = m[2]
        names = sorted({n for per in latest.values() for n in per})
        self.assertIn("final_val_loss", names)
        attempt_cols = {r[1] for r in self.db.execute("PRAGMA table_info(attempts)")}
        builds = {}
        if "build_version" in attempt_cols:
            for a in self.db.execute(
                    "SELECT a.trial_id, a.build_version, a.build_commit, a.numerics_version FROM "
                    "attempts a JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? "
                    "ORDER BY a.trial_id, a.attempt", (self.sweep_id,)):
                if any(a[1:]):
                    builds[a[0]] = tuple(a[1:])  # the latest attempt that reported one
        states = set()
        nulls = 0
        for row, t in zip(rows, db):
            keys = list(row)
            self.assertEqual(keys[:len(PROVENANCE)], PROVENANCE)
            # The axes (spec order, seed apart), then every metric by name, at the end.
            self.assertEqual(keys[len(keys) - len(AXES) - len(names):], AXES + names)
            config = json.loads(t["config_json"])
            axes = json.loads(t["axes_json"])
            self.assertEqual((row["state"], row["attempt"]), (t["state"], t["attempts"]))
            self.assertTrue(same(row["seed"], config["seed"]), (row["seed"], config["seed"]))
            self.assertEqual(str(row["seed"]), axes["seed"])
            for a in AXES:
                self.assertTrue(same(row[a], dotted(config, a)), (t["id"], a, row[a]))
                self.assertEqual(axes[a], json.dumps(row[a]) if not isinstance(row[a], str)
                                 else row[a])
            b = builds.get(t["id"], (None, None, None))
            self.assertEqual((row["build_version"], row["build_commit"],
                              row["numerics_version"]), b)
            for n in names:
                want = latest.get(t["id"], {}).get(n)
                self.assertTrue(same(row[n], want), (t["id"], n, row[n], want))
                nulls += row[n] is None
            states.add(row["state"])
        self.assertEqual(states, {"succeeded", "diverged"})
        self.assertGreater(nulls, 0)  # the diverged trials have no final_val_loss
        self.assertIsInstance(rows[0]["attention.qk_norm"], bool)
        self.assertIsInstance(rows[0]["train.max_loss"], (int, float))
        self.assertIsInstance(rows[0]["attention.kind"], str)

    def test_csv_equals_json_lines(self):
        rows = self.client.trials(SWEEP)
        table = list(csv.reader(io.StringIO(self.client.export(SWEEP, "csv"), newline="")))
        self.assertEqual(table[0], list(rows[0]))
        self.assertEqual(len(table) - 1, len(rows))
        for line, row in zip(table[1:], rows):
            for text, v in zip(line, row.values()):
                if v is None:
                    self.assertEqual(text, "")
                elif isinstance(v, bool):
                    self.assertEqual(text, "true" if v else "false")
                elif isinstance(v, (int, float)):
                    self.assertEqual(float(text), v)
                elif isinstance(v, str):
                    self.assertEqual(text, v)
        long = list(csv.DictReader(io.StringIO(self.client.export(SWEEP, "csv", ["loss"]),
                                               newline="")))
        self.assertEqual(len(long), len(self.client.metrics(SWEEP, ["loss"])))

    def test_metrics_equal_the_database(self):
        names = ["loss", "val_loss"]
        rows = self.client.metrics(SWEEP, names)
        self.assertTrue(rows)
        self.assertEqual(set(rows[0]), {"trial_id", "step", "tokens", "name", "value"})
        got = {(r["trial_id"], r["name"], r["step"]): r["value"] for r in rows}
        self.assertEqual(len(got), len(rows))  # one row per (trial, name, step)
        want = self.db_points(names)
        self.assertEqual(got, want)
        self.assertEqual({r["name"] for r in rows}, set(names))
        tokens = self.db_points(["tokens"])
        for r in rows:
            self.assertEqual(r["tokens"], tokens.get((r["trial_id"], "tokens", r["step"])), r)
        self.assertEqual([(r["trial_id"], r["name"], r["step"]) for r in rows],
                         sorted(got))  # by trial, name, step
        self.assertEqual(self.client.metrics(SWEEP, "loss,val_loss"), rows)

    def test_series_equal_the_database(self):
        trial = next(t["id"] for t in self.db_trials() if t["state"] == "succeeded")
        want = sorted((k[2], v) for k, v in self.db_points(["loss"]).items() if k[0] == trial)
        self.assertEqual(len(want), 40)
        self.assertEqual(self.client.series(trial, "loss", points=1000), want)
        small = self.client.series(trial, "loss", points=8)
        self.assertLessEqual(len(small), 8)
        self.assertGreater(len(small), 1)
        self.assertTrue(set(small) <= set(want))
        self.assertEqual(small, sorted(small))
        self.assertEqual(self.client.series(trial, "no-such-metric"), [])

    def test_compare_equals_the_cli(self):
        # train.max_loss 5.4 diverges: its cells have no pairs (test none), the others do.
        cases = [
            ("attention.kind", None, "final_val_loss", ["train.max_loss"]),
            ("attention.qk_norm", "false", "final_val_loss", ["attention.kind", "train.max_loss"]),
            ("train.max_loss", None, "val_loss", []),
            ("attention.kind", "sagebwd", "loss", ["attention.qk_norm", "train.max_loss"]),
            ("attention.kind", None, "final_val_loss", []),
        ]
        tests, intervals = set(), []
        for factor, baseline, metric, by in cases:
            with self.subTest(factor=factor, by=by):
                args = ["compare", SWEEP, "--factor", factor, "--metric", metric,
                        "--format", "json"]
                if baseline:
                    args += ["--baseline", baseline]
                if by:
                    args += ["--by", ",".join(by)]
                cli = json.loads(self.cli(*args).stdout)
                api = self.client.compare(SWEEP, factor, baseline=baseline, metric=metric, by=by)
                if os.environ.get("ABLATE_PY_TEST_DEBUG"):
                    print(json.dumps({"cli": cli, "api": api}, indent=1), file=sys.stderr)
                self.assertEqual(len(api), len(cli))
                self.assertTrue(api)
                for a, c in zip(api, cli):
                    self.assertEqual(a["cell"], [c[k] for k in by])
                    self.assertEqual(c["metric"], metric)
                    for k, v in c.items():
                        if k in by or k in ("metric", "verdict"):
                            continue
                        if a["test"] == "none" and k in ("p_value", "p_adjusted") and v is None:
                            # The CLI shows no p without pairs; the API sends the test's
                            # placeholder 1.0 (server/http/api.cc), or null.
                            self.assertIn(a[k], (None, 1.0), k)
                            continue
                        self.assertIn(k, a)
                        if isinstance(v, float) and isinstance(a[k], float):
                            self.assertTrue(math.isclose(a[k], v, rel_tol=1e-12, abs_tol=1e-15),
                                            (k, a[k], v))
                        else:
                            self.assertTrue(same(a[k], v), (k, a[k], v))
                tests |= {r["test"] for r in api}
                intervals += [r for r in api if r["ci_low"] is not None]
                if factor == "train.max_loss":
                    self.assertEqual([r["test"] for r in api], ["none"])
                    self.assertEqual(api[0]["diverged"] + api[0]["baseline_diverged"], 3)  # seeds
        self.assertEqual(tests, {"paired-t", "none"})
        self.assertTrue(intervals)  # 3 seeds: paired rows with a 95% interval

    def test_frames(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(ImportError, "pandas"):
                self.client.trials(SWEEP, as_frame=True)
            with self.assertRaisesRegex(ImportError, "pandas"):
                self.client.metrics(SWEEP, ["loss"], as_frame=True)
            return
        rows = self.client.trials(SWEEP)
        df = self.client.trials(SWEEP, as_frame=True)
        self.assertEqual(list(df.columns), list(rows[0]))
        self.assertEqual(list(df["trial_id"]), [r["trial_id"] for r in rows])
        m = self.client.metrics(SWEEP, ["loss"], as_frame=True)
        self.assertEqual(list(m.columns), ["trial_id", "step", "tokens", "name", "value"])
        self.assertEqual(len(m), len(self.client.metrics(SWEEP, ["loss"])))
        c = self.client.compare(SWEEP, "attention.qk_norm", by=["attention.kind"], as_frame=True)
        self.assertIn("attention.kind", c.columns)
        self.assertNotIn("cell", c.columns)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = os.path.join(ROOT, "build", "bin")
    for key, env, name in (("ablated", "ABLATED", "ablated"),
                           ("worker", "ABLATE_WORKER", "ablate-worker"),
                           ("cli", "ABLATE_CLI", "ablate"),
                           ("trainer", "ABLATE_TRAIN", "ablate-train")):
        p.add_argument("--" + key, default=os.environ.get(env) or os.path.join(default, name))
    args, rest = p.parse_known_args()
    for key in ("ablated", "worker", "cli", "trainer"):
        path = getattr(args, key)
        if not os.access(path, os.X_OK):
            print(f"SKIP: {path} is missing (--{key})")
            sys.exit(77)
        BIN[key] = os.path.abspath(path)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
