"""The HTTP JSON API of ablated (server/http/api.cc), read-only, over urllib."""

import json
import os
import ssl as _ssl
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_TIMEOUT = 30.0


class AblateError(Exception):
    """Base class of the errors this package raises."""


class ApiError(AblateError):
    """The coordinator answered with an error status.

    status: the HTTP status (400 bad parameter, 401 missing or wrong token, 404 no such sweep,
    trial or route, 409 conflict, 5xx server side); message: the API's {"error": ...} text (or the
    body itself when it was not that JSON); url: the request's address.
    """

    def __init__(self, status, message, url=None):
        super().__init__(f"HTTP {status}: {message}" + (f" ({url})" if url else ""))
        self.status = status
        self.message = message
        self.url = url


class UnavailableError(AblateError, ConnectionError):
    """The coordinator could not be reached (refused, timed out, TLS failure, ...)."""


def _base_url(address):
    """'host:port' -> 'http://host:port'; a URL (http:// or https://, optionally with a path
    prefix such as a reverse proxy's) is kept, less a trailing '/'."""
    address = address.strip()
    if not address:
        raise ValueError("empty coordinator address (expected HOST:PORT or http(s)://HOST:PORT)")
    if "://" not in address:
        address = "http://" + address
    parts = urllib.parse.urlsplit(address)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"coordinator address {address!r}: expected http:// or https://")
    if not parts.netloc:
        raise ValueError(f"coordinator address {address!r}: no host")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _segment(value):
    """One URL path segment, every reserved character escaped."""
    return urllib.parse.quote(str(value), safe="")


def _sweep_ref(sweep):
    """A sweep as the API's path takes it: an id (int, 'ID' or 'sweep:ID', as the CLI spells it)
    or a name."""
    if isinstance(sweep, bool):
        raise TypeError("sweep: expected a name or an id, got a bool")
    if isinstance(sweep, int):
        return str(sweep)
    if isinstance(sweep, dict) and "id" in sweep:  # a row of sweeps()
        return str(sweep["id"])
    sweep = str(sweep)
    if sweep.startswith("sweep:") and sweep[6:].isdigit():
        return sweep[6:]
    if not sweep:
        raise ValueError("empty sweep name")
    return sweep


def _names(value, what):
    """'a' or 'a,b' or ['a', 'b'] -> 'a,b' (the API's comma-separated list)."""
    if isinstance(value, str):
        items = [v for v in value.split(",") if v]
    else:
        items = [str(v) for v in value]
        for v in items:
            if "," in v or not v:
                raise ValueError(f"{what}: {v!r} is empty or holds a comma")
    return ",".join(items)


def _frame(rows, columns=None):
    try:
        import pandas
    except ImportError as e:
        raise ImportError("as_frame=True needs pandas (pip install pandas); without it, "
                          "use the list of dicts (as_frame=False)") from e
    if columns is None:
        columns = []
        seen = set()
        for r in rows:  # the union of the rows' keys, in first-seen order
            for k in r:
                if k not in seen:
                    seen.add(k)
                    columns.append(k)
    return pandas.DataFrame.from_records(rows, columns=columns)


class Client:
    """A read-only client of a coordinator's HTTP API.

    address: 'HOST:PORT' (plain HTTP) or a URL, 'http://HOST:PORT' or 'https://HOST[:PORT][/prefix]'.
    token: the bearer token (the coordinator's token file, DATA_DIR/token by default), sent as
    'Authorization: Bearer TOKEN'. timeout: seconds per request. ssl_context: an ssl.SSLContext for
    https (e.g. ssl.create_default_context(cafile=...)); the system's trust store otherwise.
    """

    def __init__(self, address, token, timeout=DEFAULT_TIMEOUT, ssl_context=None):
        self.base_url = _base_url(address)
        self.token = None if token is None else str(token).strip()
        self.timeout = timeout
        self._ssl = ssl_context

    def __repr__(self):
        return f"ablate.Client({self.base_url!r})"

    @classmethod
    def from_data_dir(cls, path=None, token_file=None, **kwargs):
        """The coordinator started with `ablated --data-dir PATH --http HOST:PORT`: its address
        from PATH/ablated.http (written at start, with the port actually bound), its token from
        PATH/token (or token_file, for a coordinator started with --token-file). path defaults to
        $ABLATE_DATA_DIR, else ~/.ablate, as for ablated."""
        if path is None:
            path = os.environ.get("ABLATE_DATA_DIR") or "~/.ablate"
        path = os.path.expanduser(os.fspath(path))
        http_file = os.path.join(path, "ablated.http")
        try:
            with open(http_file, encoding="utf-8") as f:
                address = f.readline().strip()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{http_file} not found: is ablated running with --data-dir {path} and --http "
                f"HOST:PORT?") from None
        if not address:
            raise ValueError(f"{http_file} is empty")
        token_file = os.path.expanduser(os.fspath(token_file)) if token_file else os.path.join(
            path, "token")
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        return cls(address, token, **kwargs)

    # ---- transport ----------------------------------------------------------------------------

    def _url(self, segments, params=None):
        url = self.base_url + "/" + "/".join(_segment(s) for s in segments)
        if params:
            query = [(k, str(v)) for k, v in params.items() if v is not None]
            if query:
                url += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return url

    def _request(self, segments, params=None):
        """The response body (bytes) of GET /segments...?params; ApiError on an error status."""
        url = self._url(segments, params)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(url, headers=headers, method="GET")
        context = self._ssl
        if context is None and url.startswith("https:"):
            context = _ssl.create_default_context()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=context) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", errors="replace")
            message = body.strip() or e.reason
            try:
                j = json.loads(body)
                if isinstance(j, dict) and "error" in j:
                    message = j["error"]
            except ValueError:
                pass
            raise ApiError(e.code, message, url) from None
        except urllib.error.URLError as e:
            raise UnavailableError(f"cannot reach the coordinator at {self.base_url}: "
                                   f"{e.reason}") from e
        except (TimeoutError, ConnectionError) as e:
            raise UnavailableError(f"cannot reach the coordinator at {self.base_url}: {e}") from e

    def get(self, path, params=None):
        """GET an API path (a string 'sweeps/quick', relative to /api/, with its segments already
        escaped as needed, or a list of raw segments, escaped here) and return its parsed JSON:
        the escape hatch for what the methods below do not cover."""
        if isinstance(path, str):
            segments = [urllib.parse.unquote(s) for s in path.strip("/").split("/") if s]
            if segments and segments[0] == "api":
                segments = segments[1:]
        else:
            segments = [str(s) for s in path]
        return json.loads(self._request(["api"] + segments, params))

    def _jsonl(self, segments, params):
        body = self._request(segments, params).decode("utf-8")
        return [json.loads(line) for line in body.splitlines() if line.strip()]

    # ---- sweeps -------------------------------------------------------------------------------

    def sweeps(self, archived=False):
        """GET /api/sweeps: one dict per sweep (id, name, priority, max_attempts, gpus,
        cpu_slots, axes, created_at, counts {state: n}, total, done, finished, waiting_reason).
        archived=True includes the archived sweeps (?archived=1)."""
        return self.get(["sweeps"], {"archived": 1} if archived else None)["sweeps"]

    def sweep(self, sweep):
        """GET /api/sweeps/{id|name}: one sweep's dict as in sweeps(), plus spec_yaml. sweep: a
        name, an id (int, 'ID' or 'sweep:ID') or a dict of sweeps()."""
        return self.get(["sweeps", _sweep_ref(sweep)])

    # ---- export -------------------------------------------------------------------------------

    def trials(self, sweep, as_frame=False):
        """One row per trial (GET /api/sweeps/{id|name}/export?format=jsonl): trial_id, state,
        attempt, seed, build_version, build_commit, numerics_version, then each axis of the sweep
        under its dotted key ('optimizer.lr', as the spec's JSON number, bool or string), then the
        latest value of every metric the trials reported ('final_val_loss', 'val_loss', 'loss',
        ...), None when a trial did not report it. A list of dicts, or a pandas DataFrame with
        as_frame=True."""
        rows = self._jsonl(["api", "sweeps", _sweep_ref(sweep), "export"], {"format": "jsonl"})
        return _frame(rows) if as_frame else rows

    def metrics(self, sweep, names, as_frame=False):
        """The long table of the named metrics of every trial of a sweep (GET .../export?
        format=jsonl&metrics=a,b): rows {trial_id, step, tokens, name, value}. names: a list of
        metric names or one comma-separated string. A list of dicts, or a DataFrame."""
        names = _names(names, "metrics")
        if not names:
            raise ValueError("metrics: give at least one metric name (e.g. ['loss', 'val_loss'])")
        rows = self._jsonl(["api", "sweeps", _sweep_ref(sweep), "export"],
                           {"format": "jsonl", "metrics": names})
        if as_frame:
            return _frame(rows, ["trial_id", "step", "tokens", "name", "value"])
        return rows

    def export(self, sweep, format="csv", metrics=None):
        """The export's text as `ablate export SWEEP --format csv|jsonl [--metrics a,b]` prints
        it (CSV: RFC 4180, null as an empty field), e.g. to write a file."""
        params = {"format": format}
        if metrics:
            params["metrics"] = _names(metrics, "metrics")
        return self._request(["api", "sweeps", _sweep_ref(sweep), "export"],
                             params).decode("utf-8")

    # ---- one trial ----------------------------------------------------------------------------

    def trial(self, trial_id):
        """GET /api/trials/{id}: the trial (state, axes, config, attempts, latest_metrics, ...)."""
        return self.get(["trials", int(trial_id)])

    def series(self, trial_id, name, points=None, as_frame=False):
        """One metric's curve of one trial (GET /api/trials/{id}/series?name=NAME[&points=N]):
        a list of (step, value) tuples in step order, value None where the trainer reported a
        non-finite number. The coordinator downsamples a long series to at most `points` points
        (2..10000, 500 by default), keeping each bucket's minimum and maximum, so spikes survive;
        a series shorter than that comes whole. An unknown trial raises ApiError 404; a name the
        trial never reported gives []. as_frame=True: a DataFrame with columns step, value."""
        params = {"name": name}
        if points is not None:
            params["points"] = int(points)
        j = self.get(["trials", int(trial_id), "series"], params)
        pts = list(zip(j["steps"], j["values"]))
        if as_frame:
            return _frame([{"step": s, "value": v} for s, v in pts], ["step", "value"])
        return pts

    # ---- analysis -----------------------------------------------------------------------------

    def compare(self, sweep, factor, baseline=None, metric="final_val_loss", by=(),
                best_over=None, select_seeds=(), as_frame=False):
        """Each level of `factor` against `baseline` (default: the first level), paired by seed,
        as `ablate compare SWEEP --factor F` (GET /api/sweeps/{id|name}/compare). by: axes whose
        cells are compared apart (a list, or one comma-separated string). One dict per
        comparison: cell (the by axes' values), value, baseline, test ('paired-t', 'welch-t' or
        'none'), n, mean, baseline_mean, delta (value - baseline), ci_low, ci_high (95%, None
        when n < 3), p_value, p_permutation, p_adjusted (Holm over the rows), seeds, diverged,
        failed, missing, baseline_seeds, baseline_diverged, baseline_failed, baseline_missing,
        left_out, builds, baseline_builds. best_over: a nuisance axis (e.g. 'optimizer.lr') at
        which each level is compared at its own best value (best_value, baseline_best_value in
        the rows), chosen on select_seeds and tested on the other seeds (on all when empty:
        optimistic). With as_frame=True a DataFrame, the cell split into one column per by axis.
        The whole response (resolved baseline, levels) is client.get(['sweeps', S, 'compare'],
        {...})."""
        by = _names(by, "by")
        select_seeds = _names([str(s) for s in select_seeds] if not isinstance(select_seeds, str)
                              else select_seeds, "select_seeds")
        params = {"factor": factor, "baseline": baseline or None, "metric": metric,
                  "by": by or None, "best_over": best_over or None,
                  "select_seeds": select_seeds or None}
        rows = self.get(["sweeps", _sweep_ref(sweep), "compare"], params)["rows"]
        if not as_frame:
            return rows
        axes = by.split(",") if by else []
        flat = []
        for r in rows:
            cell = r.get("cell") or []
            row = {a: (cell[i] if i < len(cell) else None) for i, a in enumerate(axes)}
            row.update({k: v for k, v in r.items() if k != "cell"})
            flat.append(row)
        return _frame(flat)

    def results(self, sweep, metric="final_val_loss", by=()):
        """The ablation table (GET /api/sweeps/{id|name}/results), as `ablate results`: rows of
        keys (the by axes' values), n, trials, mean, std, se, ci_low, ci_high (95% t interval of
        the mean), min, max, diverged, failed, builds, best (only when its interval separates it)."""
        by = _names(by, "by")
        return self.get(["sweeps", _sweep_ref(sweep), "results"],
                        {"metric": metric, "by": by or None})["rows"]
