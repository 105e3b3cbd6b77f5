"""Training forward + backward of completion_logprobs: length buckets, every row padded to the longest, and
packed rows (train.packed), each on the same batch.

    python bench/train_forward.py [repeats] [model] [--chat] [--checkpointing]

2 prompts x 8 completions with lengths like a real rollout (most 5-12 tokens, a couple at 32; random
tokens, only the sizes matter), one thread. Runs, interleaved, `repeats` times each: max_buckets=4 (the
default), max_buckets=1 (the old padding to the micro-batch's longest completion) and packed=True (the rows
without pads, rlvr/train/packed.py: with sdpa, a row per group, its prompt once and its completions after it
under a 4D mask), and prints the tokens each runs through the trunk,
their median seconds and the ratios to the default (the bucketed run uses the default BUCKET_OVERHEAD, so it
may choose fewer than 4 buckets). --chat: the prompts in the model's chat template (a run's prompts, with
its system prompt), not bare; --checkpointing: gradient checkpointing on (the padded forwards then run each
prompt once per completion).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.algo.masks import row_widths
from rlvr.models import enable_gradient_checkpointing, load_model
from rlvr.train.forward import _positions_needed, completion_logprobs, plan_buckets

GROUP = 8
LENGTHS = [7, 5, 12, 9, 32, 6, 8, 10,  # prompt 0
           11, 5, 9, 32, 7, 12, 6, 8]  # prompt 1
QUESTIONS = ["Compute 17 * 23 - 4 and put the answer in \\boxed{}.", "What is 3 + 5 * 2? Answer in \\boxed{}."]
MODES = {"bucketed": {"max_buckets": 4}, "padded": {"max_buckets": 1}, "packed": {"packed": True}}


def prompts_of(tok, chat: bool) -> list[list[int]]:
    if not chat:
        return [tok(q)["input_ids"] for q in QUESTIONS]
    return [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                    return_dict=True)["input_ids"] for q in QUESTIONS]


def tokens_run(mode: str, prompts: list[list[int]], mask: torch.Tensor, checkpointing: bool) -> int:
    """The tokens one forward of `mode` runs through the trunk (prompts and completion positions)."""
    widths = row_widths(mask).tolist()
    if mode == "packed":  # the shared-prompt layout (sdpa): each prompt once, each row's width - 1
        return sum(map(len, prompts)) + sum(w - 1 for w in widths if w)
    plan = plan_buckets(_positions_needed(mask), MODES[mode]["max_buckets"])
    if checkpointing:  # each bucket row: its left-padded prompt + the bucket's width
        return sum(len(rows) * (max(map(len, prompts)) + w) for rows, w in plan)
    return len(prompts) * max(map(len, prompts)) + sum(len(rows) * w for rows, w in plan)


def main(repeats: int = 3, model_name: str = "smollm2-135m-instruct", chat: bool = False,
         checkpointing: bool = False) -> None:
    torch.set_num_threads(1)  # the machine's other cores run other benchmarks
    torch.manual_seed(0)
    model, tok = load_model(model_name)
    if checkpointing:
        enable_gradient_checkpointing(model)
    model.train()
    prompts = prompts_of(tok, chat)
    tc = max(LENGTHS)
    ids = torch.randint(3, len(tok), (len(LENGTHS), tc))
    mask = (torch.arange(tc)[None, :] < torch.tensor(LENGTHS)[:, None]).long()  # [B, Tc]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(repeats + 1):  # the first round warms up and is not counted
        for mode, kw in MODES.items():
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            completion_logprobs(model, prompts, ids, mask, GROUP, tok.pad_token_id, **kw).sum().backward()
            if r:
                times[mode].append(time.perf_counter() - start)
    real = sum(LENGTHS) + GROUP * sum(map(len, prompts))  # every row's prompt and completion, unpadded
    padded = len(LENGTHS) * (max(map(len, prompts)) + tc)  # [B, longest prompt + longest completion]
    print(f"prompts {[len(p) for p in prompts]} tokens ({'chat template' if chat else 'bare'}), completions "
          f"{sum(LENGTHS)} tokens in [{len(LENGTHS)}, {tc}]: pad share of the completions "
          f"{1 - sum(LENGTHS) / (len(LENGTHS) * tc):.2f}, of the [B, prompt + completion] batch {1 - real / padded:.2f}"
          f"; gradient checkpointing {'on' if checkpointing else 'off'}")
    for mode, ts in times.items():
        plan = "" if mode == "packed" else \
            f" buckets (rows, width) {[(len(rows), w) for rows, w in plan_buckets(_positions_needed(mask), MODES[mode]['max_buckets'])]}"
        print(f"{mode}: trunk tokens {tokens_run(mode, prompts, mask, checkpointing)}{plan}, "
              f"median {statistics.median(ts):.3f}s of {[round(t, 3) for t in ts]}")
    base = statistics.median(times["bucketed"])
    print("time / bucketed (the default): " + ", ".join(f"{m} {statistics.median(ts) / base:.2f}x"
                                                        for m, ts in times.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repeats", nargs="?", type=int, default=3, help="interleaved runs of each (3)")
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct", help="model.name")
    parser.add_argument("--chat", action="store_true", help="prompts in the model's chat template")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    args = parser.parse_args()
    main(args.repeats, args.model, chat=args.chat, checkpointing=args.checkpointing)
