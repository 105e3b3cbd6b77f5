"""What this machine allows a decoder: memory bandwidth, GEMM rate, one decode step's matmuls, and the
tokens/s ceilings they imply for SmolLM2-135M's weights in fp32, bf16, int8 and the GGUF's Q4_1
(bench/length.py's bandwidth section; its docstring says how each figure is measured).
"""
from __future__ import annotations

import time

import torch

from llamacpp_batch import gguf_path


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def gemm_flops(dtype: torch.dtype, rows: int, repeats: int) -> float:
    """FLOP/s of [rows, 576] x [576, 1536] (SmolLM2's MLP up projection; the weight stays in cache)."""
    x, w = torch.randn(rows, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    inner = 200
    run = lambda: [torch.mm(x, w) for _ in range(inner)]
    run()
    return 2 * rows * 576 * 1536 * inner / best_of(run, repeats)


def matmul_step(model, dtype: torch.dtype, rows: int, repeats: int) -> float:
    """Seconds of one decode step's matrix products alone: `rows` inputs through every Linear weight of
    the model (lm_head, the tied embedding, included) once, nothing else: the best a decoder that does
    no attention, no sampling and no Python could do with these weights."""
    weights = [m.weight.detach().to(dtype) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=dtype) for w in weights}
    run = lambda: [torch.nn.functional.linear(inputs[w.shape[1]], w) for w in weights]
    run()
    return best_of(run, repeats)


def model_shape() -> dict:
    """Parameter count, Q4_1 tensor bytes and KV geometry, read from the GGUF file."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path())
    field = lambda key: int(reader.fields[key].parts[-1][0])
    heads = field("llama.attention.head_count")
    return {"params": sum(int(t.n_elements) for t in reader.tensors),
            "gguf_bytes": sum(int(t.n_bytes) for t in reader.tensors),
            "layers": field("llama.block_count"), "kv_heads": field("llama.attention.head_count_kv"),
            "head_dim": field("llama.embedding_length") // heads}


def read_copy_bandwidth(nbytes: int, repeats: int) -> tuple[float, float]:
    """Bytes/s of summing a float32 tensor of nbytes (reads) and of copying it (a read and a write)."""
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    y = torch.empty_like(x)
    return nbytes / best_of(lambda: x.sum(), repeats + 2), 2 * nbytes / best_of(lambda: y.copy_(x), repeats)


def print_ceilings(bw: dict, lengths: list[int], prompt_len: int) -> None:
    b, p = bw["rows"], bw["params"]
    print(f"\nmemory bandwidth, {bw['threads']} torch thread(s), best of several over {bw['array_bytes'] >> 20} MiB: "
          f"read (sum) {bw['read_Bps'] / 1e9:.1f} GB/s, copy (read + write) {bw['copy_Bps'] / 1e9:.1f} GB/s")
    print(f"batch-{b} GEMM [{b}, 576] x [576, 1536] in cache: fp32 {bw['gemm_fp32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {bw['gemm_bf16'] / 1e9:.0f} GFLOP/s")
    print(f"decode ceilings at batch {b}, {p / 1e6:.1f} M parameters (weights read once per step; KV reads and "
          "attention FLOPs extra):")
    print(f"  {'weights':<8}{'MB/step':>9}{'bandwidth tok/s':>17}{'compute tok/s':>15}{'ceiling':>9}"
          f"{'matmuls only tok/s':>20}")
    rows = [("fp32", 4 * p, bw["gemm_fp32"], bw["step_fp32"]), ("bf16", 2 * p, bw["gemm_bf16"], bw["step_bf16"]),
            ("int8", p, None, None), ("Q4_1", bw["gguf_bytes"], None, None)]
    for name, nbytes, flops, step in rows:
        by_bw = b * bw["read_Bps"] / nbytes
        by_fl = flops / (2 * p) if flops else None
        ceiling = min(by_bw, by_fl) if by_fl else by_bw
        print(f"  {name:<8}{nbytes / 1e6:>9.0f}{by_bw:>17.0f}{'-' if by_fl is None else f'{by_fl:.0f}':>15}"
              f"{ceiling:>9.0f}{'-' if step is None else f'{b / step:.0f}':>20}")
    print("  (compute: the GEMM rate above / 2 FLOPs per parameter per row; not measured for int8 and Q4_1, which\n"
          "  need their own kernels: llama.cpp's decode figure is the practical one. matmuls only: every Linear\n"
          "  weight of the model once per step with torch, nothing else)")
    kv_token = bw["layers"] * 2 * bw["kv_heads"] * bw["head_dim"] * 4  # fp32 bytes per cached position
    print(f"  KV cache (fp32) read per step at batch {b}, context = prompt ({prompt_len}) + L/2 on average:")
    for n in lengths:
        kv = b * (prompt_len + n / 2) * kv_token
        with_kv = b * bw["read_Bps"] / (4 * p + kv)
        print(f"    L={n:<5} {kv / 1e6:>6.0f} MB/step; fp32 weights + KV: {with_kv:.0f} tok/s by bandwidth")
