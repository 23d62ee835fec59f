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
--top N also lists the N instructions with the most live registers. With `-lrm narrow` output
(one column per register), --long lists the registers live at every instruction of the range
(values a loop keeps throughout: each needs the same register free everywhere), with their uses
in the range and their last definition before it; registers only zeroed there (accumulators) are
left out.
"""
import argparse
import re

_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*//\s*\|\s*(\d*)")
_NARROW = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*//\s*\|\s*\d*\s(.*?)\|")
_MARKS = ("BAR.SYNC", "DEPBAR", "IGMMA", "HGMMA", "MUFU", "SHFL", "LDS.128", "S2R")


def function_lines(path, function):
    """The lines of the function whose section name contains `function`."""
    inside = False
    with open(path) as f:
        for line in f:
            if "section" in line and ".text." in line:
                inside = function in line
            if inside:
                yield line


def read(path, function, lo, hi):
    """[(offset, text, live GPRs)] of the function's instructions within [lo, hi]."""
    rows = []
    for line in function_lines(path, function):
        m = _INSN.match(line)
        if m:
            addr = int(m.group(1), 16)
            if lo <= addr <= hi:
                rows.append((addr, m.group(2).strip(), int(m.group(3) or 0)))
    return rows


def loop_long(path, function, lo, hi):
    """Registers live at every instruction in [lo, hi] (narrow format), with their uses there
    and their last definition before lo."""
    rows, before = [], []
    for line in function_lines(path, function):
        m = _NARROW.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        if lo <= addr <= hi:
            rows.append((addr, m.group(2).strip(), m.group(3)))
        elif addr < lo:
            before.append((addr, m.group(2).strip()))
    if not rows:
        raise SystemExit("no narrow life-range columns in that range (nvdisasm -lrm narrow)")
    width = min(len(c) for *_, c in rows)
    for r in range(width):
        if any(c[r] == " " for *_, c in rows):
            continue
        name = re.compile(r"\bR%d\b" % r)
        uses = sum(1 for _, t, _ in rows if name.search(t))
        defs = [(a, t) for a, t in before
                if re.match(r"(@!?P\d\s+)?\S+\s+R%d\b" % r, t)
                or re.match(r"CS2R\s+R%d\b" % (r - 1), t)]  # CS2R zeroes a register pair
        if defs and re.search(r"\bCS2R\b|RZ, RZ, RZ|^MOV R\d+, RZ", defs[-1][1]):
            continue  # zeroed before the range: an accumulator
        last = f"{defs[-1][0]:05x} {defs[-1][1][:60]}" if defs else "(none before the range)"
        print(f"  R{r}: {uses} uses in the range; last definition before it: {last}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("live")
    ap.add_argument("--function", required=True)
    ap.add_argument("--lo", default="0")
    ap.add_argument("--hi", default="ffffffff")
    ap.add_argument("--chunk", type=int, default=80)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--long", action="store_true", help="registers live throughout (narrow)")
    args = ap.parse_args()
    if args.long:
        print("registers live at every instruction of the range (accumulators left out):")
        loop_long(args.live, args.function, int(args.lo, 16), int(args.hi, 16))
        return
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
