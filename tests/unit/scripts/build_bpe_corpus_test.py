#!/usr/bin/env python3
"""scripts/build_bpe_corpus.py's cleaning of reStructuredText and its WordNet gloss reader, on
inputs written here (the packages themselves are large; the script's run is in docs/data.md)."""
import importlib.util
import os
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "build_bpe_corpus", os.path.join(here, "../../../scripts/build_bpe_corpus.py"))
corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus)


class CleanRst(unittest.TestCase):
    def test_keeps_prose_and_drops_markup(self):
        rst = """Title
=====

Use :c:func:`kmalloc` or the `docs <https://x.org>`_ and ``code``.

.. code-block:: c

   int x = 1;

.. note::

   A note stays.

+-----+-----+
| a   | b   |
+-----+-----+

Done::
"""
        out = corpus.clean_rst(rst)
        self.assertIn("Title", out)
        self.assertNotIn("=====", out)
        self.assertIn("Use kmalloc or the docs and code.", out)
        self.assertNotIn("int x", out)
        self.assertIn("A note stays.", out)
        self.assertNotIn("+-----+", out)
        self.assertNotIn("| a", out)
        self.assertIn("Done:", out)
        self.assertNotIn("Done::", out)


class WordNet(unittest.TestCase):
    def test_reads_words_and_glosses(self):
        with tempfile.TemporaryDirectory() as d:
            wn = os.path.join(d, "usr/share/wordnet")
            os.makedirs(wn)
            header = "  1 This software and database is being provided\n"
            line = ("00001740 03 n 02 entity 0 thing_one 0 003 ~ 00001930 n 0000 | that which is "
                    "perceived to have its own distinct existence\n")
            for pos in ["noun", "verb", "adj", "adv"]:
                with open(os.path.join(wn, "data." + pos), "w", encoding="latin-1") as f:
                    f.write(header + (line if pos == "noun" else ""))
            docs = list(corpus.wordnet_documents(d))
        self.assertEqual(docs, ["entity, thing one: that which is perceived to have its own "
                                "distinct existence"])


if __name__ == "__main__":
    unittest.main()
