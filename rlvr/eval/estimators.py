"""pass@k and maj@k: pure functions over counts and extracted answers.

pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
Code", eq. 1): from n samples of which c are correct, 1 - C(n-c, k) / C(n, k), the chance that k
samples drawn without replacement from the n contain a correct one.

maj@k is self-consistency voting (Wang et al. 2022): the k sampled final answers vote, the answer
with the most votes is checked against the gold. Answers vote together when they normalise to the
same key (`vote_key`): the verifier's cleaning (LaTeX wrappers, `x =`, a trailing full stop), then
exact numbers by value, so "1/2", "0.5" and "\\frac{1}{2}" are one answer and "1,000" is "1000".
"""
from __future__ import annotations

import re

from rlvr.rewards.maths.answer import after_thinking, final_answers
from rlvr.rewards.maths.forms import answer_key, one_answer


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct, as the product prod_{i=n-c+1}^{n} (1 - k/i)
    rather than a ratio of binomials (which overflows floats for large n)."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n (k={k}, n={n}): draw at least k samples")
    if n - c < k:  # every draw of k contains a correct sample
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def stated_answer(completion: str) -> str | None:
    """The one final answer a completion states, as math_accuracy reads it; None when it states
    none, several different ones, or leaves a <think> open (such a sample does not vote)."""
    if after_thinking(completion) is None:
        return None
    cands = final_answers(completion)
    if not cands or not one_answer(cands):
        return None
    return cands[0]


def vote_key(answer: str) -> str:
    """What two answers must share to vote together: the verifier's own test for one answer stated
    twice (rlvr.rewards.maths.forms.answer_key): an exact number's value, else the cleaned text with
    whitespace removed, a label dropped. A percent sign is kept ("50%" and "50" differ)."""
    return answer_key(answer)


def majority_vote(answers: list[str | None]) -> str | None:
    """The most common answer by vote_key, returned as its first-seen spelling; None abstains.
    A tie goes to the answer seen first. None when nothing voted."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for a in answers:
        if a is None:
            continue
        key = vote_key(a)
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, a)
    if not counts:
        return None
    best = max(counts.values())
    winner = next(key for key in first if counts[key] == best)  # dicts keep first-seen order
    return first[winner]


def _natural(label: str) -> list:
    """'d2-n2' < 'd10-n2': digit runs compare as numbers."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", label) if p]


def summarize(records: list[dict], k: int) -> dict:
    """Means over problems of greedy pass@1, pass@k and maj@k. Each record holds `greedy_correct`
    (0/1), `samples` and `correct` (counts of sampled completions) and `maj_correct` (0/1, or None for
    code, whose answers are programs: maj@k is then None); with
    `greedy_lenient` (0/1) in every record, also `format-free@1` (rlvr.eval.lenient)."""
    n = len(records)
    if n == 0:
        raise ValueError("summarize needs at least one record")
    out = {"pass@1": sum(r["greedy_correct"] for r in records) / n}  # greedy, also when k = 1
    if k > 1:
        out[f"pass@{k}"] = sum(pass_at_k(r["samples"], r["correct"], k) for r in records) / n
    out.update({
        f"maj@{k}": None if any(r["maj_correct"] is None for r in records)  # code: programs do not vote
        else sum(r["maj_correct"] for r in records) / n,
        "n": n,
    })
    if all("greedy_lenient" in r for r in records):  # the greedy completion graded format-free
        out["format-free@1"] = sum(r["greedy_lenient"] for r in records) / n
    return out


def summarize_by_difficulty(records: list[dict], k: int) -> dict:
    """summarize() overall plus `per_difficulty`: the same metrics for each difficulty label,
    labels in natural order ('' for problems without one)."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["difficulty"], []).append(r)
    out = summarize(records, k)
    out["per_difficulty"] = {d: summarize(groups[d], k) for d in sorted(groups, key=_natural)}
    return out
