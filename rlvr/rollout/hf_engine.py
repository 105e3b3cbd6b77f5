"""Rollouts with plain Hugging Face `model.generate` (rollout.engine=hf).

The reference the built-in engine is measured against (bench/rollout.py), and a fallback for a model
the built-in engine cannot drive. Each prompt is repeated G times (as num_return_sequences would) and
prefilled G times, and finished rows go on decoding padding until the whole batch stops: the costs
the built-in engine's shared prefix and row dropping avoid. The sampler log-prob of each token is read
from generate's processed scores, i.e. after temperature, top-k and top-p, the distribution the token
was drawn from. Same signature and result as rlvr.rollout.decoding.generate.
"""
from __future__ import annotations

import contextlib

import torch
from transformers import GenerationConfig

from rlvr.device import of_model
from rlvr.rollout.decoding import Rollout, concat_rollouts, end_at_first_stop, left_pad


# generate fills every field left None from the model's generation_config.json; these get values at
# which it adds no processor (min_p has none: 0 still adds a warper), so a shipped repetition penalty
# or n-gram ban cannot change the distribution sampled from.
_NEUTRAL = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_new_tokens": 0, "typical_p": 1.0,
            "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}


def _generation_config(max_new_tokens: int, temperature: float, top_p: float, top_k: int,
                       stop_ids: list[int], pad_id: int) -> GenerationConfig:
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k} \
        if temperature > 0 else {"do_sample": False}
    return GenerationConfig(max_new_tokens=max_new_tokens, eos_token_id=list(stop_ids), pad_token_id=pad_id,
                            use_cache=True, return_dict_in_generate=True, output_scores=True,
                            **sampling, **_NEUTRAL)


@contextlib.contextmanager
def _seeded(generator: torch.Generator | None, device: torch.device):
    """generate samples from the global RNG of the model's device: seed a forked copy from `generator`
    so runs repeat without touching the caller's global state; with no generator, use the global RNG as
    it is. (HF's CUDA sampling draws differ from the CPU's: only the built-in engine samples the same
    tokens on every device.) The global generator is the collecting thread's alone under
    rollout.overlap=one_step_off: the update running meanwhile draws from generators of its own
    (rlvr.rollout.sampling.update_seed)."""
    if generator is None:
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


@torch.no_grad()
def hf_generate(
    model,
    prompts: list[list[int]],
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    stop_ids: list[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    seeds: list[int] | None = None,
) -> Rollout:
    """Sample `group_size` completions for each prompt with model.generate (temperature 0: greedy). With
    `seeds` (one per prompt) each prompt is generated on its own from its seed, so its completions do
    not depend on the batch; otherwise the whole batch at once from `generator`."""
    if seeds is not None:
        parts = [hf_generate(model, [p], group_size=group_size, max_new_tokens=max_new_tokens, temperature=temperature,
                             top_p=top_p, top_k=top_k, stop_ids=stop_ids, pad_id=pad_id,
                             generator=torch.Generator().manual_seed(s)) for p, s in zip(prompts, seeds)]
        return concat_rollouts(parts, pad_id)
    device = of_model(model)
    ids, mask = left_pad(prompts, pad_id, device)  # [P, Tp]
    # What num_return_sequences does inside generate, done here because greedy decoding refuses it.
    ids, mask = ids.repeat_interleave(group_size, dim=0), mask.repeat_interleave(group_size, dim=0)  # [B, Tp]
    config = _generation_config(max_new_tokens, temperature, top_p, top_k, stop_ids, pad_id)
    with _seeded(generator, device):
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    new = out.sequences[:, ids.shape[1]:]  # [B, Tg], rows repeat_interleaved: row b is prompt b // G
    n, width_gen = new.shape

    logp = torch.zeros((n, width_gen), device=device)
    for t, scores in enumerate(out.scores):  # one [B, V] fp32 tensor per step, after the warpers
        logp[:, t] = scores.float().log_softmax(-1).gather(-1, new[:, t:t + 1]).squeeze(-1)
    return end_at_first_stop(prompts, new.cpu(), logp.cpu(), group_size, stop_ids, pad_id)
