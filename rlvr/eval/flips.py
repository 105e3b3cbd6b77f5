"""Per-problem flips between two evaluations of the same problems, and the strict gain decomposed.

Both evaluations are lists of greedy records ({"question", "answer", "completion", "correct",
"lenient", ...}: rlvr.eval.evaluate). A problem counts as right when it is right format-free
(`lenient`), so the flips say what the model knows, not how it writes it:

    fixed   wrong before, right after        broken  right before, wrong after
    kept    right both times                 never   wrong both times

The strict change splits exactly into two parts (points, over the n shared problems):

    strict_after - strict_before = form + answers
    answers = lenient_after - lenient_before = (fixed - broken) / n
    form    = (lenient_before - strict_before) - (lenient_after - strict_after)

`form` is the change in the share of right answers that the strict verifier missed because they were
not in the required form; `answers` is the change in the answers themselves.
"""
from __future__ import annotations

KINDS = ("fixed", "broken", "kept", "never")
EXAMPLES = 3  # per kind, in summary.json and the report


def _example(b: dict, a: dict) -> dict:
    return {"question": b["question"], "answer": b["answer"], "before": b["completion"], "after": a["completion"]}


def flips(before: list[dict], after: list[dict], examples: int = EXAMPLES) -> dict:
    """Counts of fixed / broken / kept / never over the problems both evaluations hold (matched by
    question), with up to `examples` of each changed kind; `n` is the number matched."""
    by_question = {r["question"]: r for r in before}
    out: dict = {k: 0 for k in KINDS}
    out["n"] = 0
    out["examples"] = {"fixed": [], "broken": []}
    for a in after:
        b = by_question.get(a["question"])
        if b is None:
            continue
        was, now = bool(b["lenient"]), bool(a["lenient"])
        kind = {(False, True): "fixed", (True, False): "broken", (True, True): "kept", (False, False): "never"}[was, now]
        out[kind] += 1
        out["n"] += 1
        if kind in out["examples"] and len(out["examples"][kind]) < examples:
            out["examples"][kind].append(_example(b, a))
    return out


def decompose(before: list[dict], after: list[dict]) -> dict:
    """The strict change in points split into `form` and `answers` (module docstring), over the
    problems both evaluations hold, with the flip counts."""
    f = flips(before, after, examples=0)
    n = f["n"]
    if n == 0:
        return {"n": 0, "strict": 0.0, "form": 0.0, "answers": 0.0, "fixed": 0, "broken": 0}
    shared = {r["question"] for r in after} & {r["question"] for r in before}
    rate = lambda recs, key: 100 * sum(float(r[key]) for r in recs if r["question"] in shared) / n
    sb, sa = rate(before, "correct"), rate(after, "correct")
    lb, la = rate(before, "lenient"), rate(after, "lenient")
    return {"n": n, "strict": sa - sb, "form": (lb - sb) - (la - sa), "answers": la - lb,
            "fixed": f["fixed"], "broken": f["broken"]}


def describe(d: dict) -> str:
    """The decomposition in plain words, e.g. '+24.0 points strict: +38.0 from right answers now in
    the required form, -14.0 from the answers themselves (4 fixed, 18 broken of 100)'."""
    if d["n"] == 0:
        return "no problems in common"
    return (f"{d['strict']:+.1f} points strict: {d['form']:+.1f} from right answers now in the required form, "
            f"{d['answers']:+.1f} from the answers themselves ({d['fixed']} fixed, {d['broken']} broken of {d['n']})")
