#!/usr/bin/env python3
"""Live registers along one kernel's SASS, from nvdisasm's life-range column.

Where a kernel runs at its register cap, ptxas keeps long-lived values in registers only while
the interference allows; a step that adds short-lived values elsewhere can make it give up one
(rematerializing it, e.g. the thread index by S2R, or spilling). nvdisasm prints the number of
live general-purpose registers before each instruction; this script reads that column for one
function and prints the loop (or any offset range) in chunks: the chunk's offsets, its largest
and smallest live count, and the long-latency or synchronizing opcodes in it (barriers, wgmma
issue and waits, MUFU, shuffles, 16-byte shared loads, S2R), so the peak can be placed in the
source. On the GPU machine (nvdisasm ships with the toolkit there):

    cuobjdump -xelf sagebwd.sm_90a.cubin BINARY                     # the kernels' cubin
    F=<mangled kernel name>
    IDX=$(cuobjdump -elf sagebwd.sm_90a.cubin | awk -v f="$F" '/section .symtab/{s=1} s && $NF==f {print $1; exit}')
    nvdisasm -lrm count -fun $((IDX)) sagebwd.sm_90a.cubin > live.txt   # -fun takes the index
    python3 kernels/bench/sass_live.py live.txt --function 7712696 --lo 1cf0 --hi a830

--function picks the function whose section name contains the string (nvdisasm -fun prints the
cubin's other sections too); --chunk sets the chunk length in instructions (default 80);
--top N also lists the N instructions with the most live registers.
"""
import argparse
import re

_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*//\s*\|\s*(\d*)\s*\|")
_MARKS = ("BAR.SYNC", "DEPBAR", "IGMMA", "HGMMA", "MUFU", "SHFL", "LDS.128", "S2R")


def read(path, function, lo, hi):
    """[(offset, text, live GPRs)] of the function's instructions within [lo, hi]."""
    rows, inside = [], False
    with open(path) as f:
        for line in f:
            if "section" in line and ".text." in line:
                inside = function in line
            if not inside:
                continue
            m = _INSN.match(line)
            if m:
                addr = int(m.group(1), 16)
                if lo <= addr <= hi:
                    rows.append((addr, m.group(2).strip(), int(m.group(3) or 0)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("live")
    ap.add_argument("--function", required=True)
    ap.add_argument("--lo", default="0")
    ap.add_argument("--hi", default="ffffffff")
    ap.add_argument("--chunk", type=int, default=80)
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    rows = read(args.live, args.function, int(args.lo, 16), int(args.hi, 16))
    if not rows:
        raise SystemExit("no instructions with a live-register column in that range")
    print(f"{len(rows)} instructions, live GPRs {min(r[2] for r in rows)}-{max(r[2] for r in rows)}")
    for i in range(0, len(rows), args.chunk):
        ch = rows[i:i + args.chunk]
        marks = sorted({t.split()[1] if t.startswith("@") else t.split()[0]
                        for _, t, _ in ch if any(k in t for k in _MARKS)})
        print(f"  {ch[0][0]:05x}-{ch[-1][0]:05x}  max {max(c for *_, c in ch):3d}  "
              f"min {min(c for *_, c in ch):3d}  {' '.join(marks)}")
    if args.top:
        print(f"the {args.top} instructions with the most live registers:")
        for addr, text, live in sorted(rows, key=lambda r: -r[2])[:args.top]:
            print(f"  {addr:05x} {live:3d}  {text[:72]}")


if __name__ == "__main__":
    main()
