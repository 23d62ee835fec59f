#!/usr/bin/env python3
"""The repository holds sources and text records only: no tracked file may be binary (a NUL byte
in its first 8 KB, as git's own test). Profiler exports, bundles and archives of the GPU calls stay
outside it (.gitignore); session 31 had committed gzipped ncu CSVs by mistake."""
import gzip
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


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


class TrackedFilesTest(unittest.TestCase):
    def test_checker_flags_an_archive_and_passes_text(self):
        with tempfile.TemporaryDirectory() as d:
            with gzip.open(os.path.join(d, "stalls.csv.gz"), "wb") as f:
                f.write(b"pc,samples\n" * 100)
            with open(os.path.join(d, "stalls.txt"), "w") as f:
                f.write("pc samples\n")
            self.assertEqual(binary_files(d, ["stalls.csv.gz", "stalls.txt"]), ["stalls.csv.gz"])

    def test_no_tracked_file_is_binary(self):
        try:
            out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                                 check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            self.skipTest("not a git checkout")
        paths = [p.decode() for p in out.split(b"\0") if p]
        self.assertGreater(len(paths), 100)
        self.assertEqual(binary_files(ROOT, paths), [],
                         "binary files are tracked: build outputs and data belong outside the "
                         "repository (.gitignore)")


if __name__ == "__main__":
    unittest.main()
