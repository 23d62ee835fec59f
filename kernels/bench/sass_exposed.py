#!/usr/bin/env python3
"""Long-latency results consumed right after they are issued, in one kernel's SASS.

A shared-memory load, a constant load, a special-register read (S2R), a shuffle or an SFU
operation (MUFU) takes tens of cycles; when the instruction that reads its result follows within
a few instructions, the warp waits for it unless other warps fill the slots. In a kernel with two
warps per scheduler that is the latency the loop pays. The usual causes the compiler cannot
undo: a load after a store it cannot tell apart from it (two shared tiles behind computed
addresses), a load after an asm statement with a memory clobber (wgmma waits, barriers), an
address rematerialized from the thread index under register pressure.

    cuobjdump -sass BINARY | awk '/Function :/{p=($0 ~ /SageBackwardKernelILi128ELb0ELi7712696E/)} p' > k.sass
    python3 kernels/bench/sass_exposed.py k.sass --lo 1cf0 --hi a830 [--within 4]

--lo / --hi bound the instruction offsets to study (e.g. a loop from its first instruction to its
back-edge branch; default: the whole function); --within is the largest distance, in
instructions, from the producer to its first reader that is reported (default 4). Prints one line
per such pair: offset, producer, distance, reader. The reader is found by register name, so a
vector load's later registers and predicated writes count as written; the list is a guide for
reading the SASS, not a measurement.
"""
import argparse
import re

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_PRODUCER = re.compile(r"^(?:@!?U?P\w+\s+)?(LDS|LDC|LDL|LDG|S2R|SHFL|MUFU)(\S*)\s+R(\d+)")
_REG = re.compile(r"\bR(\d+)\b")


def read(path):
    """[(offset, text)] of every instruction in the file, in order."""
    out = []
    with open(path) as f:
        for line in f:
            m = _INSN.search(line)
            if m:
                out.append((int(m.group(1), 16), m.group(2)))
    return out


def width(opcode, suffix):
    """Registers a producer writes: 4 for .128, 2 for .64, else 1."""
    if ".128" in suffix:
        return 4
    if ".64" in suffix:
        return 2
    return 1


def sources(text):
    """Register numbers an instruction reads (stores read every operand)."""
    parts = text.split(None, 1)
    if len(parts) < 2:
        return set()
    op, args = parts[0], parts[1]
    if re.match(r"^@", op):  # predicate guard: the opcode is the next word
        sub = args.split(None, 1)
        if len(sub) < 2:
            return set()
        op, args = sub
    operands = args.split(",")
    if op.startswith(("ST", "RED", "ATOM", "BRA", "UBLKRED", "SYNCS")):
        read_part = args
    else:
        read_part = ",".join(operands[1:])
    return {int(r) for r in _REG.findall(read_part)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass")
    ap.add_argument("--lo", default=None, help="first offset (hex)")
    ap.add_argument("--hi", default=None, help="last offset (hex)")
    ap.add_argument("--within", type=int, default=4)
    args = ap.parse_args()
    body = read(args.sass)
    lo = int(args.lo, 16) if args.lo else 0
    hi = int(args.hi, 16) if args.hi else 1 << 40
    body = [(a, t) for a, t in body if lo <= a <= hi]
    found = 0
    for i, (addr, text) in enumerate(body):
        m = _PRODUCER.match(text)
        if not m:
            continue
        first = int(m.group(3))
        written = set(range(first, first + width(m.group(1), m.group(2))))
        for j in range(i + 1, min(len(body), i + 1 + args.within)):
            if written & sources(body[j][1]):
                print(f"{addr:05x}  {text[:56]:56s} +{j - i}  {body[j][1][:56]}")
                found += 1
                break
    print(f"{found} producers read within {args.within} instructions "
          f"({len(body)} instructions in range)")


if __name__ == "__main__":
    main()
