"""Per-problem evaluation records: one greedy completion plus S sampled ones, scored and voted."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.errors import RlvrError
from rlvr.eval.evaluate import evaluate
from rlvr.eval.grader import Grader
from rlvr.eval.grading import grade
from rlvr.eval.estimators import majority_vote, stated_answer, vote_key
from rlvr.eval.lenient import last_number
from rlvr.rewards.maths.accuracy import check_answer
from rlvr.envs.episodes import EnvSpec, reward_inputs, run_episodes
from rlvr.rollout.engines import builtin_engine
from rlvr.rollout.sampling import SamplingSettings
from rlvr.tasks import Problem


@dataclass(kw_only=True, frozen=True)
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


def sample_and_grade(policy, tok, problems: list[Problem], spec: EnvSpec, s: SampleSettings, stop_ids: list[int],
                     grader: Grader | None = None) -> tuple[list[list[str]], list[list[float]]]:
    """The final answers of s.samples episodes per problem at s.temperature (single-turn: completions),
    the prompt prefix shared within a group, and their strict verdicts (rlvr.eval.grading; a user
    grader gets each batch's episodes as training's rewards do), grouped per problem."""
    gen = torch.Generator().manual_seed(s.seed)
    engine = builtin_engine(policy)
    sampling = SamplingSettings(max_new_tokens=s.max_new_tokens, temperature=s.temperature, stop_ids=tuple(stop_ids),
                                pad_id=tok.pad_token_id)
    texts, scores = [], []
    group = lambda xs: [xs[i:i + s.samples] for i in range(0, len(xs), s.samples)]  # P * S, grouped
    for start in range(0, len(problems), s.batch_size):
        chunk = problems[start:start + s.batch_size]
        ep = run_episodes(engine, spec, chunk, group_size=s.samples, sampling=sampling, generator=gen)
        graded = grade([p for p in chunk for _ in range(s.samples)], ep.texts, grader,
                       reward_inputs(chunk, ep, s.samples))
        texts += group(ep.texts)
        scores += group([g["correct"] for g in graded])
    return texts, scores


def user_vote(completion: str) -> str | None:
    """The answer a completion votes with under a user grader, whose answer form rlvr cannot know: its
    stated final answer, else the last number it wrote."""
    return stated_answer(completion) or last_number(completion)


def _maj(p: Problem, sampled: list[str], scores: list[float], k: int, by_user: bool) -> tuple[str | None, float | None]:
    """maj@k's (voted answer, 0/1). Under a user grader the vote's verdict is the grader's on the first
    of the k samples that gave the voted answer (a user's check reads whole completions, not answers)."""
    if p.tests:  # code: programs do not vote
        return None, None
    if not by_user:
        voted = majority_vote([stated_answer(text) for text in sampled[:k]])
        return voted, 1.0 if voted is not None and check_answer(voted, p.answer)[0] else 0.0
    answers = [user_vote(text) for text in sampled[:k]]
    voted = majority_vote(answers)
    if voted is None:
        return None, 0.0
    first = next(i for i, a in enumerate(answers) if a is not None and vote_key(a) == vote_key(voted))
    return voted, float(scores[first])


def problem_record(p: Problem, greedy: dict, sampled: list[str], scores: list[float], k: int,
                   by_user: bool = False) -> dict:
    """Score one problem: `correct` counts verified samples; the first k samples vote for maj@k (not
    for code: maj_correct None); `by_user`: scores are a user grader's 0/1 verdicts (_maj)."""
    voted, maj = _maj(p, sampled, scores, k, by_user)
    return {"question": p.question, "answer": p.answer, "difficulty": p.difficulty,
            "greedy": greedy["completion"], "greedy_correct": greedy["correct"],
            "greedy_lenient": greedy["lenient"],
            "samples": len(sampled), "correct": int(sum(scores)), "voted": voted, "maj_correct": maj,
            "sampled": sampled, "sampled_correct": scores}


def evaluate_sampled(policy, tok, problems: list[Problem], spec: EnvSpec, s: SampleSettings,
                     stop_ids: list[int], grader: Grader | None = None) -> list[dict]:
    """Greedy pass@1 (rlvr.eval.evaluate) and s.samples sampled completions for every problem, graded
    by `grader` (the built-in checker when None)."""
    s.check()
    was_training = policy.training
    policy.eval()
    greedy = evaluate(policy, tok, problems, spec, max_new_tokens=s.max_new_tokens,
                      batch_size=s.batch_size, stop_ids=stop_ids, grader=grader).records
    sampled, scores = sample_and_grade(policy, tok, problems, spec, s, stop_ids, grader)
    policy.train(was_training)
    by_user = grader is not None and grader.user
    return [problem_record(p, g, texts, sc, s.k, by_user) for p, g, texts, sc in zip(problems, greedy, sampled, scores)]
