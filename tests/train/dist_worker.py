"""One rank of tests/train/test_distributed.py: `python dist_worker.py OUT_DIR` under RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Trains this rank's shard of a fixed global batch with the
real policy_update (dist=the process group) in ddp and fsdp mode and writes what it got to OUT_DIR/rank{R}.pt for the test to compare with one process."""
from __future__ import annotations

import dataclasses
import sys

import torch

from rlvr.algo import AGGREGATIONS

from rlvr.train.settings import update_settings
from rlvr.config import AlgoConfig, Config, OptimizerConfig
from rlvr.models import load_model
from rlvr.train import distributed as dd
from rlvr.train.batch import Batch
from rlvr.train.update import UpdateSettings, policy_update

GROUP, WIDTH, LR, ITERATIONS, MAX_GRAD_NORM = 2, 6, 1e-2, 2, 0.05


def global_batch() -> Batch:
    """4 prompts x 2 completions; rank 0's half (rows 0-3) has far more real tokens than rank 1's, so
    normalising by a rank's own batch instead of the global one changes the gradient."""
    prompts = [[5, 40, 41, 42], [6, 50], [7, 60, 61], [8, 70, 71, 72, 73]]
    ids = torch.randint(4, 99, (8, WIDTH), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([6, 5, 6, 4, 1, 2, 0, 3])  # row 6 is empty: seq-mean counts only rows with tokens
    mask = (torch.arange(WIDTH)[None, :] < lengths[:, None]).float()  # [8, 6]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.7, -0.7])
    return Batch(prompts=prompts, completion_ids=ids * mask.long(), completion_mask=mask, advantages=adv,
                 group_size=GROUP)


def rank_one_untrained() -> Batch:
    """global_batch with rank 1's shard (prompts 2 and 3: rows 4-7) left out of the loss, as
    algo.mask_truncated leaves out completions that were all truncated: that rank has no trained token."""
    batch = global_batch()
    mask = batch.completion_mask.clone()
    mask[4:] = 0.0
    return dataclasses.replace(batch, completion_mask=mask)


def shard(batch: Batch, rank: int, world: int) -> Batch:
    ps = dd.shard_groups(len(batch.prompts), rank, world)
    rows = slice(ps.start * batch.group_size, ps.stop * batch.group_size)
    return Batch(prompts=batch.prompts[ps], completion_ids=batch.completion_ids[rows],
                 completion_mask=batch.completion_mask[rows],
                 advantages=batch.advantages[rows], group_size=batch.group_size)


def settings(aggregation: str) -> UpdateSettings:
    algo = AlgoConfig(aggregation=aggregation, norm_length=WIDTH, iterations=ITERATIONS)
    cfg = Config(algo=algo, optimizer=OptimizerConfig(micro_batch_prompts=1, max_grad_norm=MAX_GRAD_NORM))
    return update_settings(cfg, pad_id=0, precision="no")


def train_once(mode: str, aggregation: str, d: dd.Dist, global_norm: bool = True,
               batch=global_batch) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model, _ = load_model("tiny-random")
    model = dd.wrap_model(model, mode, d)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    local = shard(batch(), d.rank, d.world)
    with torch.no_grad(), dd.gathered(model):  # a rank-local "rollout" first, as in the loop
        for _ in range(d.rank + 1):
            model(input_ids=torch.tensor(local.prompts[0])[None])
    # global_norm=False: each rank alone on its shard (no sync): the test shows this differs
    metrics = policy_update(model, opt, local, settings(aggregation), dist=d if global_norm else dd.Dist())
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
    d = dd.init_distributed("cpu")  # gloo, whatever GPUs the machine has: the test needs as many ranks as devices
    result: dict = {"rank": d.rank, "world": d.world, "backend": d.backend}
    for mode in ("ddp", "fsdp"):
        for agg in AGGREGATIONS:
            result[mode, agg] = train_once(mode, agg, d)
    result["naive"] = train_once("ddp", "token-mean", d, global_norm=False)
    for mode in ("ddp", "fsdp"):  # rank 1 holds no trained token: it skips (ddp) or zero-weights (fsdp) its backward
        result["untrained", mode] = train_once(mode, "seq-mean-token-mean", d, batch=rank_one_untrained)
    result["rollout_logit_diff"] = rollout_check(d)
    # portability: a full state written by this world, loaded into a freshly sharded model, reads back the same
    torch.manual_seed(0)
    fresh = dd.wrap_model(load_model("tiny-random")[0], "fsdp", d)
    written = result["fsdp", "token-mean"][1]
    dd.load_full_state_dict(fresh, written if d.is_main else {}, d)
    result["reloaded"] = dd.full_state_dict(fresh, d)
    # metrics over ranks
    local_metrics = {"step": 3, "completions": 4, "reward/mean": 0.25 + d.rank, "reward/fmt/errors": d.rank,
                     "kl": None, f"pass_rate/level{d.rank}": 0.5, "time/step_s": 1.0 + d.rank}
    result["metrics"] = dd.reduce_metrics(local_metrics, d, weight=4 + 4 * d.rank)
    torch.save(result, f"{out}/rank{d.rank}.pt")
    dd.close_distributed(d)


if __name__ == "__main__":
    main(sys.argv[1])
