#!/usr/bin/env python3
"""The repository is a product, not a notebook. Checked on the tracked files:
- no file is binary (a NUL byte in its first 8 KB, as git's own test): profiler exports, bundles
  and archives stay outside it (.gitignore);
- no dropped patch (.patch/.diff) and no lab diary: history belongs to git log;
- nothing refers to the project's shared folder outside the clone, which a user does not have;
- server/ and worker/ never include each other's headers: what both need lives in common/ (or
  proto/);
- README.md stays a user's page (at most 300 lines) and docs/ stays small;
- no source file is over 1,500 lines (one role per file), and the production kernels carry no
  lab: no numbered variants, environment switches or trace macros (the names below), and kernels/
  does not reach into worker/ or server/;
- every relative link of a Markdown file (outside code blocks) names a tracked file or a folder
  holding one, so a fresh clone's docs lead somewhere.
Each rule has a case that shows the checker flags a violation."""
import gzip
import os
import re
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEXT_SUFFIXES = (".md", ".cc", ".h", ".cu", ".cuh", ".txt", ".sh", ".py", ".js", ".mjs", ".yaml",
                 ".yml", ".proto", ".json", ".css", ".html", ".service", ".sbatch")
DIARY = re.compile(r"\bsession \d+|\bsessions? \d+[-–]\d+|\bcall \d+\b", re.IGNORECASE)
SHARED = re.compile(r"\.\./shared\b|/work/shared\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
MAX_SOURCE_LINES = 1500
# The lab knobs that production kernel sources must not hold (built from parts, so that this
# file does not hold them either).
LAB = re.compile("|".join(["FPA_FWD" + "_VARIANT", "kBwd" + "Base", r"\bfwd" + "_variant",
                           r"\bbwd" + "_variant", "SAGE" + "_TRACE", "SAGE" + "_PHASE",
                           r"\w+_" + r"LAB\b"]))


def long_sources(root, paths):
    """(path, lines) of the source files over MAX_SOURCE_LINES lines."""
    out = []
    for p in paths:
        if p.endswith(SOURCE_SUFFIXES) and os.path.isfile(os.path.join(root, p)):
            n = len(read(root, p).splitlines())
            if n > MAX_SOURCE_LINES:
                out.append((p, n))
    return out


def kernel_sources(paths):
    return [p for p in paths if p.startswith("kernels/") and p.endswith(SOURCE_SUFFIXES)]


def binary_files(root, paths):
    """The paths (relative to root) whose first 8 KB hold a NUL byte."""
    found = []
    for p in paths:
        full = os.path.join(root, p)
        if os.path.isfile(full) and not os.path.islink(full):
            with open(full, "rb") as f:
                if b"\0" in f.read(8192):
                    found.append(p)
    return found


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def text_paths(paths):
    return [p for p in paths if p.endswith(TEXT_SUFFIXES) and "node_modules/" not in p
            and not p.endswith("package-lock.json")]


def lines_matching(root, paths, pattern, skip=()):
    """(path, line number, line) of every line of the text files that matches pattern."""
    hits = []
    for p in text_paths(paths):
        if p in skip or not os.path.isfile(os.path.join(root, p)):
            continue
        for n, line in enumerate(read(root, p).splitlines(), 1):
            if pattern.search(line):
                hits.append((p, n, line.strip()))
    return hits


def cross_includes(root, paths):
    """(path, header) of every include from server/ into worker/ or the other way. The include
    roots are server/ (e.g. "store/store.h") and worker/ ("agent/util.h", "trainer/...")."""
    worker_roots = {"agent", "trainer"}
    server_roots = {"store", "scheduler", "sweep", "rpc", "http", "metrics"}
    bad = []
    for p in paths:
        if not p.endswith((".cc", ".h", ".cu", ".cuh")) or not os.path.isfile(os.path.join(root, p)):
            continue
        top = p.split("/", 1)[0]
        if top not in ("server", "worker"):
            continue
        other = worker_roots | {"worker"} if top == "server" else server_roots | {"server"}
        for inc in INCLUDE.findall(read(root, p)):
            if inc.split("/", 1)[0] in other:
                bad.append((p, inc))
    return bad


MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def broken_links(root, paths):
    """(markdown path, target) of every relative link that names no tracked file or folder."""
    tracked_set = set(paths)
    folders = {os.path.dirname(p) for p in paths}
    for p in list(folders):
        while p:
            p = os.path.dirname(p)
            folders.add(p)
    bad = []
    for p in paths:
        if not p.endswith(".md") or "node_modules/" in p or not os.path.isfile(os.path.join(root, p)):
            continue
        for target in MD_LINK.findall(FENCE.sub("", read(root, p))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            path = target.split("#", 1)[0]
            full = os.path.normpath(os.path.join(os.path.dirname(p), path))
            if full not in tracked_set and full.rstrip("/") not in folders:
                bad.append((p, target))
    return bad


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                         check=True).stdout
    return [p.decode() for p in out.split(b"\0") if p]


class CheckersFlagViolations(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def write(self, path, text):
        full = os.path.join(self.d, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def test_an_archive_is_binary_and_text_is_not(self):
        with gzip.open(os.path.join(self.d, "stalls.csv.gz"), "wb") as f:
            f.write(b"pc,samples\n" * 100)
        self.write("stalls.txt", "pc samples\n")
        self.assertEqual(binary_files(self.d, ["stalls.csv.gz", "stalls.txt"]), ["stalls.csv.gz"])

    def test_a_diary_line_and_a_shared_link_are_found(self):
        self.write("a.md", "fine\nmeasured in " + "session" + " 12\n")
        self.write("b.cc", "// see .." + "/shared/DESIGN.md\n// a session cookie is fine\n")
        self.assertEqual([h[:2] for h in lines_matching(self.d, ["a.md", "b.cc"], DIARY)],
                         [("a.md", 2)])
        self.assertEqual([h[:2] for h in lines_matching(self.d, ["a.md", "b.cc"], SHARED)],
                         [("b.cc", 1)])

    def test_a_cross_include_is_found(self):
        self.write("server/sweep/sweep.h", '#include "trainer/config/trial_config.h"\n'
                                           '#include "ablate/trial_config.h"\n')
        self.write("worker/agent/m.cc", '#include "metrics/catalog.h"\n#include "agent/util.h"\n')
        self.assertEqual(cross_includes(self.d, ["server/sweep/sweep.h", "worker/agent/m.cc"]),
                         [("server/sweep/sweep.h", "trainer/config/trial_config.h"),
                          ("worker/agent/m.cc", "metrics/catalog.h")])


    def test_a_broken_link_is_found(self):
        self.write("docs/a.md", "[b](b.md), [up](../README.md#top), [dir](../kernels/), "
                                "[web](https://example.org/x.md), [here](#a)\n"
                                "[gone](../server/metrics/catalog.cc)\n"
                                "```sh\n[not a link](nowhere.md)\n```\n")
        paths = ["docs/a.md", "docs/b.md", "README.md", "kernels/x.cu"]
        for q in paths[1:]:
            self.write(q, "x\n")
        self.assertEqual(broken_links(self.d, paths),
                         [("docs/a.md", "../server/metrics/catalog.cc")])

    def test_a_long_source_and_a_lab_knob_are_found(self):
        self.write("kernels/a.cu", "x\n" * (MAX_SOURCE_LINES + 1))
        self.write("kernels/b.cu", "int v = opt." + "fwd_variant;\n#ifdef ABLATE_SAGE" + "_TRACE\n")
        self.write("kernels/c.cu", "int head_dim = 64;\n")
        paths = ["kernels/a.cu", "kernels/b.cu", "kernels/c.cu"]
        self.assertEqual(long_sources(self.d, paths), [("kernels/a.cu", MAX_SOURCE_LINES + 1)])
        self.assertEqual([h[:2] for h in lines_matching(self.d, kernel_sources(paths), LAB)],
                         [("kernels/b.cu", 1), ("kernels/b.cu", 2)])


class TrackedFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            cls.paths = tracked(ROOT)
        except (OSError, subprocess.CalledProcessError):
            raise unittest.SkipTest("not a git checkout")

    def test_there_are_files(self):
        self.assertGreater(len(self.paths), 100)

    def test_no_tracked_file_is_binary(self):
        self.assertEqual(binary_files(ROOT, self.paths), [],
                         "binary files are tracked: build outputs and data belong outside the "
                         "repository (.gitignore)")

    def test_no_dropped_patches(self):
        self.assertEqual([p for p in self.paths if p.endswith((".patch", ".diff"))], [])

    def test_no_lab_diary(self):
        # This file names the pattern it looks for.
        self.assertEqual(lines_matching(ROOT, self.paths, DIARY,
                                        skip={"tests/unit/repository/tracked_files_test.py"}), [])

    def test_nothing_refers_to_shared(self):
        self.assertEqual(lines_matching(ROOT, self.paths, SHARED,
                                        skip={"tests/unit/repository/tracked_files_test.py"}), [])

    def test_every_doc_link_resolves(self):
        self.assertEqual(broken_links(ROOT, self.paths), [])

    def test_server_and_worker_do_not_include_each_other(self):
        self.assertEqual(cross_includes(ROOT, self.paths), [])

    def test_no_source_file_is_over_the_limit(self):
        self.assertEqual(long_sources(ROOT, self.paths), [])

    def test_kernels_carry_no_lab(self):
        self.assertEqual(lines_matching(ROOT, kernel_sources(self.paths), LAB), [])

    def test_kernels_do_not_include_worker_or_server(self):
        bad = [(p, inc) for p in kernel_sources(self.paths)
               for inc in INCLUDE.findall(read(ROOT, p))
               if inc.split("/", 1)[0] in ("trainer", "agent", "store", "scheduler", "rpc")]
        self.assertEqual(bad, [])

    def test_readme_and_docs_stay_small(self):
        self.assertLessEqual(len(read(ROOT, "README.md").splitlines()), 300)
        self.assertLess(len([p for p in self.paths if p.startswith("docs/")]), 60)


if __name__ == "__main__":
    unittest.main()
