"""The client against a stand-in HTTP server (http.server on loopback, no coordinator): the
requests it sends (escaped paths and parameters, the bearer header) and how it reads answers
(errors, JSON lines, data-dir files, as_frame without pandas).

    python3 -m unittest discover -s python/tests -p 'test_client.py'
"""
import http.server
import json
import os
import sys
import tempfile
import threading
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ablate  # noqa: E402
from ablate.client import _base_url  # noqa: E402


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        srv = self.server
        srv.seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        status, body, ctype = srv.answer(self.path)
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class FakeServer:
    """Answers each GET with answer(path) -> (status, body, content type); records the requests."""

    def __init__(self, answer):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.seen = []
        self.httpd.answer = answer
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        self.address = "127.0.0.1:%d" % self.httpd.server_address[1]

    @property
    def seen(self):
        return self.httpd.seen

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def _json(j, status=200):
    return status, json.dumps(j), "application/json"


class AddressTest(unittest.TestCase):
    def test_forms(self):
        self.assertEqual(_base_url("127.0.0.1:8080"), "http://127.0.0.1:8080")
        self.assertEqual(_base_url(" host:1\n"), "http://host:1")
        self.assertEqual(_base_url("http://host:1/"), "http://host:1")
        self.assertEqual(_base_url("https://example.org/ablate/"), "https://example.org/ablate")
        self.assertEqual(_base_url("[::1]:7071"), "http://[::1]:7071")
        for bad in ("", "ftp://host:1", "http://"):
            with self.assertRaises(ValueError, msg=bad):
                _base_url(bad)


class RequestTest(unittest.TestCase):
    def setUp(self):
        self.answers = {}
        self.server = FakeServer(self._answer)
        self.client = ablate.Client(self.server.address, "s3cret\n")

    def tearDown(self):
        self.server.close()

    def _answer(self, path):
        for prefix, answer in self.answers.items():
            if path.startswith(prefix):
                return answer
        return _json({"error": "no such API route: " + path}, 404)

    def test_bearer_token_and_sweeps(self):
        self.answers["/api/sweeps"] = _json({"sweeps": [{"id": 1, "name": "a"}]})
        self.assertEqual(self.client.sweeps(), [{"id": 1, "name": "a"}])
        self.assertEqual(self.client.sweeps(archived=True), [{"id": 1, "name": "a"}])
        self.assertEqual([s["path"] for s in self.server.seen],
                         ["/api/sweeps", "/api/sweeps?archived=1"])
        self.assertEqual(self.server.seen[0]["authorization"], "Bearer s3cret")

    def test_url_form_of_the_address(self):
        self.answers["/api/sweeps"] = _json({"sweeps": []})
        self.assertEqual(ablate.Client("http://" + self.server.address + "/", "t").sweeps(), [])

    def test_every_segment_and_parameter_is_escaped(self):
        self.answers["/api/trials/"] = _json({"steps": [], "values": []})
        self.answers["/api/"] = _json({"rows": []})
        odd = "a b/c?d&e#f%g+h"
        esc = "a%20b%2Fc%3Fd%26e%23f%25g%2Bh"
        self.client.sweep(odd)
        self.client.compare(odd, factor="x&y=z", baseline="1 2", metric="m#", by=["p q", "r/s"])
        self.client.series(7, "loss/val&x", points=20)
        self.assertEqual(self.server.seen[0]["path"], "/api/sweeps/" + esc)
        self.assertEqual(
            self.server.seen[1]["path"],
            "/api/sweeps/" + esc + "/compare?factor=x%26y%3Dz&baseline=1%202&metric=m%23"
            "&by=p%20q%2Cr%2Fs")
        self.assertEqual(self.server.seen[2]["path"],
                         "/api/trials/7/series?name=loss%2Fval%26x&points=20")

    def test_sweep_references(self):
        self.answers["/api/sweeps/"] = _json({"id": 3})
        self.client.sweep(3)
        self.client.sweep("sweep:3")
        self.client.sweep({"id": 3, "name": "x"})
        self.client.sweep("sweep:x")  # not an id: a name, left to the server to refuse
        self.assertEqual([s["path"] for s in self.server.seen],
                         ["/api/sweeps/3"] * 3 + ["/api/sweeps/sweep%3Ax"])
        with self.assertRaises(ValueError):
            self.client.sweep("")

    def test_compare_defaults_leave_out_empty_parameters(self):
        self.answers["/api/sweeps/s/compare"] = _json({"rows": [{"value": "b"}]})
        self.assertEqual(self.client.compare("s", "k"), [{"value": "b"}])
        self.assertEqual(self.server.seen[0]["path"],
                         "/api/sweeps/s/compare?factor=k&metric=final_val_loss")

    def test_compare_best_over_and_select_seeds(self):
        self.answers["/api/sweeps/s/compare"] = _json({"rows": []})
        self.client.compare("s", "attention.kind", best_over="optimizer.lr", select_seeds=[0, 1])
        self.assertEqual(self.server.seen[0]["path"],
                         "/api/sweeps/s/compare?factor=attention.kind&metric=final_val_loss"
                         "&best_over=optimizer.lr&select_seeds=0%2C1")

    def test_json_lines(self):
        rows = [{"trial_id": 1, "state": "succeeded", "x.y": 0.5, "loss": None},
                {"trial_id": 2, "state": "failed", "x.y": 1, "loss": 2.5}]
        body = "".join(json.dumps(r) + "\n" for r in rows)
        self.answers["/api/sweeps/s/export"] = (200, body, "application/x-ndjson")
        self.assertEqual(self.client.trials("s"), rows)
        self.assertEqual(self.client.metrics("s", ["loss", "val_loss"]), rows)
        self.assertEqual(self.client.metrics("s", "loss,val_loss"), rows)
        self.assertEqual([s["path"] for s in self.server.seen],
                         ["/api/sweeps/s/export?format=jsonl",
                          "/api/sweeps/s/export?format=jsonl&metrics=loss%2Cval_loss",
                          "/api/sweeps/s/export?format=jsonl&metrics=loss%2Cval_loss"])
        self.assertEqual(self.client.export("s", "jsonl"), body)
        self.assertEqual(self.server.seen[-1]["path"], "/api/sweeps/s/export?format=jsonl")
        self.client.export("s", metrics=["loss"])
        self.assertEqual(self.server.seen[-1]["path"],
                         "/api/sweeps/s/export?format=csv&metrics=loss")
        for bad in ([], "", ["a,b"], [""]):
            with self.assertRaises(ValueError, msg=repr(bad)):
                self.client.metrics("s", bad)

    def test_empty_export(self):
        self.answers["/api/sweeps/s/export"] = (200, "", "application/x-ndjson")
        self.assertEqual(self.client.trials("s"), [])

    def test_series_pairs(self):
        self.answers["/api/trials/4/series"] = _json(
            {"trial_id": 4, "name": "loss", "total_points": 3, "steps": [1, 2, 3],
             "values": [3.0, None, 1.5]})
        self.assertEqual(self.client.series(4, "loss"), [(1, 3.0), (2, None), (3, 1.5)])
        self.assertEqual(self.server.seen[0]["path"], "/api/trials/4/series?name=loss")

    def test_api_errors(self):
        self.answers["/api/sweeps/gone"] = _json({"error": "sweep 'gone': no such sweep"}, 404)
        self.answers["/api/sweeps"] = (502, "Bad Gateway from the proxy", "text/plain")
        with self.assertRaises(ablate.ApiError) as e:
            self.client.sweep("gone")
        self.assertEqual(e.exception.status, 404)
        self.assertEqual(e.exception.message, "sweep 'gone': no such sweep")
        self.assertIn("404", str(e.exception))
        self.assertIsInstance(e.exception, ablate.AblateError)
        with self.assertRaises(ablate.ApiError) as e:
            self.client.sweeps()
        self.assertEqual((e.exception.status, e.exception.message),
                         (502, "Bad Gateway from the proxy"))

    def test_unreachable(self):
        port = self.server.address
        self.server.close()
        self.server = FakeServer(self._answer)  # tearDown closes this one
        with self.assertRaises(ablate.UnavailableError) as e:
            ablate.Client(port, "t", timeout=5).sweeps()
        self.assertIsInstance(e.exception, ConnectionError)

    def test_as_frame_without_pandas(self):
        self.answers["/api/sweeps/s/export"] = (200, '{"trial_id": 1}\n', "application/x-ndjson")
        with mock.patch.dict(sys.modules, {"pandas": None}):  # `import pandas` raises ImportError
            with self.assertRaisesRegex(ImportError, "needs pandas"):
                self.client.trials("s", as_frame=True)

    def test_as_frame_with_pandas(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            self.skipTest("pandas is not installed")
        self.answers["/api/sweeps/s/export"] = (
            200, '{"trial_id": 1, "a": 0.5}\n{"trial_id": 2, "a": null}\n', "application/x-ndjson")
        df = self.client.trials("s", as_frame=True)
        self.assertEqual(list(df.columns), ["trial_id", "a"])
        self.assertEqual(list(df["trial_id"]), [1, 2])


class DataDirTest(unittest.TestCase):
    def test_files(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(FileNotFoundError, "--http"):
                ablate.Client.from_data_dir(d)
            with open(os.path.join(d, "ablated.http"), "w") as f:
                f.write("127.0.0.1:4321\n")
            with open(os.path.join(d, "token"), "w") as f:
                f.write("abc\n")
            c = ablate.Client.from_data_dir(d)
            self.assertEqual((c.base_url, c.token), ("http://127.0.0.1:4321", "abc"))
            with mock.patch.dict(os.environ, {"ABLATE_DATA_DIR": d}):
                self.assertEqual(ablate.Client.from_data_dir().base_url, "http://127.0.0.1:4321")
            other = os.path.join(d, "other-token")
            with open(other, "w") as f:
                f.write("xyz")
            self.assertEqual(ablate.Client.from_data_dir(d, token_file=other).token, "xyz")


if __name__ == "__main__":
    unittest.main()
