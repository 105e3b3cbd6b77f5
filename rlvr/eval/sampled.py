"""Per-problem evaluation records: one greedy completion plus S sampled ones, scored and voted."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.errors import RlvrError
from rlvr.eval.evaluate import evaluate
from rlvr.eval.grading import grade
from rlvr.eval.estimators import majority_vote, stated_answer
from rlvr.rewards.maths.accuracy import check_answer
from rlvr.envs.episodes import EnvSpec, run_episodes
from rlvr.rollout.engines import builtin_engine
from rlvr.tasks import Problem


@dataclass(frozen=True)
class SampleSettings:
    k: int = 4
    """pass@k and maj@k are reported for this k."""
    samples: int = 4
    """Sampled completions per problem (n of the pass@k estimator); at least k."""
    temperature: float = 1.0
    """Sampling temperature of the S completions (the pass@1 completion is greedy)."""
    max_new_tokens: int = 24
    """Longest completion, greedy or sampled."""
    batch_size: int = 50
    """Problems per generation batch (a sampled batch holds batch_size * samples rows)."""
    seed: int = 0
    """Seed of the sampling generator."""

    def check(self) -> None:
        if self.k < 1:
            raise RlvrError(f"k (--k) must be at least 1, got {self.k}")
        if self.samples < self.k:
            raise RlvrError(f"samples (--samples) must be at least k (--k): got {self.samples} < {self.k}")
        if self.temperature <= 0:
            raise RlvrError(f"temperature (--temperature) must be > 0 for sampling, got {self.temperature}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise RlvrError("max_new_tokens (--max-new-tokens) and batch_size (--batch-size) must be at least 1")


def sample_completions(policy, tok, problems: list[Problem], spec: EnvSpec, s: SampleSettings,
                       stop_ids: list[int]) -> list[list[str]]:
    """The final answers of s.samples episodes per problem at s.temperature (single-turn: completions),
    the prompt prefix shared within a group."""
    gen = torch.Generator().manual_seed(s.seed)
    engine = builtin_engine(policy)
    out = []
    for start in range(0, len(problems), s.batch_size):
        chunk = problems[start:start + s.batch_size]
        ep = run_episodes(engine, spec, chunk, group_size=s.samples, max_new_tokens=s.max_new_tokens,
                          temperature=s.temperature, stop_ids=stop_ids, pad_id=tok.pad_token_id, generator=gen)
        out += [ep.texts[i:i + s.samples] for i in range(0, len(ep.texts), s.samples)]  # P * S, grouped
    return out


def problem_record(p: Problem, greedy: dict, sampled: list[str], scores: list[float], k: int) -> dict:
    """Score one problem: `correct` counts verified samples; the first k samples vote for maj@k (not
    for code: maj_correct None)."""
    voted = None if p.tests else majority_vote([stated_answer(text) for text in sampled[:k]])
    maj = None if p.tests else 1.0 if voted is not None and check_answer(voted, p.answer)[0] else 0.0
    return {"question": p.question, "answer": p.answer, "difficulty": p.difficulty,
            "greedy": greedy["completion"], "greedy_correct": greedy["correct"],
            "greedy_lenient": greedy["lenient"],
            "samples": len(sampled), "correct": int(sum(scores)), "voted": voted, "maj_correct": maj,
            "sampled": sampled, "sampled_correct": scores}


def evaluate_sampled(policy, tok, problems: list[Problem], spec: EnvSpec, s: SampleSettings,
                     stop_ids: list[int]) -> list[dict]:
    """Greedy pass@1 (rlvr.eval.evaluate) and s.samples sampled completions for every problem."""
    s.check()
    was_training = policy.training
    policy.eval()
    greedy = evaluate(policy, tok, problems, spec, max_new_tokens=s.max_new_tokens,
                      batch_size=s.batch_size, stop_ids=stop_ids).records
    sampled = sample_completions(policy, tok, problems, spec, s, stop_ids)
    policy.train(was_training)
    flat = grade([p for p, texts in zip(problems, sampled) for _ in texts], [t for texts in sampled for t in texts])
    scores = [[g["correct"] for g in flat[i * s.samples:(i + 1) * s.samples]] for i in range(len(problems))]
    return [problem_record(p, g, texts, sc, s.k) for p, g, texts, sc in zip(problems, greedy, sampled, scores)]
