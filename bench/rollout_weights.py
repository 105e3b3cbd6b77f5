"""Rollout weights: which weight format decodes fastest on this CPU, and what it costs in accuracy.

    python bench/rollout_weights.py [--part micro|decode|quality|all] [--threads 0] [--reps 5] [--new-tokens 256]

Three parts, each short enough to time alone (wrap each in `flock /tmp/bench.lock`):

micro    one decode step's matmuls at batch 16: every linear layer of SmolLM2-135M-Instruct (30 layers x
         q, k, v, o, gate, up, down, and the tied lm_head 49152 x 576), each with its own weights, so the
         540 MB of fp32 weights stream from memory as in real decoding (a single repeated matrix would sit
         in cache). Formats, x [16, K] fp32 in and out:
           fp32            F.linear(x, w)
           bf16w-fp32      F.linear(x, w_bf16.float()): bf16 storage, converted per call
           bf16            rlvr Bf16Linear: F.linear(x.bfloat16(), w_bf16).float()
           int8wo-bf16     weight-only int8, torch.ops.aten._weight_int8pack_mm(x.bfloat16(), q, s_bf16)
           int8wo-fp32     the same with fp32 activations (the op's scales must match x's dtype)
           int8            rlvr Int8Linear: x quantised per row too, torch._int_mm (dynamic W8A8)
decode   tokens/s of the built-in engine (rlvr.rollout.builtin.generate) at batch 16 (2 demo prompts x
         G=8) x --new-tokens (256), no stop token (every row decodes all of them), temperature 1, for the
         policy (fp32) and its rollout copies (rlvr.rollout.quant.rollout_copy), rounds interleaved; also
         the time of one `refresh` (the per-step weight sync). fp32-before is the baseline of the 2x decode
         target: the same engine with a full-vocabulary sampler (sample_before: log_softmax, exp and
         a prefix sum over the whole vocabulary per token). int8-compiled: the int8 copy decoding through
         compiled layers (rollout.compile, rlvr.rollout.lean.compile_decode); its first call compiles.
quality  against fp32 on 8 demo prompts: greedy completions of each format, 64 tokens with no stop token
         (the demo's answers alone are ~5 tokens; past <|im_end|> the model writes on); teacher-forced on
         fp32's completions, the max |logit difference|, top-1 agreement, and |log p| of fp32's tokens
         at temperature 1 (what the trainer logs as rollout/logp_mismatch_mean_abs). int8wo (weight-only
         int8, dequantised: its exact numbers without a fast kernel) shows how much of int8's error is
         the activation quantisation. Same answers: greedy answers (to the stop token, as graded) of 48
         demo prompts identical to fp32's.

Ratios are within one run (the machine is noisy); --threads defaults to 0, torch's default (one thread per
core, as `rlvr train`); on a machine shared with other busy jobs pass --threads 1.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from common import config_prompts  # bench/common.py
from rlvr.models import load_model, stop_token_ids
from rlvr.rollout import builtin, decoding, lean
from rlvr.rollout.quant import Bf16Linear, Int8Linear, quantize_rows, refresh, rollout_copy

BATCH = 16


# ---------------------------------------------------------------- micro: one decode step's matmuls


def step_fns(weights: list[torch.Tensor]) -> dict[str, tuple[callable, int]]:
    """format -> (one decode step: every layer's matmul on x [16, K], bytes of weights it reads)."""
    xs = {k: torch.randn(BATCH, k) for k in {w.shape[1] for w in weights}}
    bf = [w.to(torch.bfloat16) for w in weights]
    b16 = [Bf16Linear(w) for w in weights]
    i8 = [Int8Linear(w) for w in weights]
    wo = [(m.weight, m.scale, m.scale.to(torch.bfloat16)) for m in i8]
    n = sum(w.numel() for w in weights)
    return {
        "fp32": (lambda: [F.linear(xs[w.shape[1]], w) for w in weights], 4 * n),
        "bf16w-fp32": (lambda: [F.linear(xs[w.shape[1]], w.float()) for w in bf], 2 * n),
        "bf16": (lambda: [m(xs[m.weight.shape[1]]) for m in b16], 2 * n),
        "int8wo-bf16": (lambda: [torch.ops.aten._weight_int8pack_mm(xs[q.shape[1]].bfloat16(), q, sb).float()
                                 for q, _, sb in wo], n),
        "int8wo-fp32": (lambda: [torch.ops.aten._weight_int8pack_mm(xs[q.shape[1]], q, s) for q, s, _ in wo], n),
        "int8": (lambda: [m(xs[m.in_features]) for m in i8], n),
    }


def micro(model, reps: int) -> None:
    weights = [m.weight.detach() for m in model.modules() if isinstance(m, nn.Linear)]  # lm_head: the embedding
    fns = step_fns(weights)
    times = {name: [] for name in fns}
    for name, (fn, _) in fns.items():  # warm-up
        fn()
    for _ in range(reps):  # rounds interleaved: noise falls on every format alike
        for name, (fn, _) in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["fp32-before"])
    n = sum(w.numel() for w in weights) / 1e6
    print(f"\nmicro: one decode step's matmuls, {len(weights)} weight matrices ({n:.1f}M parameters), "
          f"x [{BATCH}, K]; median of {reps} rounds")
    print(f"  {'format':<13}{'ms/step':>9}{'MB read':>9}{'GB/s':>7}{'vs fp32':>9}")
    for name, (_, nbytes) in fns.items():
        t = statistics.median(times[name])
        print(f"  {name:<13}{1e3 * t:>9.1f}{nbytes / 1e6:>9.0f}{nbytes / t / 1e9:>7.1f}{base / t:>8.2f}x")


# ---------------------------------------------------------------- decode: whole-model tokens/s


def sample_before(logits, temperature, top_p=1.0, top_k=0, u=None):
    """A sampler over the whole vocabulary, for the baseline row (temperature > 0, no top-k or top-p, as
    here): log_softmax, exp, then one prefix sum over the whole vocabulary."""
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, V]
    cdf = logp_all.exp().cumsum(dim=-1)
    tokens = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def sampler(name: str):
    """fp32-before: the engine with sample_before in place of rlvr.rollout.sampling.sample_next."""
    if name != "fp32-before":
        return contextlib.nullcontext()
    return mock.patch.object(decoding, "sample_next", sample_before)


def decode(model, prompts, reps: int, new_tokens: int) -> None:
    copies = {"fp32-before": model, "fp32": model}
    build = {}
    for fmt in ("bf16", "int8"):
        t = time.perf_counter()
        copies[fmt] = rollout_copy(model, fmt)
        build[fmt] = time.perf_counter() - t
    copies["int8-compiled"] = rollout_copy(model, "int8")
    assert lean.compile_decode(copies["int8-compiled"])
    g = BATCH // len(prompts)
    kw = dict(group_size=g, max_new_tokens=new_tokens, temperature=1.0, stop_ids=[], pad_id=0)
    seeds = list(range(len(prompts)))
    for name, m in copies.items():  # warm-up (int8-compiled: the compilation)
        with sampler(name):
            t = time.perf_counter()
            builtin.generate(m, prompts, seeds=seeds, **{**kw, "max_new_tokens": 8})
            if name == "int8-compiled":
                print(f"  int8-compiled: first generate (torch.compile) {time.perf_counter() - t:.1f} s")
    times = {name: [] for name in copies}
    for _ in range(reps):
        for name, m in copies.items():
            with sampler(name):
                t = time.perf_counter()
                r = builtin.generate(m, prompts, seeds=seeds, **kw)
                times[name].append(time.perf_counter() - t)
            assert int(r.completion_mask.sum()) == BATCH * new_tokens
    print(f"\ndecode: built-in engine, {len(prompts)} prompts x G={g} = {BATCH} rows x {new_tokens} new tokens "
          f"(prompt {len(prompts[0])} tokens), temperature 1; median of {reps} rounds")
    print(f"  {'format':<12}{'seconds':>9}{'tokens/s':>10}{'vs before':>10}{'copy s':>8}{'refresh s':>11}")
    base = statistics.median(times["fp32-before"])
    for name, m in copies.items():
        t = statistics.median(times[name])
        sync = ""
        if name in build:
            t0 = time.perf_counter()
            refresh(m, model)
            sync = f"{time.perf_counter() - t0:>11.2f}"
        copy_s = f"{build[name]:>8.2f}" if name in build else f"{'':>8}"
        print(f"  {name:<12}{t:>9.2f}{BATCH * new_tokens / t:>10.1f}{base / t:>9.2f}x{copy_s}{sync}")


# ---------------------------------------------------------------- quality against fp32


class _DequantizedInt8(nn.Linear):
    """Weight-only int8 with exact numbers: q * scale in fp32 (no fast kernel; for quality only)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__(weight.shape[1], weight.shape[0], bias=False)
        q, s = quantize_rows(weight)
        self.weight = nn.Parameter(q.float() * s[:, None], requires_grad=False)


def weight_only_copy(model):
    out = rollout_copy(model, "int8")
    for name, m in list(out.named_modules()):
        if isinstance(m, Int8Linear):
            out.set_submodule(name, _DequantizedInt8(m.dequantized()))
    return out


def teacher_forced(model, m, prompts, rows) -> tuple[float, float, torch.Tensor]:
    """On fp32's completions: max |logit difference|, top-1 agreement, |log p difference| per token [N]."""
    dl, agree, dlp = 0.0, 0, []
    for p, c in zip(prompts, rows):
        ids = torch.tensor([p + c])
        a = model(input_ids=ids).logits[0, len(p) - 1:-1]  # [Tc, V]: the logits that chose c
        b = m(input_ids=ids).logits[0, len(p) - 1:-1]
        dl = max(dl, float((a - b).abs().max()))
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        tok = torch.tensor(c)[:, None]
        dlp.append((a.log_softmax(-1).gather(-1, tok) - b.log_softmax(-1).gather(-1, tok)).abs().squeeze(-1))
    dlp = torch.cat(dlp)
    return dl, agree / len(dlp), dlp


@torch.no_grad()
def quality(model, prompts, answer_prompts, stop_ids: list[int], new_tokens: int) -> None:
    copies = {"bf16": rollout_copy(model, "bf16"), "int8": rollout_copy(model, "int8"),
              "int8wo": weight_only_copy(model)}
    kw = dict(group_size=1, max_new_tokens=new_tokens, temperature=0.0, stop_ids=[], pad_id=0)
    answer_kw = dict(kw, max_new_tokens=24, stop_ids=stop_ids)
    ref_rows = builtin.generate(model, prompts, **kw).completion_token_lists()
    ref_answers = builtin.generate(model, answer_prompts, **answer_kw).completion_token_lists()
    print(f"\nquality vs fp32: {len(prompts)} demo prompts, greedy, {new_tokens} tokens, no stop "
          f"({sum(map(len, ref_rows))} fp32 tokens); same answers: {len(answer_prompts)} demo prompts' greedy "
          f"answers (to the stop token) identical")
    print(f"  {'format':<8}{'same tok':>9}{'same rows':>10}{'max|dlogit|':>12}{'top1 agree':>11}"
          f"{'mean|dlogp|':>12}{'max|dlogp|':>11}{'same answers':>13}")
    for name, m in copies.items():
        rows = builtin.generate(m, prompts, **kw).completion_token_lists()
        same = sum(x == y for ra, rb in zip(ref_rows, rows) for x, y in zip(ra, rb)) / sum(map(len, ref_rows))
        same_rows = sum(a == b for a, b in zip(ref_rows, rows)) / len(rows)
        answers = builtin.generate(m, answer_prompts, **answer_kw).completion_token_lists()
        same_answers = sum(a == b for a, b in zip(ref_answers, answers)) / len(answers)
        dl, agree, dlp = teacher_forced(model, m, prompts, ref_rows)
        print(f"  {name:<8}{100 * same:>8.1f}%{100 * same_rows:>9.0f}%{dl:>12.3f}{100 * agree:>10.1f}%"
              f"{float(dlp.mean()):>12.4f}{float(dlp.max()):>11.4f}{100 * same_answers:>12.0f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("micro", "decode", "quality", "all"), default="all")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 (default) keeps torch's, as rlvr train")
    p.add_argument("--reps", type=int, default=5, help="timed rounds (micro), after a warm-up")
    p.add_argument("--decode-reps", type=int, default=2, help="timed rounds (decode), after a warm-up")
    p.add_argument("--new-tokens", type=int, default=256, help="tokens per row (decode)")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = load_model("smollm2-135m-instruct")
    model.eval().requires_grad_(False)
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} "
          f"threads, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; smollm2-135m-instruct")
    with torch.no_grad():
        if args.part in ("micro", "all"):
            micro(model, args.reps)
        if args.part in ("decode", "all"):
            decode(model, config_prompts(tok, "demo.yaml", 2), args.decode_reps, args.new_tokens)
        if args.part in ("quality", "all"):
            quality(model, config_prompts(tok, "demo.yaml", 8), config_prompts(tok, "demo.yaml", 48),
                    stop_token_ids(model, tok), 64)


if __name__ == "__main__":
    main()
