"""Training forward + backward of completion_logprobs: length buckets vs every row padded to the longest.

    python bench/train_forward.py [repeats] [model]

2 prompts x 8 completions with lengths like a real rollout (most 5-12 tokens, a couple at 32; random
tokens, only the sizes matter), one thread. Runs max_buckets=4 (the default) and max_buckets=1 (the
old padding to the micro-batch's longest completion) interleaved, `repeats` times each, and prints the
positions each computes, their median seconds and the ratio (the bucketed run uses the default
BUCKET_OVERHEAD, so it may choose fewer than 4 buckets).
"""
from __future__ import annotations

import statistics
import sys
import time

import torch

from rlvr.models import load_model
from rlvr.train.forward import _positions_needed, completion_logprobs, plan_buckets

GROUP = 8
LENGTHS = [7, 5, 12, 9, 32, 6, 8, 10,  # prompt 0
           11, 5, 9, 32, 7, 12, 6, 8]  # prompt 1


def main(repeats: int = 3, model_name: str = "smollm2-135m-instruct") -> None:
    torch.set_num_threads(1)  # the machine's other cores run other benchmarks
    torch.manual_seed(0)
    model, tok = load_model(model_name)
    model.train()
    prompts = [tok("Compute 17 * 23 - 4 and put the answer in \\boxed{}.")["input_ids"],
               tok("What is 3 + 5 * 2? Answer in \\boxed{}.")["input_ids"]]
    tc = max(LENGTHS)
    ids = torch.randint(3, len(tok), (len(LENGTHS), tc))
    mask = (torch.arange(tc)[None, :] < torch.tensor(LENGTHS)[:, None]).long()  # [B, Tc]
    times: dict[int, list[float]] = {4: [], 1: []}
    for r in range(repeats + 1):  # the first round warms up and is not counted
        for max_buckets in times:
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            completion_logprobs(model, prompts, ids, mask, GROUP, tok.pad_token_id,
                                max_buckets=max_buckets).sum().backward()
            if r:
                times[max_buckets].append(time.perf_counter() - start)
    real = sum(LENGTHS)
    for max_buckets, ts in times.items():
        plan = plan_buckets(_positions_needed(mask), max_buckets)
        positions = sum(len(rows) * width for rows, width in plan)
        print(f"max_buckets={max_buckets}: buckets (rows, width) {[(len(rows), w) for rows, w in plan]} "
              f"completion positions {positions} (real tokens {real}), "
              f"median {statistics.median(ts):.3f}s of {[round(t, 3) for t in ts]}")
    ratio = statistics.median(times[1]) / statistics.median(times[4])
    print(f"speed-up (padded / bucketed): {ratio:.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, *sys.argv[2:3])
