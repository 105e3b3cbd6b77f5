"""Training on multi-turn episodes: environment tokens are context, never loss. The log-probs and the
gradient of an episode equal one full forward of its final token sequence with the loss on the model's
tokens only, and the sampler's log-probs (kept KV caches across turns) equal the trainer's."""
import copy

import pytest
import torch

from rlvr.config import AlgoConfig, Config, OptimizerConfig

from rlvr.train.settings import update_settings
from rlvr.envs.base import Reply
from rlvr.envs.episodes import EnvSpec, Limits, run_episodes
from rlvr.envs.render import TurnRender
from rlvr.rollout.engines import builtin_engine
from rlvr.rollout.sampling import SamplingSettings
from rlvr.tasks import Problem
from rlvr.train.forward import completion_logprobs
from rlvr.train.batch import Batch
from rlvr.train.update import policy_update

PROBLEMS = [Problem(question="What is 2 + 3?", answer="5"), Problem(question="Name a colour.", answer="red")]


class Echo:
    """Answers each model turn with its length as a tool result; done after three model turns."""

    def reset(self, problem):
        self.n = 0
        return [{"role": "user", "content": problem.question}]

    def step(self, text):
        self.n += 1
        return Reply(done=True) if self.n == 3 else Reply(text=f"len {len(text)}", role="tool")

    def reward_columns(self):
        return {}


def episodes(model, tok):
    spec = EnvSpec(make=Echo, render=TurnRender(tok), limits=Limits(max_turns=3), multi_turn=True)
    stops = [tok.eos_token_id] + tok("aeiou")["input_ids"]  # turns end early and at different steps
    sampling = SamplingSettings(max_new_tokens=8, temperature=1.0, stop_ids=tuple(stops), pad_id=tok.pad_token_id)
    ep = run_episodes(builtin_engine(model), spec, PROBLEMS, group_size=2, sampling=sampling, seeds=[1, 2])
    assert float(ep.rollout.env_mask.sum()) > 0  # the episodes really have environment turns
    return ep.rollout


def full_forward(model, r, weights):
    """Each row's prompt + every token after it in one forward: (log-probs of the model's tokens [B, Tc],
    loss = sum of weights * log-prob over the model's tokens, and the same loss over every token)."""
    logp = torch.zeros(r.completion_ids.shape)
    model_loss = every_loss = 0.0
    for b in range(logp.shape[0]):
        p = r.prompt_ids[b // r.group_size]
        n = int(r.present[b].sum())
        c = r.completion_ids[b, :n].tolist()
        lp = model(torch.tensor([p + c])).logits[0].log_softmax(-1)
        tok_lp = torch.stack([lp[len(p) + t - 1, c[t]] for t in range(n)])  # [n]
        logp[b, :n] = (tok_lp * r.completion_mask[b, :n]).detach()
        model_loss = model_loss + (weights[b, :n] * tok_lp * r.completion_mask[b, :n]).sum()
        every_loss = every_loss + (weights[b, :n] * tok_lp).sum()
    return logp, model_loss, every_loss


def grads(model, loss, keep=False):
    model.zero_grad()
    loss.backward(retain_graph=keep)
    return [p.grad.clone() for p in model.parameters()]


def test_logprobs_and_gradient_equal_one_full_forward(tiny):
    model, tok = tiny
    r = episodes(model, tok)
    weights = torch.linspace(-1.0, 1.0, r.completion_ids.numel()).view(r.completion_ids.shape)
    ref_logp, model_loss, every_loss = full_forward(model, r, weights)
    want, wrong = grads(model, model_loss, keep=True), grads(model, every_loss)

    logp = completion_logprobs(model, r.prompt_ids, r.completion_ids, r.completion_mask, r.group_size,
                               tok.pad_token_id, env_mask=r.env_mask)
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert torch.all(logp[r.env_mask.bool()] == 0)  # environment tokens have no log-prob of their own
    got = grads(model, (weights * logp).sum())
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-5)
    # the loss over every token (environment tokens in it too) moves the weights differently
    assert any(not torch.allclose(g, x, atol=1e-4) for g, x in zip(got, wrong))


def test_sampler_logprobs_are_the_trainers(tiny):
    model, tok = tiny
    r = episodes(model, tok)
    logp = completion_logprobs(model, r.prompt_ids, r.completion_ids, r.completion_mask, r.group_size,
                               tok.pad_token_id, env_mask=r.env_mask)
    assert torch.allclose(logp, r.sampler_logp, atol=1e-5)


def test_policy_update_on_episodes(tiny):
    """One update: the sampler mismatch is ~0, the environment tokens add nothing to the loss's tokens."""
    model, tok = tiny
    r = episodes(model, tok)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    batch = Batch(prompts=r.prompt_ids, completion_ids=r.completion_ids, completion_mask=r.completion_mask,
                  advantages=adv, group_size=r.group_size, sampler_logp=r.sampler_logp,
                  env_mask=r.env_mask)
    cfg = Config(algo=AlgoConfig(aggregation="token-mean"),
                 optimizer=OptimizerConfig(micro_batch_prompts=1, max_grad_norm=0.0))
    s = update_settings(cfg, tok.pad_token_id, "no")
    policy = copy.deepcopy(model)
    m = policy_update(policy, torch.optim.SGD(policy.parameters(), lr=0.1), batch, s)
    assert m["rollout/logp_mismatch_mean_abs"] == pytest.approx(0.0, abs=1e-5)
    # token-mean over the model's tokens: loss = -sum(adv_b * n_b) / N at ratio 1
    n = r.completion_mask.sum(-1)
    assert m["loss"] == pytest.approx(float(-(adv * n).sum() / n.sum()), abs=1e-5)
