"""Greedy pass@1 of a policy on a split, scored with the task's verifiers (answers or tests) and graded
format-free."""
from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.envs.episodes import EnvSpec, reward_inputs, run_episodes
from rlvr.eval.grader import Grader
from rlvr.eval.grading import grade
from rlvr.rollout.engines import builtin_engine
from rlvr.rollout.sampling import SamplingSettings
from rlvr.tasks import Problem


@dataclass(kw_only=True)
class EvalResult:
    accuracy: float  # fraction whose one final answer is correct
    format_rate: float  # fraction in the stated answer format
    lenient: float  # fraction right format-free (rlvr.eval.lenient): a diagnostic, never a reward
    n: int
    records: list[dict] = field(default_factory=list)


def evaluate(policy, tok, problems: list[Problem], spec: EnvSpec, *, max_new_tokens: int,
             batch_size: int, stop_ids: list[int], grader: Grader | None = None) -> EvalResult:
    """One greedy episode per problem (spec: the run's environments; a single-turn task's episode is
    its one completion), its final answer graded by rlvr.eval.grading: accuracy is the strict verdict
    (the answer, or the hidden tests for code; the user's grader when given), format the stated form,
    lenient the format-free grade.
    A multi-turn episode's record holds its turns under "episode"."""
    was_training = policy.training
    policy.eval()
    records = []
    engine = builtin_engine(policy)
    greedy = SamplingSettings(max_new_tokens=max_new_tokens, temperature=0.0, stop_ids=tuple(stop_ids),
                              pad_id=tok.pad_token_id)
    for start in range(0, len(problems), batch_size):
        chunk_problems = problems[start:start + batch_size]
        ep = run_episodes(engine, spec, chunk_problems, group_size=1, sampling=greedy)
        graded = grade(chunk_problems, ep.texts, grader, reward_inputs(chunk_problems, ep, 1))
        for p, text, g, trunc, rec in zip(chunk_problems, ep.texts, graded, ep.rollout.truncated.tolist(), ep.records):
            records.append({"question": p.question, "answer": p.answer, "difficulty": p.difficulty,
                            "completion": text, **g, "truncated": trunc, **({"episode": rec} if spec.multi_turn else {})})
    engine.sleep()  # the static decode loop's captures and cache, if any, are not kept past evaluation
    policy.train(was_training)
    n = len(records)
    mean = lambda key: sum(r[key] for r in records) / max(n, 1)
    return EvalResult(accuracy=mean("correct"), format_rate=mean("format"), lenient=mean("lenient"), n=n,
                      records=records)
