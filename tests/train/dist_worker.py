"""One rank of tests/train/test_distributed.py: `python dist_worker.py OUT_DIR` under RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Trains this rank's shard of a fixed global batch with the
distributed update (`distributed_update`, the policy_update patch proposed in the issue note) in ddp
and fsdp mode and writes what it got to OUT_DIR/rank{R}.pt for the test to compare with one process."""
from __future__ import annotations

import sys

import torch

from rlvr.algo import policy_loss
from rlvr.models import load_model
from rlvr.train import distributed as dd
from rlvr.train.logprobs import completion_logprobs
from rlvr.train.update import Batch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
GROUP, WIDTH, LR, ITERATIONS, MAX_GRAD_NORM = 2, 6, 1e-2, 2, 0.05


def global_batch() -> Batch:
    """4 prompts x 2 completions; rank 0's half (rows 0-3) has far more real tokens than rank 1's, so
    normalising by a rank's own batch instead of the global one changes the gradient."""
    prompts = [[5, 40, 41, 42], [6, 50], [7, 60, 61], [8, 70, 71, 72, 73]]
    ids = torch.randint(4, 99, (8, WIDTH), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([6, 5, 6, 4, 1, 2, 0, 3])  # row 6 is empty: seq-mean counts only rows with tokens
    mask = (torch.arange(WIDTH)[None, :] < lengths[:, None]).float()  # [8, 6]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.7, -0.7])
    return Batch(prompts, ids * mask.long(), mask, adv, GROUP)


def shard(batch: Batch, rank: int, world: int) -> Batch:
    ps = dd.shard_groups(len(batch.prompts), rank, world)
    rows = slice(ps.start * batch.group_size, ps.stop * batch.group_size)
    return Batch(batch.prompts[ps], batch.completion_ids[rows], batch.completion_mask[rows],
                 batch.advantages[rows], batch.group_size)


def distributed_update(model, optimizer, batch: Batch, aggregation: str, d: dd.Dist, global_norm: bool = True,
                       micro_batch_prompts: int = 1, pad_id: int = 0) -> dict[str, float]:
    """policy_update's loop (beta = 0, no critic) with the proposed change: micro-batch weights from the
    GLOBAL denominator, gradients summed over ranks, global clipping norm, metrics reduced over ranks.
    global_norm=False weights by this rank's own batch (the naive, wrong scheme) to show the test sees it."""
    g = batch.group_size
    if global_norm:
        denominator = dd.batch_denominator(batch.completion_mask, aggregation, d)
    else:
        denominator = dd.batch_denominator(batch.completion_mask, aggregation, dd.Dist())
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    old: dict[int, torch.Tensor] = {}
    metrics: dict[str, float] = {}
    for _ in range(ITERATIONS):
        optimizer.zero_grad(set_to_none=True)
        sums, ratio_min, ratio_max = {"loss": 0.0, "clip": 0.0, "n_mb": 0.0}, [], []
        for k, i in enumerate(range(0, len(batch.prompts), micro_batch_prompts)):
            rows = slice(i * g, (i + micro_batch_prompts) * g)
            width = max(int(batch.completion_mask[rows].sum(-1).max()), 1)
            mask = batch.completion_mask[rows, :width]
            logp = completion_logprobs(model, batch.prompts[i:i + micro_batch_prompts],
                                       batch.completion_ids[rows, :width], mask, g, pad_id)
            old.setdefault(k, logp.detach())
            loss, m = policy_loss(logp, old[k], batch.advantages[rows], mask, 0.2, 0.2, None, "token",
                                  aggregation, WIDTH)
            loss = loss * dd.loss_weight(mask, denominator, aggregation)
            loss.backward()
            sums["loss"] += float(loss.detach())
            sums["clip"] += float(m["clip/high_frac"] + m["clip/low_frac"])
            sums["n_mb"] += 1
            ratio_min.append(float(m["ratio/min"]))
            ratio_max.append(float(m["ratio/max"]))
        dd.allreduce_gradients(params, d)
        grad_norm = dd.clip_grad_norm(params, MAX_GRAD_NORM, d)
        optimizer.step()
        sums = dd.allreduce_scalars(sums, d)
        metrics = {"loss": sums["loss"], "grad_norm": grad_norm, "clip_frac": sums["clip"] / sums["n_mb"],
                   "ratio/min": dd.allreduce_scalars({"r": min(ratio_min)}, d, "min")["r"],
                   "ratio/max": dd.allreduce_scalars({"r": max(ratio_max)}, d, "max")["r"]}
    optimizer.zero_grad(set_to_none=True)
    return metrics


def train_once(mode: str, aggregation: str, d: dd.Dist, global_norm: bool = True) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model, _ = load_model("tiny-random")
    model = dd.wrap_model(model, mode, d)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    local = shard(global_batch(), d.rank, d.world)
    with torch.no_grad(), dd.gathered(model):  # a rank-local "rollout" first, as in the loop
        for _ in range(d.rank + 1):
            model(input_ids=torch.tensor(local.prompts[0])[None])
    metrics = distributed_update(model, opt, local, aggregation, d, global_norm)
    return metrics, dd.full_state_dict(model, d)


def rollout_check(d: dd.Dist) -> float:
    """Under `gathered`, ranks run different numbers of full-model forwards (as rollouts stopping at
    different steps do) without collectives; returns the largest logit difference to the plain model."""
    plain, _ = load_model("tiny-random")
    model = dd.wrap_model(load_model("tiny-random")[0], "fsdp", d)
    ids = torch.tensor([[5, 40, 41, 42, 9]])
    worst = 0.0
    with torch.no_grad(), dd.gathered(model):
        for _ in range(d.rank + 1):
            diff = (model(input_ids=ids).logits - plain(input_ids=ids).logits).abs().max()
            worst = max(worst, float(diff))
    return worst


def main(out: str) -> None:
    torch.set_num_threads(1)
    d = dd.init_distributed()
    result: dict = {"rank": d.rank, "world": d.world, "backend": d.backend}
    for mode in ("ddp", "fsdp"):
        for agg in AGGREGATIONS:
            result[mode, agg] = train_once(mode, agg, d)
    result["naive"] = train_once("ddp", "token-mean", d, global_norm=False)
    result["rollout_logit_diff"] = rollout_check(d)
    # portability: a full state written by this world, loaded into a freshly sharded model, reads back the same
    torch.manual_seed(0)
    fresh = dd.wrap_model(load_model("tiny-random")[0], "fsdp", d)
    written = result["fsdp", "token-mean"][1]
    dd.load_full_state_dict(fresh, written if d.is_main else {}, d)
    result["reloaded"] = dd.full_state_dict(fresh, d)
    # statistics and metrics over ranks
    x = torch.arange(12, dtype=torch.float32).view(4, 3) ** 1.5  # this rank's rows of a [8, 3] whole
    x = x + 10 * d.rank
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]).float() if d.rank == 0 else torch.ones(4, 3)
    result["whiten"] = dd.whiten(x, mask, d)
    result["batch_adv"] = dd.batch_scaled_group_advantages(x, d)
    local_metrics = {"step": 3, "completions": 4, "reward/mean": 0.25 + d.rank, "reward/fmt/errors": d.rank,
                     "kl": None, f"pass_rate/level{d.rank}": 0.5, "time/step_s": 1.0 + d.rank}
    result["metrics"] = dd.reduce_metrics(local_metrics, d, weight=4 + 4 * d.rank)
    result["broadcast"] = dd.broadcast_object({"from": d.rank}, d)
    torch.save(result, f"{out}/rank{d.rank}.pt")
    dd.close_distributed(d)


if __name__ == "__main__":
    main(sys.argv[1])
