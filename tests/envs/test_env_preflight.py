"""The environment's preflight (rlvr/envs/preflight.py): reset, one step given each row's reference answer, the
reward columns, on the first rows; what stops the run, what is a warning, and what each says."""
import pytest

from rlvr.config import EnvConfig
from rlvr.envs.base import Reply
from rlvr.envs.episodes import make_spec
from rlvr.envs.preflight import STAND_IN, check_environment
from rlvr.errors import RlvrError
from rlvr.tasks import Problem, chat_messages

ROWS = [Problem(question="What is 2 + 3?", answer="5", origin="data.jsonl line 1"),
        Problem(question="What is 7 * 6?", answer="42", origin="data.jsonl line 2"),
        Problem(question="What is 1 + 1?", answer="2", origin="data.jsonl line 3"),
        Problem(question="What is 9 - 9?", answer="0", origin="data.jsonl line 4")]
HERE = __file__


class Base:
    seen: list = []

    def reset(self, problem):
        self.answer = problem.answer
        return chat_messages(problem.question, [])

    def step(self, text):
        Base.seen.append(text)
        return Reply(done=True)

    def reward_columns(self):
        return {}


class RaisesEveryTurn(Base):
    def step(self, text):
        return Reply("Check it.", "user", nonsense=True)   # a TypeError on every turn


class RaisesOnForty(Base):
    def step(self, text):
        if self.answer == "42":
            raise ValueError("no forty-two")
        return Reply(done=True)


class AnswersText(Base):
    def step(self, text):
        return "done"


class ResetRaises(Base):
    def reset(self, problem):
        raise KeyError("level")


class ColumnsRaise(Base):
    def reward_columns(self):
        return {"solved": self.solved}


def spec(tiny, cls):
    return make_spec(EnvConfig(name=f"tests.envs.test_env_preflight:{cls.__name__}", max_turns=2), tiny[1], [])


def line_of(cls, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_an_environment_that_runs_is_stepped_with_each_rows_reference_answer(tiny):
    Base.seen = []
    no_gold = Problem(question="Guess my number.", answer="")   # an environment's own problem: a stand-in answer
    assert check_environment(spec(tiny, Base), [ROWS[0], no_gold, ROWS[1], ROWS[2]], "x:Base") == []
    assert Base.seen == ["Answer: 5", STAND_IN, "Answer: 42"]   # the first three rows


def test_a_step_that_raises_on_every_row_stops_with_the_error_its_file_and_line(tiny):
    with pytest.raises(RlvrError) as e:
        check_environment(spec(tiny, RaisesEveryTurn), ROWS, "envs.py:RaisesEveryTurn")
    said = str(e.value)
    assert said.startswith("the environment (env.name envs.py:RaisesEveryTurn) was tried on the first rows of the "
                           "data before training, and failed:\n  its step failed on 3 of 3 rows tried (each given its "
                           "reference answer), the first, data.jsonl line 1, given 'Answer: 5': "
                           "RaisesEveryTurn.step raised TypeError: ")
    assert f"({HERE}, line {line_of(RaisesEveryTurn, 'nonsense=True')}, in step)" in said
    assert "Traceback (most recent call last)" in said and "Reply(done=True)" in said


def test_a_step_that_fails_on_some_rows_is_a_warning(tiny):
    assert check_environment(spec(tiny, RaisesOnForty), ROWS, "x:RaisesOnForty") == [
        "env.name x:RaisesOnForty: its step failed on 1 of 3 rows tried (each given its reference answer), the first, "
        "data.jsonl line 2, given 'Answer: 42': RaisesOnForty.step raised ValueError: no forty-two "
        f"({HERE}, line {line_of(RaisesOnForty, 'no forty-two')}, in step); those episodes would end at that turn "
        "(end env_error)"]


def test_a_step_that_answers_no_reply_stops(tiny):
    with pytest.raises(RlvrError, match="AnswersText.step answered with str, not a Reply of text; a step answers any "
                                        r"text the model writes with a Reply \(Reply\(text, role\)"):
        check_environment(spec(tiny, AnswersText), ROWS, "x:AnswersText")


@pytest.mark.parametrize("cls, what, text", [(ResetRaises, "ResetRaises.reset raised KeyError: 'level'", "KeyError"),
                                             (ColumnsRaise, "ColumnsRaise.reward_columns (after one step) raised "
                                              "AttributeError: ", "self.solved")])
def test_a_reset_or_reward_columns_that_raises_stops_on_the_first_row(tiny, cls, what, text):
    """In a run these raise out of the rollout, so one row is enough."""
    with pytest.raises(RlvrError) as e:
        check_environment(spec(tiny, cls), ROWS, f"x:{cls.__name__}")
    said = str(e.value)
    assert f"and failed:\n  {what}" in said and "on data.jsonl line 1\n" in said
    assert f"({HERE}, line {line_of(cls, text)}, in " in said


def test_a_trl_environment_whose_reset_raises_is_named_as_before(tiny, tmp_path):
    (tmp_path / "shop.py").write_text("class Shop:\n    def reset(self, **row):\n        raise ValueError('closed')\n\n"
                                      "    def buy(self, item: str) -> str:\n        '''Buy one.\n\n        Args:\n"
                                      "            item: what.\n        '''\n        return item\n")
    env = make_spec(EnvConfig(name=f"{tmp_path / 'shop.py'}:Shop"), tiny[1], [])
    with pytest.raises(RlvrError, match=r"and failed:\n  Shop.reset raised ValueError: closed \(.*shop.py:3\) on "
                                        "data.jsonl line 1"):
        check_environment(env, ROWS, f"{tmp_path / 'shop.py'}:Shop")


def test_a_single_turn_task_has_nothing_to_try(tiny):
    assert check_environment(make_spec(EnvConfig(), tiny[1], []), ROWS, "single") == []
