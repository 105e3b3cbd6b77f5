"""A user's reward code that does more than raise: exits, hangs, returns inf, edits its inputs, cannot be
imported. Each reward is a real .py file named in rewards.weights, as a user writes it; each fault is
handled, and the honest reward beside it is scored as before."""
import math
import os

import pytest

from rlvr.errors import RlvrError
from rlvr.rewards import build_rewards, score_batch
from rlvr.rewards.base import RewardFunctionError, RewardTimeoutError
from rlvr.rewards.workers import owned_by_run

ROWS = ["data.jsonl line 1", "data.jsonl line 2", "data.jsonl line 3"]
TEXTS = ["Answer: 1", "Answer: bad", "Answer: 3"]


def reward_file(tmp_path, body: str, name: str = "r.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def rewards(tmp_path, body: str, fn: str = "f", **limits):
    return build_rewards({f"{reward_file(tmp_path, body)}:{fn}": 1.0}, **limits)


def score(fns, texts=TEXTS, **kw):
    errors = []
    s = score_batch(fns, list(texts), {"answer": ["1", "2", "3"][:len(texts)]}, lambda *e: errors.append(e),
                    origins=ROWS[:len(texts)], **kw)
    return s, errors


EXITS_ON_BAD = """
import sys
def f(completions, **kw):
    if any("bad" in c for c in completions):
        sys.exit(3)
    return [1.0] * len(completions)
"""


def test_sys_exit_fails_only_its_row_and_ends_nothing(tmp_path):
    fns = rewards(tmp_path, EXITS_ON_BAD, timeout_s=10)
    s, errors = score(fns)
    assert s.per_function["r.py:f"] == [1.0, 0.0, 1.0] and s.failed["r.py:f"] == [False, True, False]
    assert s.reasons["r.py:f"][1] == "reward function raised SystemExit: 3"
    (name, error, row), = errors
    assert (name, type(error).__name__, row) == ("r.py:f", "SystemExit", "data.jsonl line 2")
    # the honest rows of the same reward: as without the fault
    honest, none = score(fns, ["Answer: 1", "Answer: 2"])
    assert honest.per_function["r.py:f"] == [1.0, 1.0] and none == []


@pytest.mark.parametrize("statement", ["sys.exit(0)", "raise KeyboardInterrupt", "raise BaseException('odd')",
                                       "raise GeneratorExit"])
def test_any_base_exception_on_every_row_stops_naming_file_and_function(tmp_path, statement):
    path = reward_file(tmp_path, f"import sys\ndef f(completions, **kw):\n    {statement}\n")
    fns = build_rewards({f"{path}:f": 1.0}, timeout_s=10)
    with pytest.raises(RewardFunctionError) as got:
        score(fns, stop_if_all_fail=True)
    message = str(got.value)
    assert f"reward function 'r.py:f' ({path}:2, function f) raised on every completion" in message
    assert "First row: data.jsonl line 1" in message and f'File "{path}", line 3, in f' in message


def test_inf_and_minus_inf_are_refused_with_reward_and_row_and_nan_stays_not_applicable(tmp_path):
    fns = rewards(tmp_path, "def f(completions, **kw):\n"
                            "    return [{'Answer: 1': float('inf'), 'Answer: bad': float('nan')}.get(c, -float('inf'))"
                            " if c != 'Answer: 3' else 0.5 for c in completions]\n")
    s, errors = score(fns + build_rewards({"correctness": 1.0}), ["Answer: 1", "Answer: bad", "Answer: 3"])
    assert s.per_function["r.py:f"] == [0.0, 0.0, 0.5] and s.failed["r.py:f"] == [True, False, False]
    assert s.reasons["r.py:f"][0].startswith("reward function raised ValueError: returned inf for completion 0")
    assert s.reasons["r.py:f"][1] == "not applicable"  # NaN: TRL's "does not apply"
    assert all(math.isfinite(t) for t in s.total) and s.total == [1.0, 0.0, 1.5]
    (name, error, row), = errors
    assert (name, row) == ("r.py:f", "data.jsonl line 1")
    scorer = reward_file(tmp_path, "def compute_score(solution_str, **kw):\n    return float('-inf')\n", "v.py")
    verl = build_rewards({f"verl:{scorer}:compute_score": 1.0})
    s, _ = score(verl)
    assert s.failed["verl:v.py:compute_score"] == [True] * 3
    assert "returned a verdict of -inf" in s.reasons["verl:v.py:compute_score"][0]


EDITS = """
def clears(completions, answer, prompts, **kw):
    out = [1.0] * len(completions)
    completions.clear()
    answer[:] = ["999"] * len(answer)
    prompts.append("injected")
    return out

def edits_chat(completions, **kw):
    for c in completions:
        c[-1]["content"] = "Answer: 999"
    return [0.0] * len(completions)
"""


def test_each_reward_gets_its_own_copy_of_the_inputs(tmp_path):
    path = reward_file(tmp_path, EDITS)
    fns = build_rewards({f"{path}:clears": 1.0, f"{path}:edits_chat": 1.0, "correctness": 1.0}, timeout_s=10)
    completions = [[{"role": "assistant", "content": "Answer: 1"}], [{"role": "assistant", "content": "Answer: 5"}]]
    columns = {"answer": ["1", "2"], "prompts": ["p1", "p2"]}
    s = score_batch(fns, completions, columns)
    # the built-in after them scores the model's own text against the real gold, on every row
    assert s.per_function["correctness"] == [1.0, 0.0] and s.errors == {"r.py:clears": 0, "r.py:edits_chat": 0,
                                                                         "correctness": 0}
    assert completions[0][0]["content"] == "Answer: 1" and columns == {"answer": ["1", "2"], "prompts": ["p1", "p2"]}
    # a row retried alone gets its own copy too: the copy the failing batch call edited is not reused
    path2 = reward_file(tmp_path, "def f(completions, **kw):\n    if len(completions) > 1:\n"
                                  "        completions[0] = 'Answer: 3'\n        raise ValueError('batch')\n"
                                  "    return [float(completions[0] == 'Answer: 1')]\n", "r2.py")
    s = score_batch(build_rewards({f"{path2}:f": 1.0}, timeout_s=10), ["Answer: 1", "Answer: 2"], {})
    assert s.per_function["r2.py:f"] == [1.0, 0.0]


HANGS = """
import pathlib, time
def f(completions, **kw):
    if any("bad" in c for c in completions):
        time.sleep(60); pathlib.Path(__file__).with_name("returned").touch()
    return [1.0] * len(completions)

async def g(completions, **kw):
    time.sleep(60); pathlib.Path(__file__).with_name("returned").touch()  # blocks the event loop itself too
    return [1.0] * len(completions)
"""


@pytest.mark.parametrize("fn", ["f", "g"])
def test_a_hang_in_the_trainers_process_stops_at_the_limit_naming_reward_and_rows(tmp_path, fn):
    fns = rewards(tmp_path, HANGS, fn, timeout_s=0.5)
    with pytest.raises(RewardTimeoutError) as got:
        score(fns)
    assert not (tmp_path / "returned").exists()  # told while the call still sleeps: the limit cut it
    assert (f"reward function 'r.py:{fn}' ({tmp_path / 'r.py'}:{3 if fn == 'f' else 8}, function {fn}) did not "
            "return within rewards.timeout_s=0.5s on a batch of 3 completions (first row: data.jsonl line 1)") \
        in str(got.value)
    assert "rewards.isolate=true" in str(got.value)


def test_a_reward_within_its_limit_is_scored_as_before(tmp_path):
    fns = rewards(tmp_path, "import time\ndef f(completions, **kw):\n    time.sleep(0.2)\n"
                            "    return [2.0] * len(completions)\n", timeout_s=5)
    s, errors = score(fns)
    assert s.per_function["r.py:f"] == [2.0, 2.0, 2.0] and errors == []
    assert score(rewards(tmp_path, HANGS, timeout_s=0), ["Answer: 1"])[0].total == [1.0]  # 0: no limit


# ---- rewards.isolate: a worker process that a hang, os._exit or a crash cannot take down ----------

ISOLATED = """
import os, signal, sys, time
def f(completions, answer, log_metric, **kw):
    log_metric("calls", 1.0)
    if len(completions) > 1 and any("bad" in c for c in completions):
        os._exit(7)                     # a batch with a bad row: the whole worker dies
    if "bad" in completions[0]:
        time.sleep(60)                  # alone: it hangs
    if answer[0] == "3":
        os.kill(os.getpid(), signal.SIGSEGV)
    if answer[0] == "4":
        sys.exit(1)
    return [float(completions[0].endswith(answer[0]))] * len(completions)
"""


def test_isolated_reward_survives_os_exit_hang_crash_and_exit(tmp_path):
    with owned_by_run() as workers:
        fns = rewards(tmp_path, ISOLATED, timeout_s=1.0, isolate=True)
        s = score_batch(fns, ["Answer: 1", "Answer: bad", "Answer: 3", "Answer: 4"],
                        {"answer": ["1", "2", "3", "4"]}, origins=[f"row {i}" for i in range(1, 5)])
        assert s.per_function["r.py:f"] == [1.0, 0.0, 0.0, 0.0] and s.failed["r.py:f"] == [False, True, True, True]
        reasons = s.reasons["r.py:f"]
        assert reasons[1] == "reward function did not return within rewards.timeout_s=1s"
        assert reasons[2].startswith("reward function raised WorkerCrashed: the reward worker process ended during "
                                     "the call (killed by SIGSEGV)")
        assert reasons[3] == "reward function raised SystemExit: 1"
        assert workers.user.restarts == 3  # the batch's os._exit, the hang, the segfault
        assert s.logged == {"calls": 1.0}
        proc = workers.user.proc
    assert proc.poll() is not None  # the run's end closed its worker


def test_isolated_honest_reward_scores_as_in_process(tmp_path):
    body = "def f(completions, answer, **kw):\n    return [float(c.endswith(a)) for c, a in zip(completions, answer)]\n"
    texts, columns = ["Answer: 1", "Answer: 5", "Answer: 3"], {"answer": ["1", "2", "3"]}
    with owned_by_run():
        isolated = score_batch(rewards(tmp_path, body, isolate=True, timeout_s=30), texts, columns)
    plain = score_batch(rewards(tmp_path, body, timeout_s=30), texts, columns)
    assert isolated.per_function == plain.per_function == {"r.py:f": [1.0, 0.0, 1.0]}
    assert isolated.errors == {"r.py:f": 0}


def test_isolate_refuses_a_function_the_worker_cannot_load():
    with pytest.raises(RlvrError, match=r"rewards.isolate: reward 'python:<lambda>' .*cannot be loaded by the "
                                        r"worker process: define it at the top level of an importable module"):
        build_rewards({"python:<lambda>": 1.0}, given={"python:<lambda>": lambda completions, **kw: [1.0]},
                      isolate=True)


# ---- a reward file that cannot be imported ------------------------------------------------------

@pytest.mark.parametrize("body, said", [
    ("def f(completions, **kw):\n    return [1.0] *\n", r"r.py, line 2: SyntaxError: invalid syntax"),
    ("import json\nraise ValueError('no key')\n", r"importing it raised ValueError: no key \(.*r.py, line 2, in <module>\)"),
    ("import sys\nsys.exit(4)\n", r"importing it raised SystemExit: 4 \(.*r.py, line 2, in <module>\)"),
    ("x = {}['k']\n", r"importing it raised KeyError: 'k' \(.*r.py, line 1, in <module>\)"),
])
def test_a_reward_file_that_cannot_be_imported_is_named_with_its_line(tmp_path, body, said):
    with pytest.raises(RlvrError, match=r"cannot load reward function '.*r.py:f': .*" + said):
        rewards(tmp_path, body)


def test_an_importable_reward_file_loads_as_before(tmp_path):
    fns = rewards(tmp_path, "import json\ndef f(completions, **kw):\n    return [1.0] * len(completions)\n")
    assert fns[0].name == "r.py:f" and fns[0].user and score(fns)[0].total == [1.0, 1.0, 1.0]


def test_builtins_are_not_user_code():
    fns = build_rewards({"correctness": 1.0, "format": 0.2}, timeout_s=5, isolate=True)
    assert [(rf.user, rf.timeout_s, rf.isolated) for rf in fns] == [(False, 0.0, False)] * 2


def test_isolate_takes_a_module_level_function_handed_to_fit(tmp_path, monkeypatch):
    """rlvr.fit's callables cross to the worker pickled by reference: a function of an importable module works,
    and scores as it does in the trainer's process."""
    import importlib

    (tmp_path / "my_fit_rewards.py").write_text("import os\ndef where(completions, **kw):\n"
                                               "    return [float(os.getpid())] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("my_fit_rewards")
    with owned_by_run() as workers:
        fns = build_rewards({"python:where": 1.0}, given={"python:where": module.where}, isolate=True, timeout_s=30)
        s = score_batch(fns, ["a", "b"], {})
        assert s.errors == {"python:where": 0}
        assert s.per_function["python:where"] == [float(workers.user.proc.pid)] * 2   # scored in the worker
    assert score_batch(build_rewards({"python:where": 1.0}, given={"python:where": module.where}, timeout_s=30),
                       ["a"], {}).per_function["python:where"] == [float(os.getpid())]


def test_an_environment_instance_in_the_columns_is_passed_as_it_is(tmp_path):
    """TRL passes each episode's environment to the rewards: an object that holds a lock cannot be copied, and
    a reward may ask it for its state; plain data around it is still each call's own."""
    import threading

    class Env:
        def __init__(self):
            self.lock, self.reward = threading.Lock(), 1.0

    envs = [Env(), Env()]
    seen = []

    def reads_env(completions, environments, answer, **kw):
        seen.append(environments)
        answer.append("edited")
        return [e.reward for e in environments]

    fns = build_rewards({"python:reads_env": 1.0}, given={"python:reads_env": reads_env}, timeout_s=10)
    columns = {"environments": envs, "answer": ["1", "2"]}
    s = score_batch(fns, ["a", "b"], columns)
    assert s.per_function["python:reads_env"] == [1.0, 1.0] and s.errors == {"python:reads_env": 0}
    assert seen[0][0] is envs[0] and seen[0] is not envs and columns["answer"] == ["1", "2"]


def test_a_reward_file_named_like_another_module_does_not_replace_it(tmp_path, monkeypatch):
    """verl's scorer is reward_score/math.py: `verl:math.py:compute_score` registered the file as the module
    `math`, so every later `from math import ceil` (transformers, as the model loaded) failed and rlvr
    train died with a traceback. A file named like a module that exists is loaded under a private name (the
    same in the isolated worker), and a wrapper named like the package it imports (yaml.py importing yaml)
    gets the real package; a file whose name is free keeps it, as an import would name it."""
    import sys

    import yaml

    monkeypatch.setitem(sys.modules, "math", math)  # put back after the test, whatever it did
    monkeypatch.setitem(sys.modules, "yaml", yaml)
    (tmp_path / "math.py").write_text("def compute_score(solution_str, ground_truth):\n"
                                      "    return float(solution_str.strip() == ground_truth)\n")
    (tmp_path / "yaml.py").write_text("from yaml import safe_load\n\ndef f(completions, answer, **kw):\n"
                                      "    return [float(safe_load(c) == safe_load(a)) for c, a in zip(completions, answer)]\n")
    (tmp_path / "free_name_rewards.py").write_text("def f(completions, **kw):\n    return [0.5] * len(completions)\n")
    fns = build_rewards({f"verl:{tmp_path / 'math.py'}:compute_score": 1.0, f"{tmp_path / 'yaml.py'}:f": 1.0,
                         f"{tmp_path / 'free_name_rewards.py'}:f": 1.0})
    assert sys.modules["math"] is math and sys.modules["yaml"] is yaml
    assert sys.modules["free_name_rewards"].__file__ == str(tmp_path / "free_name_rewards.py")
    s, errors = score(fns, ["1", "2", "4"])
    assert errors == [] and s.total == [2.5, 2.5, 0.5]  # math.py and yaml.py pay rows 1 and 2, free_name 0.5 each
    with owned_by_run():  # the worker process loads the file under the same private name
        isolated = build_rewards({f"verl:{tmp_path / 'math.py'}:compute_score": 1.0}, isolate=True, timeout_s=30)
        assert score(isolated, ["1", "0", "3"])[0].total == [1.0, 0.0, 1.0]


def test_a_reward_file_under_the_home_directory_loads(tmp_path, monkeypatch):
    """`rewards.weights: {"~/rewards/r.py:f": 1}` loaded in rlvr train (its config is made absolute first)
    but not in rlvr eval or rlvr audit of the same config ('no such file ~/rewards/r.py')."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "home_reward.py").write_text("def f(completions, **kw):\n    return [0.25] * len(completions)\n")
    fns = build_rewards({"~/rewards/home_reward.py:f": 1.0})
    assert score(fns)[0].total == [0.25, 0.25, 0.25]
