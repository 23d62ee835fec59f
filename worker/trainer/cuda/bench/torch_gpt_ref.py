#!/usr/bin/env python3
"""PyTorch reference of ablate's GPT (same shape and architecture) for the GPU training benchmark.

Pre-norm decoder, no biases: RMSNorm (eps 1e-6, gains), fused QKV projection, per-head QK-norm with
(D) gains, rotate-half RoPE (base 10000), causal SDPA, output projection, GELU(tanh) MLP of 4C,
tied embeddings. Runs under torch.compile with bf16 autocast and fused AdamW; prints one JSON line
with tokens/s (median over the timed steps) and MFU with ablate's FLOP count and peak.
--sdpa pins SDPA's backend (cudnn, flash, efficient, math; default: PyTorch's own choice) and the
line says which backend the attention kernels were (from their names, when --profile is on).
--profile N: N more steps under torch.profiler, and the line gains "profile": each kind of work's
GPU kernel time per step (attention forward / backward, GEMMs, the optimizer, the loss, other
kernels such as the compiled graph's fused norm / RoPE / elementwise ones) and "idle": the step's
wall time not covered by any kernel (launch gaps, host work), the same kinds as ablate-train
--profile's (trainer/model/step_profile.h); and "top_kernels": the 30 kernels with the most time
per step, each with the kind it was counted as and its calls per step.
Written for this benchmark; not derived from another project's code.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H, self.D = H, C // H
        self.ln1 = nn.Parameter(torch.ones(C))
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.q_gain = nn.Parameter(torch.ones(self.D))
        self.k_gain = nn.Parameter(torch.ones(self.D))
        self.wo = nn.Linear(C, C, bias=False)
        self.ln2 = nn.Parameter(torch.ones(C))
        self.up = nn.Linear(C, 4 * C, bias=False)
        self.down = nn.Linear(4 * C, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        a = F.rms_norm(x, (C,), self.ln1, 1e-6)
        q, k, v = self.qkv(a).view(B, T, 3, self.H, self.D).permute(2, 0, 3, 1, 4)
        q = F.rms_norm(q, (self.D,), self.q_gain, 1e-6)
        k = F.rms_norm(k, (self.D,), self.k_gain, 1e-6)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, C))
        h = F.rms_norm(x, (C,), self.ln2, 1e-6)
        return x + self.down(F.gelu(self.up(h), approximate="tanh"))


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Gpt(nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.Parameter(torch.ones(C))
        D = C // H
        inv = 10000.0 ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("wo.weight", "down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        x = F.rms_norm(x, (x.shape[-1],), self.lnf, 1e-6)
        logits = F.linear(x, self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


SDPA_BACKENDS = ("auto", "cudnn", "flash", "efficient", "math")


def pin_sdpa(backend):
    """Leaves only `backend` enabled for scaled_dot_product_attention (global flags, which the
    compiled graph reads too); "auto" leaves PyTorch's defaults."""
    if backend == "auto":
        return
    b = torch.backends.cuda
    b.enable_cudnn_sdp(backend == "cudnn")
    b.enable_flash_sdp(backend == "flash")
    b.enable_mem_efficient_sdp(backend == "efficient")
    b.enable_math_sdp(backend == "math")


def kernel_kind(name):
    """The kind of work of a CUDA kernel, from its name."""
    n = name.lower()
    attn = any(k in n for k in ("flash", "fmha", "sdpa", "attention", "cudnn_generated_fort_native_sdpa"))
    if attn:
        # cuDNN names its passes fprop / bprop; a name with neither tag stays unsplit ("attention")
        # rather than being counted as a forward.
        if any(k in n for k in ("bwd", "backward", "bprop", "dq", "dkdv")):
            return "attention_bwd"
        if any(k in n for k in ("fwd", "forward", "fprop")):
            return "attention_fwd"
        return "attention"
    if any(k in n for k in ("gemm", "xmma", "cutlass", "nvjet", "matmul", "sm90_", "wgmma")):
        return "gemm"
    if any(k in n for k in ("multi_tensor", "adam", "foreach")):
        return "optimizer"
    if any(k in n for k in ("cross_entropy", "log_softmax", "nll_loss")):
        return "loss"
    if "norm" in n and "triton" not in n:
        return "norm_rope"
    return "other (fused norm / RoPE / elementwise)"


def attention_backend(names):
    """Which SDPA implementation the attention kernels' names say ran."""
    n = " ".join(names).lower()
    if "cudnn" in n:
        return "cudnn"
    if "flash" in n:
        return "flash"
    if "fmha" in n or "efficient" in n:
        return "efficient"
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d_model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--peak", type=float, default=989.4e12)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--sdpa", choices=SDPA_BACKENDS, default="auto")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    a = ap.parse_args()
    pin_sdpa(a.sdpa)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    model = Gpt(a.vocab, a.seq, a.layers, a.d_model, a.heads).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    gen = torch.Generator(device=dev).manual_seed(1)
    times = []
    t_compile = time.time()

    def step():
        idx = torch.randint(0, 256, (a.batch, a.seq), device=dev, generator=gen)
        tgt = torch.randint(0, 256, (a.batch, a.seq), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for s in range(a.steps + a.warmup):
        torch.cuda.synchronize()
        t0 = time.time()
        loss = step()
        torch.cuda.synchronize()
        if s == 0:
            t_compile = time.time() - t_compile
        if s >= a.warmup:
            times.append(time.time() - t0)
    prof = None
    if a.profile > 0:
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            t0 = time.time()
            for _ in range(a.profile):
                loss = step()
            torch.cuda.synchronize()
            wall = time.time() - t0
        kinds, attn_names, by_name = {}, set(), {}
        for e in p.events():
            if e.device_type.name != "CUDA":
                continue
            kind = kernel_kind(e.name)
            if kind.startswith("attention"):
                attn_names.add(e.name)
            us = getattr(e, "device_time_total", None)
            if us is None:
                us = e.cuda_time_total  # PyTorch before 2.4
            kinds[kind] = kinds.get(kind, 0.0) + us / 1e3
            ms_calls = by_name.setdefault(e.name, [0.0, 0])
            ms_calls[0] += us / 1e3
            ms_calls[1] += 1
        per_step = {k: v / a.profile for k, v in sorted(kinds.items())}
        # The kernels that take the most time, with the kind each was counted as, so that a
        # kind's total can be checked against the kernels in it.
        top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]
        step_ms = 1e3 * wall / a.profile
        prof = {"steps": a.profile, "step_ms": step_ms, "kernels_ms": per_step,
                "idle_ms": max(0.0, step_ms - sum(per_step.values())),
                "attention_backend": attention_backend(attn_names),
                "attention_kernels": sorted(attn_names)[:8],
                "top_kernels": [{"name": n[:160], "kind": kernel_kind(n),
                                 "ms_per_step": ms / a.profile, "calls_per_step": c / a.profile}
                                for n, (ms, c) in top]}
    L, C, V, T = a.layers, a.d_model, a.vocab, a.seq
    fpt = 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * C * T
    tps = a.batch * a.seq / statistics.median(times)
    print(json.dumps({"impl": "pytorch" + ("" if a.no_compile else "+compile"),
                      "tokens_per_s": tps, "mfu": fpt * tps / a.peak,
                      "step_ms": 1e3 * statistics.median(times), "first_step_s": t_compile,
                      "loss": float(loss), "torch": torch.__version__, "sdpa": a.sdpa,
                      "device": torch.cuda.get_device_name(),
                      **({"profile": prof} if prof else {})}))


if __name__ == "__main__":
    main()
