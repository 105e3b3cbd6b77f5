"""Run-health rules: each reads the metric history and says, in plain words, what is wrong and what
to try. A rule fires at most once per run; its finding goes to health.jsonl and the report.

Every rule is a pure function (history, evals) -> Finding | None, tested on synthetic streams; the
metric names they read are the metric schema's (rlvr/report/schema.py), and a reward's metric is named
after the run's own rewards (`RewardNames.of`), so a run graded by the user's correctness reward is
judged by it.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

from rlvr.errors import RlvrError
from rlvr.report.console import say
from rlvr.text import clean_reason
from rlvr.rewards.base import strict_rewards
from rlvr.report.schema import reward_metric, reward_of


@dataclass(frozen=True)
class RewardNames:
    """The run's rewards the rules compare: the strict one (the first correctness-checking reward, else
    the user's reward named by eval.grader) and the format reward; None where the run has none."""

    strict: str | None = "correctness"
    form: str | None = "format"

    @staticmethod
    def of(rewards: list, grader=None) -> RewardNames:
        """From a run's reward functions and its evaluation grader (rlvr.eval.grader.Grader)."""
        strict = [rf.name for rf in strict_rewards(rewards)]
        if grader is not None and grader.user:
            strict.append(grader.name)
        form = next((rf.name for rf in rewards if rf.name == "format"), None)
        return RewardNames(strict[0] if strict else None, form)


@dataclass(kw_only=True, frozen=True)
class Finding:
    step: int
    rule: str
    message: str
    evidence: dict
    stop: bool = False  # the run can learn nothing as it is: HealthMonitor.report stops it (HealthStop)


class HealthStop(RlvrError):
    """A finding that stops the run (Finding.stop), its message as the error."""


def _recent(history: list[dict], key: str, n: int) -> list[float] | None:
    """The last n values of a metric, or None if fewer than n steps logged it."""
    vals = [h[key] for h in history if h.get(key) is not None][-n:]
    return vals if len(vals) == n else None


def no_learning_signal(history, evals, window: int = 3, threshold: float = 0.9) -> Finding | None:
    """At least `threshold` of the groups had identical rewards in each of the last `window` steps. Where
    every completion of those steps scored the same (reward/std 0), the problems' difficulty is not the
    cause: a reward that pays every output the same (always 1, a format every output has) or none
    (answers cut off, a reward that cannot pay) teaches nothing, and the message says so; where the same
    reward told this run's completions apart at an earlier step, the samples stopped differing instead."""
    vals = _recent(history, "frac_zero_std_groups", window)
    if not vals or min(vals) < threshold:
        return None
    stds, means = _recent(history, "reward/std", window), _recent(history, "reward/mean", window)
    uniform = stds and means and max(stds) == 0 and len(set(means)) == 1
    varied = [h for h in history[:-window] if (h.get("reward/std") or 0) > 0]
    advice = ("Make the problems easier or harder so some samples pass and some fail (task difficulty, the "
              "curriculum), raise rollout.group_size, or use algo.dynamic_sampling.")
    if uniform and varied:
        ents = [h.get("entropy") for h in (varied[0], history[-1])]
        fell = f" (entropy {ents[0]:.2f} -> {ents[1]:.2f} nats per token)" if None not in ents else ""
        advice = (f"Every completion scored {means[0]:.2f} for {window} steps although scores differed at step "
                  f"{varied[-1]['step']}: the samples stopped differing, the policy collapsed{fell}. Lower "
                  "optimizer.lr, add a KL term (algo.beta) or raise the temperature.")
    elif uniform and means[0] != 0:
        advice = (f"Every completion scored {means[0]:.2f} for {window} steps: the reward does not tell outputs "
                  "apart. A reward that pays every output (always 1, a format any output has) teaches nothing "
                  "and grades every answer right: check it with `rlvr audit CONFIG`.")
    elif uniform:
        advice = (f"Every completion scored 0 for {window} steps. Read samples.jsonl; check the answers are not cut "
                  "off (completion/truncated_frac) and that the reward can pay a right answer (`rlvr audit "
                  "CONFIG`). " + advice)
    return Finding(step=history[-1]["step"], rule="no_learning_signal",
                   message=f"{100 * statistics.fmean(vals):.0f}% of groups had identical rewards for {window} "
                   f"steps: their advantages are zero and the policy gets no gradient. {advice}",
                   evidence={"frac_zero_std_groups": vals, "reward/mean": means})


def truncation(history, evals, window: int = 2, threshold: float = 0.5) -> Finding | None:
    vals = _recent(history, "completion/truncated_frac", window)
    if vals and min(vals) >= threshold:
        return Finding(step=history[-1]["step"], rule="truncation",
                       message=f"{100 * statistics.fmean(vals):.0f}% of completions hit rollout.max_new_tokens: "
                       "a cut-off "
                       "answer ends before its final answer. Raise rollout.max_new_tokens, or add the length reward "
                       "(rewards.weights.length, rewards.soft_overlong) so the model learns to finish.",
                       evidence={"completion/truncated_frac": vals})
    return None


def length_trend(history, evals, window: int = 4, factor: float = 1.6) -> Finding | None:
    """Mean completion length of the first `window` steps against the last `window`, or of the first and
    last halves (two steps each at least) before there are 2 x `window` steps: a length paid for by a
    reward moves in a few steps (a real tiny-random run paid for short answers: 21.5, 20.5, 17.1, 12.1,
    9.2 tokens, said at step 5, where whole windows said it at step 8)."""
    vals = [h["completion/length_mean"] for h in history if h.get("completion/length_mean") is not None]
    window = min(window, len(vals) // 2)
    if window < 2:
        return None
    first, last = statistics.fmean(vals[:window]), statistics.fmean(vals[-window:])
    if first > 0 and last / first >= factor:
        kind, advice = "explosion", ("check no reward pays for length (read samples.jsonl); add a length-aware "
                                     "reward (rewards.soft_overlong) or a KL term (algo.beta), or lower the "
                                     "temperature")
    elif last > 0 and first / last >= factor:
        kind, advice = "collapse", ("check no reward pays for short or empty answers (the format reward, your own "
                                    "rewards: read samples.jsonl); add a KL term (algo.beta)")
    else:
        return None
    return Finding(step=history[-1]["step"], rule=f"length_{kind}",
                   message=f"completion length went from {first:.1f} to {last:.1f} tokens "
                   f"(a sustained {kind}): {advice}.",
                   evidence={"first_window_mean": first, "last_window_mean": last})


def _half_change(vals: list[float]) -> float:
    half = len(vals) // 2
    return statistics.fmean(vals[half:]) - statistics.fmean(vals[:half])


def reward_hacking(history, evals, min_steps: int = 6, rise: float = 0.1, names: RewardNames = RewardNames()
                   ) -> Finding | None:
    rewards = [h["reward/mean"] for h in history if h.get("reward/mean") is not None]
    if len(rewards) < min_steps:
        return None
    acc = [e["heldout_accuracy"] for e in evals if e.get("heldout_accuracy") is not None]
    if _half_change(rewards) >= rise and len(acc) >= 2 and acc[-1] - acc[0] <= 0:
        return Finding(step=history[-1]["step"], rule="suspected_reward_hacking",
                       message=f"training reward rose by {_half_change(rewards):.2f} while held-out accuracy went from "
                       f"{100 * acc[0]:.0f}% to {100 * acc[-1]:.0f}%: the policy may be exploiting the reward. "
                       "Read samples.jsonl, run `rlvr audit`, harden the verifier (hidden tests, stricter parsing).",
                       evidence={"reward_change": _half_change(rewards), "heldout_accuracy": acc})
    # the format reward's own rise, not the total's: at the default weight (0.2) a format rise of 0.45 moves
    # reward/mean by 0.09 only
    if names.form is None or names.strict is None:
        return None
    fmt = [h.get(reward_metric(names.form)) for h in history]
    cor = [h.get(reward_metric(names.strict)) for h in history]
    if None not in fmt and None not in cor and _half_change(fmt) >= 2 * rise and _half_change(cor) < 0.02:
        return Finding(step=history[-1]["step"], rule="suspected_reward_hacking",
                       message=f"the format reward rose by {_half_change(fmt):.2f} while correctness did not "
                       f"({_half_change(cor):+.2f}): the model is learning the form, not the answers. "
                       "Lower the format weight or audit the samples.",
                       evidence={"format_change": _half_change(fmt), "correctness_change": _half_change(cor)})
    return None


def skill_regression(history, evals, drop: float = 0.03, broken_share: float = 0.05, min_broken: int = 3
                     ) -> Finding | None:
    """Skill lost while the score goes up (strict accuracy can rise by learning the answer line alone):
    format-free accuracy on a split down by `drop` or more since the first evaluation, or at least
    `broken_share` of its problems (and `min_broken`) right before training and wrong now (and the format-free
    gain smaller than that share), while strict accuracy or the training reward rose.

    Greedy evaluation is deterministic, so every broken problem is a real change of the model. The
    thresholds leave room for the churn of a sound run (the chain_sum demo broke 2 of 100) and catch
    every configs/arithmetic.yaml run measured (10 to 20 of 100 broken, format-free down 7 to 16
    points)."""
    rewards = [h["reward/mean"] for h in history if h.get("reward/mean") is not None]
    reward_up = len(rewards) >= 4 and _half_change(rewards) > 0
    for split, label in (("heldout", "held-out"), ("ood", "OOD")):
        rows = [e for e in evals if e.get(f"{split}_lenient") is not None]
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        strict = (first[f"{split}_accuracy"], last[f"{split}_accuracy"])
        if not (strict[1] > strict[0] or reward_up):
            continue
        free = (first[f"{split}_lenient"], last[f"{split}_lenient"])
        broken, fixed = last.get(f"{split}_broken"), last.get(f"{split}_fixed")
        n = sum(last.get(f"{split}_{k}") or 0 for k in ("fixed", "broken", "kept", "never"))
        # many broken, and not outweighed: a run that fixes far more than it breaks is gaining skill
        many_broken = broken is not None and broken >= max(min_broken, broken_share * n) \
            and free[1] - free[0] < broken / n
        if free[1] - free[0] > -drop and not many_broken:
            continue
        flipped = f" ({broken} of {n} problems right before training are wrong now, {fixed} fixed)" \
            if broken is not None else ""
        return Finding(step=last["step"], rule="skill_regression",
                       message=f"{label} accuracy graded format-free went from {100 * free[0]:.0f}% to "
                       f"{100 * free[1]:.0f}%"
                       f"{flipped} while strict accuracy went from {100 * strict[0]:.0f}% to {100 * strict[1]:.0f}%"
                       f"{' and the reward rose' if reward_up else ''}: the run is teaching the answer form and "
                       "losing skill. Read the broken examples (summary.json `flips`, report.html). Compare "
                       "the training problems (`rlvr eval --split train --baseline BASE`): if they improved "
                       "while held-out ones broke, a small problem space is being memorised; train on more "
                       "varied problems, lower optimizer.lr, or stop earlier. Lowering the format weight helps "
                       "when well-formed wrong answers outscore right ones in another form.",
                       evidence={"split": split, "lenient": list(free), "accuracy": list(strict), "broken": broken,
                        "fixed": fixed, "n": n})
    return None


def no_transfer(history, evals, gain: float = 0.1, moved: float = 0.02) -> Finding | None:
    """Gains confined to the training distribution: held-out strict accuracy rose by `gain` or more since
    the first evaluation while OOD strict accuracy (task.ood_params, evaluated at the ends) rose by less
    than `moved`, where it had room to. The demo's OOD rose 4 to 11 points in every run measured."""
    rows = [e for e in evals if e.get("heldout_accuracy") is not None and e.get("ood_accuracy") is not None]
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    held = last["heldout_accuracy"] - first["heldout_accuracy"]
    ood = last["ood_accuracy"] - first["ood_accuracy"]
    if held < gain or ood >= moved or first["ood_accuracy"] > 1 - moved:
        return None
    return Finding(step=last["step"], rule="no_transfer",
                   message=f"held-out accuracy went from {100 * first['heldout_accuracy']:.0f}% to "
                   f"{100 * last['heldout_accuracy']:.0f}% but OOD from {100 * first['ood_accuracy']:.0f}% to "
                   f"{100 * last['ood_accuracy']:.0f}%: the gains stay inside the training distribution. Read "
                   "the OOD samples (report.html); train on a wider range of problems (task.params) or a "
                   "curriculum toward the OOD ones; check the held-out gain is the skill and not the problems "
                   "remembered (`rlvr eval --split train --baseline BASE`).",
                   evidence={"heldout_accuracy": [first["heldout_accuracy"], last["heldout_accuracy"]],
                             "ood_accuracy": [first["ood_accuracy"], last["ood_accuracy"]]})


def kl_blowup(history, evals, kl_max: float = 1.0) -> Finding | None:
    h = history[-1]
    if h.get("kl") is not None and h["kl"] > kl_max:
        return Finding(step=h["step"], rule="kl_blowup",
                       message=f"KL to the reference is {h['kl']:.2f} per token: the policy is "
                       "running away. Lower optimizer.lr, raise algo.beta, or clip harder.", evidence={"kl": h["kl"]})
    return None


def ratio_blowup(history, evals, ratio_max: float = 10.0) -> Finding | None:
    h = history[-1]
    if h.get("ratio/max") is not None and h["ratio/max"] > ratio_max:
        return Finding(step=h["step"], rule="ratio_blowup",
                       message=f"an importance ratio reached {h['ratio/max']:.1f}: updates "
                       "are far off-policy. Lower optimizer.lr or algo.iterations.",
                       evidence={"ratio/max": h["ratio/max"]})
    return None


def entropy_collapse(history, evals, entropy_min: float = 0.02) -> Finding | None:
    ents = _recent(history, "entropy", 3)
    if ents and max(ents) < entropy_min:
        return Finding(step=history[-1]["step"], rule="entropy_collapse",
                       message=f"policy entropy is {ents[-1]:.3f} nats per token: sampling "
                       "has become nearly greedy and groups stop differing. Raise the temperature, add "
                       "algo.entropy_coef, or lower optimizer.lr.", evidence={"entropy": ents})
    return None


def non_finite(history, evals) -> Finding | None:
    h = history[-1]
    loss = h.get("loss")
    if h.get("skipped_nonfinite_weights", 0) > 0:
        return Finding(step=h["step"], rule="non_finite",
                       message=f"the update made weights non-finite (inf or NaN) although the loss and gradient "
                       f"were finite: optimizer.lr={h.get('lr')} is too large. The update was undone, not applied. "
                       "Lower optimizer.lr.", evidence={"lr": h.get("lr")})
    if h.get("skipped_updates", 0) > 0 or (loss is not None and not math.isfinite(loss)):
        return Finding(step=h["step"], rule="non_finite",
                       message="the loss or gradient was not finite; the update was skipped, "
                       "not applied. If it repeats, lower optimizer.lr or use float32.", evidence={"loss": loss})
    return None


def reward_errors(history, evals, rate: float = 0.05) -> Finding | None:
    h = history[-1]
    n = max(h.get("completions", 0), 1)
    bad = {k: v for k, v in h.items() if reward_of(k, "errors") is not None and v / n > rate}
    if bad:
        name = reward_of(next(iter(bad)), "errors")
        return Finding(step=h["step"], rule="reward_errors", message=f"reward function '{name}' raised or timed out on "
                       f"{100 * bad[next(iter(bad))] / n:.0f}% of completions (they score 0). Fix it, or raise "
                       "its limits.", evidence=bad)
    return None


def special_casing(history, evals, window: int = 3, rise: float = 0.1, floor: float = 0.2
                        ) -> Finding | None:
    """Code: the share of completions that pass every visible example of the prompt but fail a hidden
    test (code/visible_only_frac) rose by `rise` or more, first window to last, and is at least `floor`."""
    vals = [h["code/visible_only_frac"] for h in history if h.get("code/visible_only_frac") is not None]
    if len(vals) < 2 * window:
        return None
    first, last = statistics.fmean(vals[:window]), statistics.fmean(vals[-window:])
    if last - first < rise or last < floor:
        return None
    return Finding(step=history[-1]["step"], rule="test_special_casing",
                   message=f"{100 * last:.0f}% of completions now pass the visible examples but fail a hidden "
                   "test (was "
                   f"{100 * first:.0f}%): the model may be special-casing the examples in the prompt instead of "
                   "solving the problem. Read samples.jsonl for branches on the example inputs; show fewer or "
                   "varied examples, keep more cases hidden, and check held-out pass@1 (hidden tests only).",
                   evidence={"first_window_mean": first, "last_window_mean": last})


def tool_use_collapse(history, evals, window: int = 3, floor: float = 0.2, zero: float = 0.02, flat: float = 0.05
                      ) -> Finding | None:
    """Multi-turn: at least `floor` of episodes called a tool over the first `window` steps, at most
    `zero` in each of the last `window`, and reward/mean rose by less than `flat` between the two
    windows. The model learned to skip the tools instead of using them well, a known failure of
    multi-turn RL; a rise in reward would instead mean it no longer needed them."""
    rows = [h for h in history if h.get("env/tool_use_frac") is not None and h.get("reward/mean") is not None]
    if len(rows) < 2 * window:
        return None
    use = [h["env/tool_use_frac"] for h in rows]
    reward = [h["reward/mean"] for h in rows]
    first, last = statistics.fmean(use[:window]), use[-window:]
    change = statistics.fmean(reward[-window:]) - statistics.fmean(reward[:window])
    if first < floor or max(last) > zero or change >= flat:
        return None
    return Finding(step=rows[-1]["step"], rule="tool_use_collapse",
                   message=f"{100 * first:.0f}% of episodes called a tool over the first {window} steps, at most "
                   f"{100 * max(last):.0f}% over the last {window}, and the reward changed by {change:+.2f}: "
                   "the model stopped calling the tools and the reward did not rise, so it learned to skip "
                   "them (a known failure of multi-turn RL). Check the calls worked (env/tool_errors_frac, the "
                   "tool results in samples.jsonl); show a worked tool-use turn in the prompt; make correct "
                   "answers reachable only with the tool; lower optimizer.lr or add a KL term (algo.beta).",
                   evidence={"first_window_tool_use": first, "last_window_tool_use": last, "reward_change": change})


def tool_errors(history, evals, window: int = 3, rate: float = 0.5, min_calls: int = 10) -> Finding | None:
    """Multi-turn: in each of the last `window` steps at least `rate` of the tool calls failed, over at
    least `min_calls` calls in all (env/tool_calls_mean x completions) when "completions" is logged,
    so that a rare call failing once or twice does not fire."""
    rows = [h for h in history if h.get("env/tool_errors_frac") is not None][-window:]
    if len(rows) < window or min(h["env/tool_errors_frac"] for h in rows) < rate:
        return None
    calls = None
    if all(h.get("completions") is not None and h.get("env/tool_calls_mean") is not None for h in rows):
        calls = sum(h["env/tool_calls_mean"] * h["completions"] for h in rows)
        if calls < min_calls:
            return None
    vals = [h["env/tool_errors_frac"] for h in rows]
    counted = f" ({calls:.0f} calls)" if calls is not None else ""
    return Finding(step=rows[-1]["step"], rule="tool_errors",
                   message=f"{100 * statistics.fmean(vals):.0f}% of tool calls failed over the last {window} steps"
                   f"{counted}: most tool calls fail (a malformed call, an unknown tool, or a tool that "
                   "raised), so the episodes teach little about using the tool. Read the tool results in "
                   "samples.jsonl or report.html, and check the tool-call format the prompt shows matches "
                   "the documented one.",
                   evidence={"env/tool_errors_frac": vals, "calls": calls})


@dataclass
class Noted:
    """What a run's records said that no metric holds, for the rules that say it (HealthMonitor.note)."""

    env_error: str = ""  # the run's first environment error (an episode record's "error")


def env_errors(history, evals, noted: Noted | None = None, most: float = 0.5) -> Finding | None:
    """Multi-turn: more than `most` of a step's episodes ended with the environment's step raising or
    answering with no Reply (env/end/env_error_frac), said with the run's first such error (`noted`). Every episode of the run's first step: the run
    stops, the environment answering none of this model's turns (the preflight, rlvr/envs/preflight.py,
    stops one that fails on the reference answers too; this one fails on what the model writes)."""
    rows = [h for h in history if h.get("env/end/env_error_frac") is not None]
    if not rows or rows[-1]["env/end/env_error_frac"] <= most:
        return None
    frac, step = rows[-1]["env/end/env_error_frac"], rows[-1]["step"]
    first = clean_reason(noted.env_error) if noted else ""  # it may quote the model's text: an error is not escaped
    stop = frac == 1.0 and len(rows) == 1
    what = (f"every episode of step {step} ended with an environment error (env/end/env_error_frac 1.0), so the "
            "run stops: nothing would be learned" if stop else f"{100 * frac:.0f}% of the episodes of step {step} "
            "ended with an environment error (env/end/env_error_frac), each at that turn")
    return Finding(step=step, rule="env_errors", stop=stop, evidence={"env/end/env_error_frac": frac},
                   message=f"{what}. {f'The first: {first}. ' if first else ''}Make the environment's step answer "
                   "any text the model writes with a Reply (a turn it cannot read too); samples.jsonl holds each "
                   "episode's error.")


RULES: list[Callable] = [no_learning_signal, truncation, length_trend, reward_hacking, skill_regression, no_transfer,
                         kl_blowup, ratio_blowup, entropy_collapse, non_finite, reward_errors, special_casing,
                         tool_use_collapse, tool_errors, env_errors]


def rules_for(names: RewardNames, noted: Noted | None = None) -> list[Callable]:
    """RULES, those that read a reward's metric told the run's reward names, env_errors what the run noted."""
    bound = {reward_hacking: {"names": names}, env_errors: {"noted": noted}}
    return [functools.partial(rule, **bound[rule]) if rule in bound else rule for rule in RULES]


class HealthMonitor:
    """Runs every rule after each step; each rule fires once per run. `noted`: what the run's records said
    that no metric holds (note), for the rules that say it."""

    def __init__(self, rules: list[Callable] | None = None, names: RewardNames = RewardNames()):
        self.noted = Noted()
        self.rules, self.fired, self.findings = rules if rules is not None else rules_for(names, self.noted), set(), []

    def note(self, env_error: str | None) -> None:
        """A step's first environment error (rlvr.envs.episode_metrics.first_error); the run's first is kept."""
        self.noted.env_error = self.noted.env_error or env_error or ""

    def check(self, history: list[dict], evals: list[dict]) -> list[Finding]:
        new = []
        for rule in self.rules:
            f = rule(history, evals)
            if f is not None and f.rule not in self.fired:
                self.fired.add(f.rule)
                new.append(f)
        self.findings += new
        return new

    def report(self, history: list[dict], evals: list[dict], sink, when: str = "") -> None:
        """check(), then write each new finding to `sink` (health.jsonl) and say it on the console; a finding
        that stops the run is raised instead of said (HealthStop), once the others are written."""
        stop = None
        for f in self.check(history, evals):
            sink.write(as_record(f))
            if f.stop:
                stop = stop or f
            else:
                say(f"health [{f.rule}] {when or f'at step {f.step}'}: {f.message}")
        if stop is not None:
            raise HealthStop(f"health [{stop.rule}] at step {stop.step}: {stop.message}")


def as_record(f: Finding) -> dict:
    """A finding as health.jsonl's line; `stop` only where it stopped the run."""
    return {k: v for k, v in asdict(f).items() if k != "stop" or v}
