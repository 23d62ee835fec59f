#!/usr/bin/env python3
"""Static stall counts of one kernel's SASS beside Nsight Compute's per-instruction counters.

Each sm_90 instruction carries scheduling control bits: the stall count (cycles the warp waits
before its next instruction, set by the compiler for fixed-latency dependencies), the yield bit,
the scoreboards it sets and waits on. `cuobjdump -sass` prints them only inside the second
64-bit word of each instruction's encoding; this script decodes them and joins them with the
instructions executed and the warp samples of an ncu source export:

    cuobjdump -sass BINARY > all.sass          # (on the GPU machine: it has cuobjdump)
    ncu --section SourceCounters --section WarpStateStats --import-source yes -o rep \\
        -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 <bench command>
    ncu -i rep.ncu-rep --page source --csv --print-source sass | gzip > src.csv.gz
    python3 kernels/bench/sass_ctrl.py all.sass src.csv.gz --function 7712696 --per 2097152

--function picks the kernel whose mangled name contains the string; --per is the execution count
of the loop body to study (e.g. consumer warp-tiles): instructions executed that many times (or
twice that many) are the body. Prints the body's instruction count, the sum of its static stall
counts (cycles a warp needs for the body with no other wait), their histogram, the counts and
stalls by opcode, and the body in chunks of --chunk instructions with their share of the warp
samples: where the samples pile up beyond the instruction share, the warps wait on something
other than the issue slots. The input CSV may be gzip-compressed.
"""
import argparse
import collections
import csv
import gzip
import re

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* 0x([0-9a-f]{16}) \*/")
_WORD = re.compile(r"/\* 0x([0-9a-f]{16}) \*/")


def read_sass(path, function):
    """{offset: (text, stall, yield)} of the first function whose name contains `function`."""
    out, inside = {}, False
    with open(path) as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Function :" in line:
            if inside:
                break
            inside = function in line
        m = _INSN.search(line) if inside else None
        if m and i + 1 < len(lines):
            hi = _WORD.search(lines[i + 1])
            if hi:
                ctrl = int(hi.group(1), 16) >> 41  # bits 105..127 of the 128-bit instruction
                text = m.group(2).strip().rstrip(";").strip()
                out[int(m.group(1), 16)] = (text, ctrl & 0xF, (ctrl >> 4) & 1)
                i += 2
                continue
        i += 1
    return out


def opcode(text):
    parts = text.split()
    op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv, .gz)")
    ap.add_argument("--function", required=True, help="substring of the kernel's mangled name")
    ap.add_argument("--per", type=int, required=True, help="executions of the loop body")
    ap.add_argument("--chunk", type=int, default=40, help="instructions per printed chunk")
    args = ap.parse_args()
    sass = read_sass(args.sass, args.function)
    if not sass:
        raise SystemExit(f"no function matching {args.function!r} in {args.sass}")
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt") as f:
        rows = list(csv.reader(f))
    header = rows[1]
    i_exec = header.index("Instructions Executed")
    i_samp = header.index("Warp Stall Sampling (All Samples)")
    data = [r for r in rows[2:] if r and r[0].startswith("0x")]
    base = int(data[0][0], 16)
    body = []  # (offset, executed, samples, text, stall, yield)
    all_samples = 0
    for r in data:
        off = int(r[0], 16) - base
        executed, samples = int(r[i_exec] or 0), int(r[i_samp] or 0)
        all_samples += samples
        if off in sass and executed in (args.per, 2 * args.per):
            text, stall, yld = sass[off]
            body.append((off, executed / args.per, samples, text, stall, yld))
    if not body:
        raise SystemExit(f"no instruction executed {args.per} times")
    n = sum(b[1] for b in body)
    stalls = sum(b[1] * b[4] for b in body)
    samples = sum(b[2] for b in body)
    print(f"body: {n:.0f} instructions per execution, static stalls {stalls:.0f} cycles, "
          f"{samples} of {all_samples} warp samples")
    hist = collections.Counter(b[4] for b in body)
    print("stall count histogram (static instructions):", dict(sorted(hist.items())))
    by_op = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for b in body:
        e = by_op[opcode(b[3])]
        e[0] += b[1]
        e[1] += b[1] * b[4]
        e[2] += b[2]
    print("\nopcode      per body  stall cycles  samples")
    for op, (cnt, st, sm) in sorted(by_op.items(), key=lambda x: -x[1][2])[:25]:
        print(f"{op:<10} {cnt:9.1f} {st:13.0f} {100 * sm / samples:7.1f}%")
    print(f"\nchunks of {args.chunk}: offset, instructions, static stalls, share of the body's "
          "samples, top opcodes")
    for k in range(0, len(body), args.chunk):
        c = body[k:k + args.chunk]
        ops = collections.Counter(opcode(b[3]) for b in c)
        top = " ".join(f"{o}:{m}" for o, m in ops.most_common(4))
        cn = sum(b[1] for b in c)
        st = sum(b[1] * b[4] for b in c)
        sm = sum(b[2] for b in c)
        print(f"{c[0][0]:6x} {cn:5.0f} {st:5.0f} {100 * sm / samples:5.1f}%  {top}")


if __name__ == "__main__":
    main()
