"""Multi-process training: 2 CPU processes (gloo) on a fixed global batch give the same update as one
process running rlvr.train.update.policy_update on the whole batch (tests/train/dist_worker.py is a rank)."""
import functools
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.algo import AGGREGATIONS
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.train import distributed as dd
from rlvr.train.update import policy_update

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("dist_worker", HERE / "dist_worker.py")
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run both ranks once; every test reads their results."""
    out = tmp_path_factory.mktemp("dist")
    for attempt in range(2):   # a free port can be taken between our probe and rank 0's bind: one retry
        env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
               "OMP_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, str(HERE / "dist_worker.py"), str(out)],
                                  env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
        logs = [p.communicate(timeout=300)[0] for p in procs]
        if attempt == 0 and any(p.returncode and "ddress already in use" in log for p, log in zip(procs, logs)):
            continue
        for p, log in zip(procs, logs):
            assert p.returncode == 0, log[-3000:]
        return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@functools.lru_cache(maxsize=None)
def single_process(aggregation: str, batch=worker.global_batch):
    # One thread, as each rank has (OMP_NUM_THREADS=1): another thread count sums in another order,
    # and AdamW turns those last-bit differences in near-zero gradients into differences of order lr.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _single_process(aggregation, batch)
    finally:
        torch.set_num_threads(threads)


def _single_process(aggregation: str, batch):
    torch.manual_seed(0)
    model, _ = load_model("tiny-random")
    opt = torch.optim.AdamW(model.parameters(), lr=worker.LR, weight_decay=0.01)
    m = policy_update(model, opt, batch(), worker.settings(aggregation))
    return m, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.slow  # the ranks fixture starts two processes
def test_two_processes_match_one_process(ranks, mode, aggregation):
    ref_metrics, ref_state = single_process(aggregation)
    metrics, state = ranks[0][mode, aggregation]
    assert ranks[0]["backend"] == "gloo" and ranks[0]["world"] == 2
    assert _max_diff(state, ref_state) < 1e-5
    assert metrics["loss"] == pytest.approx(ref_metrics["loss"], abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(ref_metrics["grad_norm"], rel=1e-5)
    assert metrics["grad_norm"] > worker.MAX_GRAD_NORM  # clipping was active, so its norm had to be global
    assert metrics["ratio/min"] == pytest.approx(ref_metrics["ratio/min"], rel=1e-5)
    assert metrics["ratio/max"] == pytest.approx(ref_metrics["ratio/max"], rel=1e-5)
    assert ref_metrics["ratio/max"] > 1.0  # the second iteration moved the policy
    for key in ("clip/low_frac", "clip/high_frac", "entropy"):
        assert metrics[key] == pytest.approx(ref_metrics[key], abs=1e-6), key
    other_metrics, _ = ranks[1][mode, aggregation]
    assert other_metrics == metrics  # every rank holds the same reduced metrics


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.slow  # the ranks fixture starts two processes
def test_a_rank_with_no_trained_token_joins_the_step(ranks, mode):
    """Rank 1's whole shard is left out of the loss: it skips its backward (ddp) or runs its collectives at
    weight 0 (fsdp), still joins the gradient sum, and the step equals one process on the whole batch."""
    ref_metrics, ref_state = single_process("seq-mean-token-mean", worker.rank_one_untrained)
    (metrics, state), (other, _) = ranks[0]["untrained", mode], ranks[1]["untrained", mode]
    assert _max_diff(state, ref_state) < 1e-5
    assert metrics["loss"] == pytest.approx(ref_metrics["loss"], abs=1e-6) and metrics["grad_norm"] > 0
    assert metrics["grad_norm"] == pytest.approx(ref_metrics["grad_norm"], rel=1e-5)
    assert (metrics["untrained_micro_batches"], other["untrained_micro_batches"]) == (0, 2)
    assert other["loss"] == metrics["loss"]  # the reduced metrics: rank 1 holds the same


@pytest.mark.slow  # the ranks fixture starts two processes
def test_weights_are_identical_on_every_rank_after_the_step(ranks):
    # rank 1 gets {} from full_state_dict (only rank 0 writes); its weights are checked through the
    # reduced loss of the second iteration, which equals rank 0's only if both ranks hold the same policy
    assert ranks[1]["ddp", "token-mean"][1] == {}
    assert ranks[1]["ddp", "token-mean"][0]["loss"] == ranks[0]["ddp", "token-mean"][0]["loss"]


@pytest.mark.slow  # the ranks fixture starts two processes
def test_normalising_by_the_local_batch_would_differ(ranks):
    _, ref_state = single_process("token-mean")
    _, naive_state = ranks[0]["naive"]
    assert _max_diff(naive_state, ref_state) > 1e-4


@pytest.mark.slow  # the ranks fixture starts two processes
def test_gathered_fsdp_model_rolls_out_without_collectives(ranks):
    # rank 1 ran two forwards and rank 0 one: a collective in the forward would have hung
    assert ranks[0]["rollout_logit_diff"] < 1e-5 and ranks[1]["rollout_logit_diff"] < 1e-5


@pytest.mark.slow  # the ranks fixture starts two processes
def test_fsdp_checkpoint_is_a_plain_state_dict_and_round_trips(ranks):
    written = ranks[0]["fsdp", "token-mean"][1]
    plain, _ = load_model("tiny-random")
    plain.load_state_dict(written)  # strict: same keys as an unwrapped model, loadable by one process
    assert written.keys() == plain.state_dict().keys()
    assert _max_diff(ranks[0]["reloaded"], written) == 0.0


@pytest.mark.slow  # the ranks fixture starts two processes
def test_metrics_over_ranks(ranks):
    m = ranks[0]["metrics"]
    assert m == ranks[1]["metrics"]
    assert m["step"] == 3 and m["completions"] == 8 and m["reward/fmt/errors"] == 1
    assert m["reward/mean"] == pytest.approx((0.25 * 4 + 1.25 * 8) / 12)  # weighted by completions
    assert m["kl"] is None and m["time/step_s"] == 2.0
    assert m["pass_rate/level0"] == 0.5 and m["pass_rate/level1"] == 0.5


def test_combine_metrics_rules():
    a = {"loss": 1.0, "ratio/min": 0.9, "ratio/max": 1.1, "tokens/generated": 10, "dynamic/dropped_groups": 1,
         "reward/mean": 0.0, "grad_norm": None}
    b = {"loss": 1.0, "ratio/min": 0.8, "ratio/max": 1.3, "tokens/generated": 5, "dynamic/dropped_groups": 2,
         "reward/mean": 1.0, "grad_norm": 2.0}
    m = dd.combine_metrics([a, b, {"completions": 4}], [1.0, 3.0, 4.0])
    assert m == {"loss": 1.0, "ratio/min": 0.8, "ratio/max": 1.3, "tokens/generated": 15,
                 "dynamic/dropped_groups": 3, "reward/mean": 0.75, "grad_norm": 2.0, "completions": 4}


def test_shard_groups():
    assert [dd.shard_groups(6, r, 3) for r in range(3)] == [slice(0, 2), slice(2, 4), slice(4, 6)]
    with pytest.raises(RlvrError, match=r"rollout.prompts_per_step=5 is not divisible by the world size 2"):
        dd.shard_groups(5, 0, 2)


def test_single_process_defaults():
    d = dd.init_distributed("cpu", {})
    assert (d.rank, d.world, d.backend, d.is_main, d.enabled, d.device) == (0, 1, None, True, False,
                                                                            torch.device("cpu"))
    assert dd.init_distributed("cpu", {"WORLD_SIZE": "1"}) == d
    with pytest.raises(RlvrError, match="RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT is not"):
        dd.init_distributed("cpu", {"WORLD_SIZE": "2"})
    assert dd.allreduce_scalars({"a": 2.0}, d) == {"a": 2.0}


def test_buckets_by_hand():
    assert dd.buckets([3, 4, 2, 9, 1], limit=8) == [range(0, 2), range(2, 3), range(3, 4), range(4, 5)]
    assert dd.buckets([1, 1, 1], limit=8) == [range(0, 3)] and dd.buckets([], limit=8) == []
    assert dd.buckets([8, 8], limit=8) == [range(0, 1), range(1, 2)]


def test_clip_grad_norm_by_hand():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([12.0])  # norm 13
    assert dd.clip_grad_norm([a, b], 6.5, dd.Dist()) == 13.0
    assert torch.allclose(a.grad, torch.tensor([1.5, 2.0]), rtol=1e-6)
    assert torch.allclose(b.grad, torch.tensor([6.0]), rtol=1e-6)
    assert dd.clip_grad_norm([a, b], 100.0, dd.Dist()) == pytest.approx(6.5, rel=1e-6)  # below: unchanged
    assert torch.allclose(a.grad, torch.tensor([1.5, 2.0]), rtol=1e-6)
