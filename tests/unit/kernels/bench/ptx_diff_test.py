#!/usr/bin/env python3
"""kernels/bench/ptx_diff.py: what it calls the same and what it does not."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TOOL = os.path.join(ROOT, "kernels", "bench", "ptx_diff.py")
sys.path.insert(0, os.path.dirname(TOOL))
import ptx_diff  # noqa: E402


def ptx(ns_hash, body_a, body_b, loc_line=7, trailer="debug"):
    """A PTX file with two kernels in an anonymous namespace whose hash is ns_hash."""
    ns = f"_ZN6ablate7kernels43_GLOBAL__N__{ns_hash}_10_sagebwd_cu_f49c8137"
    return f"""//
.version 8.8
.target sm_90a

.visible .entry {ns}8KernelAv(
\t.param .u64 {ns}8KernelAv_param_0
)
{{
\t.loc\t1 {loc_line} 3
{body_a}
\t// begin inline asm
\t{{
.reg .pred done;
WAIT_LOOP:
@!done bra WAIT_LOOP;
}}
\t// end inline asm
\tret;
}}
.entry {ns}8KernelBv(
\t.param .u64 {ns}8KernelBv_param_0
)
{{
{body_b}
\tret;
}}
\t.file\t1 "/somewhere/{trailer}.cu"
\t.section\t.debug_str
"""


class PtxDiffTest(unittest.TestCase):
    def write(self, text):
        fd, path = tempfile.mkstemp(suffix=".ptx")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def run_tool(self, a, b):
        return subprocess.run([sys.executable, TOOL, a, b], capture_output=True, text=True)

    def test_same_kernels_despite_hash_line_records_and_trailer(self):
        a = self.write(ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;",
                           loc_line=7, trailer="base"))
        b = self.write(ptx("99aa0011", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;",
                           loc_line=42, trailer="new"))
        r = self.run_tool(a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 of 2 kernels the same", r.stdout)

    def test_a_changed_instruction_after_inline_asm_braces_is_found(self):
        # The change sits after the inline asm's column-0 closing brace: a body cut there would
        # miss it.
        a = self.write(ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;"))
        b_text = ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;")
        b_text = b_text.replace("\t// end inline asm\n\tret;", "\t// end inline asm\n\tret.uni;", 1)
        b = self.write(b_text)
        r = self.run_tool(a, b)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("KernelAv: 2 lines differ", r.stdout)  # the - and the + line
        self.assertIn("KernelBv: same", r.stdout)

    def test_label_function_index_is_ignored_but_not_the_label(self):
        # A kernel added before this one renumbers its labels ($L__BB119_2 -> $L__BB121_2);
        # a branch to another label of the same kernel is still a difference.
        body = "\t@%p1 bra \t$L__BB119_2;\n$L__BB119_2:\n\tadd.s32 %r1, %r2, 1;"
        a = self.write(ptx("2d541504", body, "\tmul.lo.s32 %r3, %r4, 2;"))
        b = self.write(ptx("2d541504", body.replace("BB119_", "BB121_"),
                           "\tmul.lo.s32 %r3, %r4, 2;"))
        r = self.run_tool(a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 of 2 kernels the same", r.stdout)
        c = self.write(ptx("2d541504", body.replace("bra \t$L__BB119_2", "bra \t$L__BB119_3"),
                           "\tmul.lo.s32 %r3, %r4, 2;"))
        r = self.run_tool(a, c)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("KernelAv: 2 lines differ", r.stdout)

    def test_a_kernel_in_one_file_only(self):
        a = self.write(ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;"))
        b = self.write(ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;")
                       .replace("8KernelBv", "8KernelCv"))
        r = self.run_tool(a, b)
        self.assertEqual(r.returncode, 1)
        self.assertIn("only in base", r.stdout)
        self.assertIn("only in new", r.stdout)

    def test_bodies_end_at_their_closing_brace(self):
        path = self.write(ptx("2d541504", "\tadd.s32 %r1, %r2, 1;", "\tmul.lo.s32 %r3, %r4, 2;"))
        bodies = ptx_diff.kernels(path)
        self.assertEqual(len(bodies), 2)
        for body in bodies.values():
            self.assertTrue(body.rstrip().endswith("}"), body[-80:])
            self.assertNotIn(".debug_str", body)
            self.assertNotIn(".loc", body)

    def test_a_map_matches_renamed_kernels_across_files_and_namespaces(self):
        def entry(name, body):
            return (f".visible .entry {name}(\n\t.param .u64 {name}_param_0\n)\n{{\n"
                    f"\tld.param.u64 %rd1, [{name}_param_0];\n{body}\n\tret;\n}}\n")
        base = self.write(".version 8.8\n" + entry("_Z7KernelAv", "\tadd.s32 %r1, %r2, 1;") +
                          entry("_Z7KernelBv", "\tmul.lo.s32 %r3, %r4, 2;") +
                          entry("_Z7KernelLv", "\tsub.s32 %r3, %r4, 2;"))
        new_dir = tempfile.mkdtemp()
        self.addCleanup(lambda: [os.remove(os.path.join(new_dir, f)) for f in os.listdir(new_dir)]
                        and os.rmdir(new_dir))
        # KernelA renamed and moved into a namespace of another file; KernelB moved unchanged;
        # KernelL (a lab variant) removed.
        with open(os.path.join(new_dir, "forward.ptx"), "w") as f:
            f.write(entry("_ZN3fwd7KernelFEv", "\tadd.s32 %r1, %r2, 1;"))
        with open(os.path.join(new_dir, "backward.ptx"), "w") as f:
            f.write(entry("_ZN3bwd7KernelBEv", "\tmul.lo.s32 %r3, %r4, 2;"))
        names = self.write("KernelA() => KernelF()  # the rename\n")
        removed = self.write("KernelL()\n")
        r = subprocess.run([sys.executable, TOOL, base, new_dir, "--map", names, "--removed",
                            removed], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("KernelA() => KernelF(): same", r.stdout)
        self.assertIn("KernelB(): same", r.stdout)
        self.assertIn("KernelL(): removed (listed)", r.stdout)
        # Without the list the removal is a difference, and a wrong map is one too.
        r = subprocess.run([sys.executable, TOOL, base, new_dir, "--map", names],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("KernelL(): only in base", r.stdout)


if __name__ == "__main__":
    unittest.main()
