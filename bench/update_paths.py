"""Training fwd+bwd on the demo batch (8 prompts x G=8 sampled by the engine, micro-batches of 4 prompts):
length buckets and the shared prompt prefix each on or off, interleaved in one process; prints medians.
    python bench/update_paths.py"""
import time, statistics as st, torch
from rlvr.config import build_config
from rlvr.models import load_model, stop_token_ids
from rlvr.tasks import build_splits, encode_prompt
from rlvr.rollout.builtin import generate
import rlvr.train.logprobs as L
cfg = build_config("configs/arithmetic.yaml")
m, tok = load_model("smollm2-135m-instruct")
sp = build_splits(cfg.task)
prompts = [encode_prompt(tok, p.question, sp.few_shot, "") for p in sp.train[:8]]
with torch.no_grad():
    r = generate(m, prompts, group_size=8, max_new_tokens=24, temperature=1.0, stop_ids=stop_token_ids(m, tok), pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
print("completion tokens", int(r.completion_mask.sum()), "torch threads", torch.get_num_threads())
def run(buckets, share):
    L._prompt_pass.__defaults__ = (8 if share else 10**9,)
    t = time.perf_counter()
    for mb in range(2):
        sl = slice(mb * 32, (mb + 1) * 32)
        w = int(r.completion_mask[sl].sum(-1).max())
        lp = L.completion_logprobs(m, prompts[mb*4:(mb+1)*4], r.completion_ids[sl, :w], r.completion_mask[sl, :w], 8, tok.pad_token_id, max_buckets=buckets)
        lp.sum().backward()
    m.zero_grad()
    return time.perf_counter() - t
res = {k: [] for k in [(1, False), (4, False), (1, True), (4, True)]}
run(4, True)
for _ in range(3):
    for k in res: res[k].append(run(*k))
for (b, share), v in res.items():
    print(f"max_buckets={b} shared_prefix={share}: median {st.median(v):.2f} s")
