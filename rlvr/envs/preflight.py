"""An environment tried on a few real rows before anything is written, as the rewards are
(rlvr.rewards.preflight): for each row a fresh environment is reset, takes one step given the row's
reference answer (what the rewards are given: its worked solution, else its gold as a completion; a
stand-in answer where the row has neither), and gives its reward columns. In a run, a step that raises
ends its episode alone (end env_error): an environment that fails on every episode would train to the
end on episodes that teach nothing. Here it stops the run, before the run directory is touched, with the
error, its file and line.

A reset, a constructor or a reward_columns that raises stops the run whatever the row, since in a run it
would end the rollout; a step that raises (or answers with no Reply) stops it when it fails on every row
tried, and is a warning when it fails on some.
"""
from __future__ import annotations

from rlvr.envs.episodes import EnvSpec, raised_in, step_error
from rlvr.errors import RlvrError
from rlvr.rewards.preflight import reference
from rlvr.tasks.base import Problem
from rlvr.text import traceback_text

ROWS = 3  # rows the environment is tried on, as many as each reward
STAND_IN = "Answer: 0"  # the model turn stepped on a row with no reference answer (an environment's own problems)
HEAD = "the environment (env.name {name}) was tried on the first rows of the data before training, and failed:\n  "


def _stop(name: str, what: str, e: BaseException, row: str, env=None) -> RlvrError:
    return RlvrError(HEAD.format(name=name) + f"{what} raised {type(e).__name__}: {e} ({raised_in(e, env)}) on {row}\n"
                     + traceback_text(e))


def check_environment(spec: EnvSpec, problems: list[Problem], name: str) -> list[str]:
    """Try `spec`'s environment (env.name `name`) on up to ROWS of `problems`; raise RlvrError naming the
    call, the error, its file and line (and the traceback) where the run could not go on; return warnings
    for a step that failed on some rows. A single-turn task has no environment of the user's to try."""
    if not spec.multi_turn:
        return []
    failed = []  # (row, what its step said)
    rows = problems[:ROWS]
    for p in rows:
        row = p.origin or repr(p.question[:60])
        try:
            env = spec.make()
        except Exception as e:  # noqa: BLE001 - the class's own bug, named where it is
            raise _stop(name, f"{name}()", e, row) from None
        kind = type(env).__name__
        try:
            env.reset(p)
        except RlvrError as e:  # a TRL-style reset, named with its file and line already (rlvr.envs.base.ToolEnv)
            raise RlvrError(HEAD.format(name=name) + str(e)) from None
        except Exception as e:  # noqa: BLE001
            raise _stop(name, f"{kind}.reset", e, row, env) from None
        answer = reference(p) or STAND_IN
        try:
            reply = env.step(answer)
        except Exception as e:  # noqa: BLE001
            failed.append((row, answer, step_error(env, e), e))
            continue
        wrong = step_error(env, reply=reply)
        if wrong:
            failed.append((row, answer, wrong, None))
            continue
        try:
            env.reward_columns()
        except Exception as e:  # noqa: BLE001 - in a run it raises out of the rollout
            raise _stop(name, f"{kind}.reward_columns (after one step)", e, row, env) from None
    if not failed:
        return []
    row, answer, said, error = failed[0]
    line = (f"its step failed on {len(failed)} of {len(rows)} rows tried (each given its reference answer), "
            f"the first, {row}, given {answer[:80]!r}: {said}")
    if len(failed) < len(rows):
        return [f"env.name {name}: {line}; those episodes would end at that turn (end env_error)"]
    fix = ("; a step answers any text the model writes with a Reply (Reply(text, role) to go on, Reply(done=True) "
           "to end), a turn it cannot read included")
    raise RlvrError(HEAD.format(name=name) + line + fix + (f"\n{traceback_text(error)}" if error else ""))
