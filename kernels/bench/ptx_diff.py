#!/usr/bin/env python3
"""Which kernels of two PTX builds differ: a refactor checked without the GPU.

A change meant to leave kernels alone (a cleanup, a file split, a rename, a step for one head
dimension) is verified by compiling the sources before and after to PTX and comparing kernel by
kernel; where the PTX is the same, so is the machine code ptxas makes of it, and no timing is
needed. BASE and NEW are PTX files or folders of them (a source split into several files is
compared as one set).

Symbols (kernel names, the names of their parameters and shared buffers) are compared demangled
(c++filt) with every namespace qualifier removed, so that moving code between files or
namespaces changes nothing; the hash nvcc puts into anonymous-namespace names goes with them.
Line-number records (.loc) and the function index in branch labels ($L__BB<index>_<n>: a kernel
added before another renumbers it) are ignored; everything else counts.

Where kernels were renamed (a template flag replaced, a V5 suffix dropped), --map FILE gives the
old-to-new names, one "OLD => NEW" per line in the normalized demangled form this tool prints
("#" starts a comment); each base kernel is then compared with the new kernel its map line
names. A kernel of the base that no longer exists is reported as "only in base" (a removed lab
variant: list those with --removed FILE, one name per line, to check the removal is the one
intended).

    FLAGS="-I kernels -I common -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr \\
           --generate-code=arch=compute_90a,code=[compute_90a] -ptx"
    git worktree add /tmp/base BASE
    for f in /tmp/base/kernels/attention/cuda/*.cu; do
      (cd /tmp/base && nvcc $FLAGS ${f#/tmp/base/} -o /tmp/ptx-base/$(basename $f .cu).ptx); done
    for f in kernels/attention/cuda/*.cu; do nvcc $FLAGS $f -o /tmp/ptx-new/$(basename $f .cu).ptx; done
    python3 kernels/bench/ptx_diff.py /tmp/ptx-base /tmp/ptx-new --map names.map [--filter Sage]

Prints each kernel with "same", the number of differing lines, or where it exists in one build
only, then a summary; exit status 1 when a kernel differs or is missing on one side without being
listed in --removed.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys

_ENTRY = re.compile(r"(?=^(?:\.visible |\.weak )?\.entry )", re.M)
_NAME = re.compile(r"^(?:\.visible |\.weak )?\.entry (\S+?)\(", re.M)
_SYMBOL = re.compile(r"_Z[A-Za-z0-9_]+")
# Without c++filt: _ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c8137 -> NS.
_ANON = re.compile(r"\d+_GLOBAL__N__\w+?_\d+_\w+?_cu_[0-9a-f]+")
_LOC = re.compile(r"^\s*\.loc\s.*\n", re.M)
# $L__BB119_2 -> $L__BB_2: the first number is the function's index in the file.
_LABEL = re.compile(r"\$L__BB\d+_")
# Namespace (or class) qualifiers of a demangled name: "ablate::kernels::(anonymous namespace)::".
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_]\w*)::")


def _through_body(part):
    """The entry up to the brace that closes its body (inline asm scopes nest inside it); what
    follows the last entry (debug sections) is not part of it."""
    depth, seen = 0, False
    pos = 0
    for line in part.splitlines(True):
        pos += len(line)
        code = line.split("//", 1)[0]
        for ch in code:
            if ch == "{":
                depth += 1
                seen = True
            elif ch == "}":
                depth -= 1
        if seen and depth == 0:
            return part[:pos]
    return part


def normalize(demangled):
    """A demangled name without its qualifiers and without a leading return type."""
    name = _QUALIFIER.sub("", demangled)
    if name.startswith("void "):
        name = name[5:]
    return name


_PARAM = re.compile(r"(_param_\d+)$")


def _demangler(symbols):
    """{mangled: normalized demangled} for every symbol, by one c++filt call when it exists. A
    kernel's parameter (NAME_param_0) becomes the kernel's demangled name and the suffix."""
    symbols = sorted(symbols)
    suffix = {s: (_PARAM.search(s).group(1) if _PARAM.search(s) else "") for s in symbols}
    bare = [s[:len(s) - len(suffix[s])] for s in symbols]
    filt = shutil.which("c++filt")
    if not filt or not symbols:
        return {s: _ANON.sub("NS", s) for s in symbols}
    out = subprocess.run([filt], input="\n".join(bare) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    if len(out) != len(symbols):
        return {s: _ANON.sub("NS", s) for s in symbols}
    result = {}
    for s, b, d in zip(symbols, bare, out):
        # A name c++filt cannot read comes back as it was: then only the hash goes.
        result[s] = normalize(d) + suffix[s] if d != b else _ANON.sub("NS", s)
    return result


def _ptx_files(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".ptx"))
    return [path]


def kernels(path):
    """{normalized kernel name: normalized body} of a PTX file or a folder of them. A kernel
    defined in two files with different bodies keeps both, the second as NAME [file]."""
    parts = []
    for f in _ptx_files(path):
        with open(f) as fh:
            text = fh.read()
        for part in _ENTRY.split(text):
            m = _NAME.match(part)
            if m:
                parts.append((os.path.basename(f), m.group(1), _LOC.sub("", _through_body(part))))
    symbols = set()
    for _, name, body in parts:
        symbols.add(name)
        symbols.update(_SYMBOL.findall(body))
    names = _demangler(symbols)

    def sub(text):
        return _SYMBOL.sub(lambda m: names.get(m.group(0), m.group(0)), text)

    out = {}
    for fname, name, body in parts:
        key = names[name]
        norm = _LABEL.sub("$L__BB_", sub(body))
        if key in out and out[key] != norm:
            key = f"{key} [{fname}]"
        out[key] = norm
    return out


def read_map(path):
    """{old: new} from "OLD => NEW" lines."""
    mapping = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "=>" not in line:
                sys.exit(f"{path}:{n}: expected 'OLD => NEW', got {line!r}")
            old, new = (s.strip() for s in line.split("=>", 1))
            mapping[old] = new
    return mapping


def read_names(path):
    with open(path) as f:
        return {l.split("#", 1)[0].strip() for l in f} - {""}


def _rename(body, old, new):
    """The base body with the kernel's own name (its parameters) spelled as the new one's."""
    return body.replace(old, new)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", help="PTX file or folder of the old build")
    ap.add_argument("new", help="PTX file or folder of the new build")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--map", help="old-to-new kernel names, 'OLD => NEW' per line")
    ap.add_argument("--removed", help="base kernels meant to be gone, one name per line")
    args = ap.parse_args()
    a, b = kernels(args.base), kernels(args.new)
    mapping = read_map(args.map) if args.map else {}
    removed = read_names(args.removed) if args.removed else set()
    for old in mapping:
        if old not in a:
            print(f"map: {old} is not a kernel of the base")
    matched_new = set()
    rows = []
    differ = 0
    for old in sorted(a):
        new = mapping.get(old, old)
        if args.filter not in old and args.filter not in new:
            continue
        label = old if new == old else f"{old} => {new}"
        if new not in b:
            if old in removed:
                rows.append(f"{label}: removed (listed)")
            else:
                rows.append(f"{label}: only in base")
                differ += 1
            continue
        matched_new.add(new)
        base_body = _rename(a[old], old, new) if new != old else a[old]
        lines = [l for l in difflib.unified_diff(base_body.splitlines(), b[new].splitlines(),
                                                 lineterm="", n=0)
                 if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        rows.append(f"{label}: {'same' if not lines else f'{len(lines)} lines differ'}")
        differ += bool(lines)
    for new in sorted(set(b) - matched_new):
        if args.filter in new:
            rows.append(f"{new}: only in new")
            differ += 1
    for r in rows:
        print(r)
    same = sum(r.endswith(": same") for r in rows)
    gone = sum(r.endswith("removed (listed)") for r in rows)
    print(f"{same} of {len(rows)} kernels the same, {gone} removed as listed, {differ} differ or "
          "unmatched")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
