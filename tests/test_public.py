"""The public surface (rlvr/public.py): every name a user imports is there and imports, every `rlvr.<name>` the
user docs mention is listed, and each documented construction form of a user type keeps working (a form that
changes warns first)."""
import importlib
import re
import warnings
from pathlib import Path

import pytest

from rlvr.public import SURFACE, positional_too

ROOT = Path(__file__).resolve().parents[1]
# what users read; docs/DESIGN.md and docs/internals.md are for the people who build rlvr and name its insides
USER_DOCS = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md"))
                                  if p.name not in ("DESIGN.md", "internals.md"))]


def test_every_listed_name_imports():
    missing = [f"{module}.{name}" for module, names in SURFACE.items() for name in names
               if not hasattr(importlib.import_module(module), name)]
    assert missing == []


def documented_names() -> set[tuple[str, str]]:
    """(module, name) of each `rlvr.a.b.name` and `from rlvr.a import x, y` in the user docs that is not a
    module itself (`.rlvr.lock`, a file, is no name)."""
    found = set()
    for doc in USER_DOCS:
        text = doc.read_text()
        for m in re.finditer(r"from (rlvr(?:\.\w+)*) import ([\w, ]+)", text):
            found |= {(m.group(1), n.strip()) for n in m.group(2).split(",") if n.strip()}
        for m in re.finditer(r"(?<![\w.])rlvr((?:\.\w+)+)", text):
            parts = ["rlvr", *m.group(1).strip(".").split(".")]
            for cut in range(len(parts), 0, -1):   # the longest prefix that is a module; the next part its name
                try:
                    importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                if cut < len(parts):
                    found.add((".".join(parts[:cut]), parts[cut]))
                break
    return found


def test_every_name_the_user_docs_mention_is_listed():
    names = documented_names()
    assert ("rlvr", "fit") in names and ("rlvr.algo", "policy_loss") in names  # the reader finds them at all
    assert sorted(f"{m}.{n}" for m, n in names if n not in SURFACE.get(m, ())) == []


def test_reply_as_users_write_it():
    from rlvr.envs.base import Reply

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the documented forms say nothing
        assert Reply("text", "user") == Reply(text="text", role="user")
        assert Reply("text") == Reply(text="text", role="tool")
        assert Reply("", "tool", True) == Reply(done=True)
    with pytest.warns(DeprecationWarning, match="pass calls by keyword"):
        old = Reply("r", "tool", False, [{"name": "calculator", "error": ""}])
    assert old.calls == [{"name": "calculator", "error": ""}]
    with pytest.raises(TypeError, match="multiple values for argument 'text'"):
        Reply("a", text="b")
    with pytest.raises(TypeError, match="at most 5 positional"):
        Reply("a", "tool", False, [], "", 6)


def test_problem_verdict_and_reward_as_users_write_them():
    from rlvr.rewards import Reward, Verdict
    from rlvr.tasks import Problem

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Problem("What is 2 + 3?", "5") == Problem(question="What is 2 + 3?", answer="5")
        assert Verdict(1.0, "right", "5") == Verdict(score=1.0, reason="right", extracted="5")
        Reward(name="r", verdicts=lambda completions, **kw: [])
    with pytest.warns(DeprecationWarning, match="pass difficulty by keyword"):
        assert Problem("q", "a", "easy").difficulty == "easy"
    with pytest.warns(DeprecationWarning, match="pass name, verdicts by keyword"):
        assert Reward("r", lambda completions, **kw: []).__name__ == "r"


def test_the_reward_signatures_score():
    """A TRL-style function (by keyword, a list back) and verl's compute_score, given to rlvr as rlvr.fit gives
    them, score through the one path training uses."""
    from rlvr.api import name_rewards
    from rlvr.rewards import build_rewards
    from rlvr.rewards.base import score_batch

    def exact(completions, answer, **kwargs):
        return [float(c.strip() == a) for c, a in zip(completions, answer)]

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 0.5 if ground_truth in solution_str else 0.0

    weights, given = name_rewards({exact: 1.0, compute_score: 2.0})
    s = score_batch(build_rewards(weights, given=given), ["5", "it is 5", "6"], {"answer": ["5", "5", "5"]})
    assert s.per_function == {"python:exact": [1.0, 0.0, 0.0], "verl:python:compute_score": [0.5, 0.5, 0.0]}
    assert s.total == [2.0, 1.0, 0.0]


def test_a_user_environment_written_positionally_runs(tiny):
    """An rlvr Environment whose step answers Reply("...", "user") runs its turns (it failed on every step
    while Reply was keyword-only)."""
    from rlvr.envs.base import Reply
    from rlvr.envs.episodes import EnvSpec, Limits, run_episodes
    from rlvr.envs.render import TurnRender
    from rlvr.rollout.engines import builtin_engine
    from rlvr.rollout.sampling import SamplingSettings
    from rlvr.tasks import Problem

    class FollowUp:
        def reset(self, problem):
            self.turns = 0
            return [{"role": "user", "content": problem.question}]

        def step(self, text):
            self.turns += 1
            return Reply("Check it and answer again.", "user") if self.turns == 1 else Reply(done=True)

        def reward_columns(self):
            return {}

    model, tok = tiny
    spec = EnvSpec(make=FollowUp, render=TurnRender(tok), limits=Limits(max_turns=2), multi_turn=True)
    # a stop token the random model draws often, so its first turn ends and the environment answers
    stops = (tok.eos_token_id, *tok("aeiou")["input_ids"])
    sampling = SamplingSettings(max_new_tokens=10, temperature=1.0, stop_ids=stops, pad_id=tok.pad_token_id)
    ep = run_episodes(builtin_engine(model), spec, [Problem("What is 2 + 3?", "5")], group_size=4,
                      sampling=sampling, seeds=[1])
    answered = [rec["turns"][1] for rec in ep.records if len(rec["turns"]) > 1]
    assert answered and all((t["source"], t["role"], t["text"]) == ("env", "user", "Check it and answer again.")
                            for t in answered)
    assert "env_error" not in {rec["end"] for rec in ep.records}


def test_positional_too_lists_only_public_types():
    """The positional forms are a promise to users: a class of rlvr's own stays keyword-only."""
    import ast

    marked = set()
    for path in sorted((ROOT / "rlvr").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any("positional_too" in ast.unparse(d) for d in node.decorator_list):
                marked.add(node.name)
    public = {name for names in SURFACE.values() for name in names}
    assert marked == {"Reply", "Problem", "Reward"} and marked <= public


def test_positional_too_checks_the_documented_order():
    from dataclasses import dataclass

    with pytest.raises(AssertionError):
        @positional_too("b")
        @dataclass(kw_only=True)
        class Wrong:
            a: int = 0
            b: int = 0
