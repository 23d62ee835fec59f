#!/usr/bin/env python3
"""Which kernels of two PTX files differ: a refactor checked without the GPU.

A change meant to leave some kernels alone (a cleanup, a step for one head dimension) is
verified by compiling the file before and after to PTX and comparing kernel by kernel; where the
PTX is the same, so is the machine code ptxas makes of it, and no timing is needed. Line-number
records (.loc), the hash nvcc puts into the names of anonymous-namespace symbols (it depends on
the file's path) and the function index in branch labels ($L__BB<index>_<n>: a kernel added
before another renumbers it) are ignored; everything else counts.

    NVCC_FLAGS="-I kernels -I common -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr \\
                --generate-code=arch=compute_90a,code=[compute_90a] -ptx"
    git show BASE:kernels/attention/cuda/sagebwd.cu > /tmp/base.cu   # beside the original:
    cp /tmp/base.cu kernels/attention/cuda/sagebwd_base.cu           #   the same includes
    nvcc $NVCC_FLAGS kernels/attention/cuda/sagebwd_base.cu -o /tmp/base.ptx
    nvcc $NVCC_FLAGS kernels/attention/cuda/sagebwd.cu -o /tmp/new.ptx
    rm kernels/attention/cuda/sagebwd_base.cu
    python3 kernels/bench/ptx_diff.py /tmp/base.ptx /tmp/new.ptx [--filter SageBackwardKernel]

Prints each kernel (its mangled name without the namespace hash) with "same" or the number of
differing lines, then a summary; exit status 1 when a kernel differs or exists in one file only.
"""
import argparse
import difflib
import re
import sys

_ENTRY = re.compile(r"(?=^(?:\.visible |\.weak )?\.entry )", re.M)
_NAME = re.compile(r"^(?:\.visible |\.weak )?\.entry (\S+?)\(", re.M)
# _ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c8137 -> NS (the length prefix too).
_ANON = re.compile(r"\d+_GLOBAL__N__\w+?_\d+_\w+?_cu_[0-9a-f]+")
_LOC = re.compile(r"^\s*\.loc\s.*\n", re.M)
# $L__BB119_2 -> $L__BB_2: the first number is the function's index in the file, which a kernel
# added or removed before it shifts.
_LABEL = re.compile(r"\$L__BB\d+_")


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


def kernels(path):
    """{normalized kernel name: normalized body} of a PTX file."""
    with open(path) as f:
        text = f.read()
    out = {}
    for part in _ENTRY.split(text):
        m = _NAME.match(part)
        if not m:
            continue
        body = _LABEL.sub("$L__BB_", _ANON.sub("NS", _LOC.sub("", _through_body(part))))
        out[_ANON.sub("NS", m.group(1))] = body
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    args = ap.parse_args()
    a, b = kernels(args.base), kernels(args.new)
    names = sorted(n for n in set(a) | set(b) if args.filter in n)
    differ = 0
    for n in names:
        if n not in a or n not in b:
            print(f"{n}: only in {'new' if n not in a else 'base'}")
            differ += 1
            continue
        lines = [l for l in difflib.unified_diff(a[n].splitlines(), b[n].splitlines(),
                                                 lineterm="", n=0)
                 if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        print(f"{n}: {'same' if not lines else f'{len(lines)} lines differ'}")
        differ += bool(lines)
    print(f"{len(names) - differ} of {len(names)} kernels the same")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
