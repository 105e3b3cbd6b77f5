import json

import pytest

from rlvr.cli import main
from rlvr.errors import RlvrError
from rlvr.rewards import build_rewards
from rlvr.rewards.base import RewardFunction, resolve
from rlvr.rewards.preflight import check_rewards, diagnose, missing_names, preflight
from rlvr.tasks import Problem

ROWS = [Problem(question="Tom has 3 apples and buys 5 more. How many?", answer="8",
                row={"question": "Tom ...", "answer": "8"}),
        Problem(question="A box holds 4 rows of 6 eggs. How many?", answer="24",
                row={"question": "A box ...", "answer": "24"})]

REWARDS = '''
import re

def wants_solution(completions, solution, **kwargs):
    return [1.0 for _ in completions]

def reads_kwargs(completions, **kwargs):
    return [1.0 if kwargs["solution"] else 0.0 for _ in completions]

def my_reward(completions, answer, **kwargs):
    return [1.0 if str(a) in c else 0.0 for c, a in zip(completions, answer)]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if ground_truth in solution_str else 0.0

def one_number(completions, **kwargs):
    return 1.0

def never_right(completions, **kwargs):
    return [0.0 for _ in completions]

def never_applies(completions, **kwargs):
    return [None if i % 2 else float("nan") for i, _ in enumerate(completions)]

def hashes_only(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.strip() == "#### " + ground_truth else 0.0
'''


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "user_rewards.py"
    path.write_text(REWARDS)
    return path


def reward(module, name: str, verl: bool = False) -> RewardFunction:
    return resolve(f"{'verl:' if verl else ''}{module}:{name}", 1.0, {})


def test_missing_names_reads_type_and_key_errors():
    assert missing_names(TypeError("f() missing 2 required positional arguments: 'solution_str' and 'ground_truth'")) \
        == ["solution_str", "ground_truth"]
    assert missing_names(TypeError("f() missing 1 required keyword-only argument: 'solution'")) == ["solution"]
    assert missing_names(KeyError("solution")) == ["solution"]
    assert missing_names(KeyError("12")) == [] and missing_names(KeyError("no entry for 12")) == []  # a value, not a name
    assert missing_names(ValueError("bad")) == []


def test_a_parameter_no_column_feeds_stops_with_the_name_the_columns_and_the_fix(module):
    for name in ("wants_solution", "reads_kwargs"):
        with pytest.raises(RlvrError) as e:
            check_rewards([reward(module, name)], ROWS)
        text = str(e.value)
        assert f"reward 'user_rewards.py:{name}' raised on 2 of 2 rows tried" in text  # the file's name, as in metrics
        assert "parameter 'solution'" in text and "the row has columns question, answer. Rename" in text
        assert "task.columns.answer" in text


def test_a_compute_score_without_the_verl_prefix_is_told_to_take_it(module):
    with pytest.raises(RlvrError, match=rf"name it with the prefix, rewards.weights key 'verl:{module}:compute_score'"):
        check_rewards([reward(module, "compute_score")], ROWS)


def test_the_verl_prefix_on_a_trl_function_is_told_to_go(module):
    with pytest.raises(RlvrError, match=rf"TRL-style function \(it takes completions\).*key '{module}:my_reward'"):
        check_rewards([reward(module, "my_reward", verl=True)], ROWS)


def test_a_return_that_is_not_one_number_per_completion_is_named(module):
    with pytest.raises(RlvrError, match="returns one number \\(or None\\) per completion"):
        check_rewards([reward(module, "one_number")], ROWS)


def test_rewards_that_run_pass_and_a_correctness_check_paying_nothing_is_a_warning(module):
    good = [reward(module, "my_reward"), reward(module, "compute_score", verl=True), *build_rewards({"correctness": 1.0})]
    assert check_rewards(good, ROWS, ("correctness", good[1].name)) == []
    zero = reward(module, "never_right")
    warnings = check_rewards([zero], ROWS, (zero.name,))
    assert len(warnings) == 1 and "gave the reference answers of all 2 rows tried 0" in warnings[0]
    assert check_rewards([zero], ROWS) == []  # not a correctness check: 0 for everything may be its design
    # None and NaN mean "does not apply", not 0: said so, not taken for a wrong reading of the gold
    na = reward(module, "never_applies")
    [warning] = check_rewards([na], ROWS, (na.name,))
    assert warning.startswith("reward 'user_rewards.py:never_applies' returned None or NaN (does not apply) for "
                              "the reference answers of all 2 rows tried") and " 0:" not in warning
    assert check_rewards([na], ROWS) == []
    hashes = reward(module, "hashes_only", verl=True)  # pays '#### 8' only, not the reference 'Answer: 8'
    assert check_rewards([hashes], ROWS, (hashes.name,)) == []


def test_an_environment_column_is_not_an_error(module):
    warnings = check_rewards([reward(module, "wants_solution")], ROWS, env_columns=True)
    assert len(warnings) == 1 and "parameter 'solution'" in warnings[0]


def test_preflight_skips_rows_without_a_reference_and_the_env_reward():
    found = preflight(build_rewards({"env": 1.0, "correctness": 1.0}), [Problem(question="q", answer="")] + ROWS)
    assert (found.rows, found.failed, found.zero) == (2, {}, [])


def test_diagnose_names_the_columns_for_any_other_error(module):
    rf = reward(module, "my_reward")
    assert diagnose(rf, ZeroDivisionError("x"), ["answer"]) == "the row has columns answer; fix the reward so it runs on them"


def write_rows(path, n=12):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"Ann has {i} pens and gets 2 more. How many?", "answer": str(i + 2)}) + "\n")


def test_rlvr_train_stops_on_a_broken_reward_before_the_model_loads_or_the_run_dir_is_made(tmp_path, module, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "run"
    write_rows(data)
    # an uncached Hub name passes the check of names made first, and fails only when it loads
    rc = main(["train", f"--task.name={data}", "--task.heldout_size=4", "--model.name=no-such-org/no-such-model",
               f"--rewards.weights={{{module}:wants_solution: 1.0}}", f"--train.out={out}"])
    err = capsys.readouterr().err
    assert rc == 2 and "parameter 'solution'" in err and "no-such-org" not in err, err
    assert not out.exists()


def test_rlvr_audit_shows_a_reward_exception(tmp_path, module, capsys):
    data = tmp_path / "data.jsonl"
    write_rows(data)
    rc = main(["audit", f"--task.name={data}", "--task.heldout_size=4", "--n=3",
               f"--rewards.weights={{verl:{module}:my_reward: 1.0}}"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "ERROR: reward 'verl:user_rewards.py:my_reward' raised on 3 of the reference solutions tried" in out
    assert "remove the prefix" in out and "CANNOT JUDGE" not in out


def test_gold_answers_the_maths_checker_cannot_read_are_noted_before_a_run():
    """With the built-in correctness reward, golds that do not score 1 even as 'Answer: <gold>' are noted (a
    reasoning-gym dataset whose golds are prose needs its own reward); another reward set checks nothing."""
    from rlvr.config import build_config
    from rlvr.rewards import rewards_of
    from rlvr.rewards.preflight import check_gold_answers, maths_gold_note
    from rlvr.tasks import Problem, Splits

    prose = [Problem(question="q", answer="x=1 or x=2"), Problem(question="q", answer="12"),
             Problem(question="q", answer="The answer is yes")]
    assert maths_gold_note(prose) == ["2 of 3 gold answers checked do not score 1 with the maths checker (the "
                                      "correctness reward) even when written 'Answer: <gold>' (e.g. 'x=1 or x=2'); "
                                      "give this task its own reward function"]
    assert maths_gold_note(prose[1:2]) == []
    splits = Splits(train=prose, heldout=[], ood=[])
    cfg = build_config(None)
    maths = rewards_of(cfg.rewards, cfg.rollout.max_new_tokens)
    assert check_gold_answers(maths, splits, {}) == maths_gold_note(prose)
    assert check_gold_answers([r for r in maths if r.name == "format"], splits, {}) == []


def test_worked_solution_golds_are_their_own_reference_answers():
    """A gold that is a worked solution (GSM8K's `answer` ending in '#### 74', MATH's `solution` with its
    box) is a right completion as it is: on an answer line it would state two final answers, so the maths
    checker scored it 0 and every GSM8K or MATH file drew 'give this task its own reward function'."""
    from rlvr.rewards.preflight import maths_gold_note, reference

    gsm8k = Problem(question="q", answer="He has 25+49 = <<25+49=74>>74 apples.\n#### 74")
    maths = Problem(question="q", answer="We have $3\\cdot 4 = \\boxed{12}$.")
    assert reference(gsm8k) == gsm8k.answer and reference(maths) == maths.answer
    assert reference(ROWS[0]) == "Answer: 8"
    assert maths_gold_note([gsm8k, maths, ROWS[0]]) == []
    assert preflight(build_rewards({"correctness": 1.0}), [gsm8k, maths], ("correctness",)).zero == []


def answer_line(completions, answer, **kwargs):
    """Pays only a bare 'Answer: N' equal to the gold's '####' value."""
    import re
    return [float(bool(m := re.fullmatch(r"Answer: (\d+)", c.strip())) and m.group(1) == a.split("####")[-1].strip())
            for c, a in zip(completions, answer)]


def test_a_reward_reading_an_answer_line_pays_a_worked_gold_on_one():
    """A correctness check that reads only 'Answer: N' gives a worked solution 0 but pays its final answer on
    an answer line: no warning (the other forms are tried with the gold's final answer, not its whole text)."""
    rf = RewardFunction(name="answer_line", weight=1.0, fn=answer_line)
    worked = [Problem(question="q", answer="3 + 5 = 8.\n#### 8")]
    assert answer_line(["3 + 5 = 8.\n#### 8", "Answer: 8"], ["#### 8"] * 2) == [0.0, 1.0]
    assert preflight([rf], worked, ("answer_line",)).zero == []


def test_a_reward_past_its_time_limit_is_told_to_be_faster_not_fixed(module):
    """rewards.isolate=true: a reward killed at rewards.timeout_s in the preflight is diagnosed as slow (make
    it faster or raise the limit), not as 'fix the reward so it runs on them' with a traceback of rlvr's own
    worker plumbing."""
    import dataclasses

    from rlvr.rewards.call import CallTimedOut

    rf = dataclasses.replace(reward(module, "my_reward"), timeout_s=1.5)
    assert diagnose(rf, CallTimedOut(1.5), ["answer"]) == (
        "'user_rewards.py:my_reward' took longer than rewards.timeout_s=1.5s on one completion; make it faster or "
        "raise rewards.timeout_s (it is called on a batch of completions per step)")


TABLE = {"1": 1.0}


def table_lookup(completions, answer, **kwargs):
    return [TABLE[str(a)] for a in answer]


def test_a_key_error_of_the_rewards_own_dict_is_shown_not_taken_for_a_missing_column():
    """`TABLE[str(a)]` raising KeyError('8') was diagnosed 'parameter '8' of ... has no column' with no
    traceback; a key that cannot name a parameter is the reward's own lookup: the generic diagnosis and
    the traceback down to the line that raised."""
    rf = RewardFunction(name="table_lookup", weight=1.0, fn=table_lookup)
    bad, message = preflight([rf], ROWS).failed["table_lookup"]
    assert bad == 2 and message.startswith("KeyError: '8'. Likely fix: the row has columns question, answer; "
                                           "fix the reward so it runs on them\nTraceback")
    assert "return [TABLE[str(a)] for a in answer]" in message and "has no column" not in message


def reads_chat(completions, answer, **kwargs):  # TRL's README habit: c[0]["content"]
    return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]


def reads_text(completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def test_a_reward_written_for_the_other_completion_form_is_told_which_form_it_gets():
    """TRL passes text completions for text prompts and message lists for conversational ones; a reward
    written for the other form raised a TypeError or AttributeError diagnosed as 'fix the reward'. The
    diagnosis now says which form this dataset gives and how to read it."""
    chat_rows = [Problem(question=p.question, answer=p.answer, row=p.row,
                         messages=({"role": "user", "content": p.question},)) for p in ROWS]
    text_fail = preflight([RewardFunction(name="reads_chat", weight=1.0, fn=reads_chat)], ROWS).failed["reads_chat"]
    assert text_fail[1].startswith("TypeError: string indices must be integers, not 'str'. Likely fix: the "
                                   "completions are text, as TRL passes them for a dataset of text prompts;")
    chat_fail = preflight([RewardFunction(name="reads_text", weight=1.0, fn=reads_text)], chat_rows).failed["reads_text"]
    assert chat_fail[1].startswith("AttributeError: 'list' object has no attribute 'strip'. Likely fix: the "
                                   "completions are lists of chat messages, as TRL passes them for a dataset of "
                                   "conversational prompts: read each one's text as c[-1]['content']")
    assert preflight([RewardFunction(name="reads_chat", weight=1.0, fn=reads_chat)], chat_rows).failed == {}


def sleeps(completions, **kwargs):
    import time
    time.sleep(0.6)
    return [0.0] * len(completions)


def test_a_reward_past_its_limit_in_the_preflight_names_the_file_and_line():
    """A reward that overruns rewards.timeout_s in the trainer's process during the preflight stops the run
    naming the first row's file and line, as in training; it said 'first row: row 1 of the batch'."""
    import dataclasses

    rows = [dataclasses.replace(p, origin=f"d.jsonl line {i + 3}") for i, p in enumerate(ROWS)]
    rf = RewardFunction(name="sleeps", weight=1.0, fn=sleeps, user=True, timeout_s=0.2)
    with pytest.raises(RlvrError, match=r"did not return within rewards.timeout_s=0.2s on a batch of 2 completions "
                                        r"\(first row: d\.jsonl line 3\)"):
        check_rewards([rf], rows)
