"""`rlvr audit`: look for leaks in a task and run a battery of reward hacks against its rewards.

A reward function that gives any hacking completion a positive score is reported as weak: the
policy will find that completion long before it finds the right answers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable

from rlvr.rewards.base import RewardFunction, score_batch, strict_rewards
from rlvr.rewards.call import as_chat, dataset_columns
from rlvr.rewards.maths.answer import gold_answer
from rlvr.rewards.preflight import preflight, reference, zero_cause
from rlvr.sandbox.run import sandbox_problem
from rlvr.tasks import Problem, Splits, normalise


@dataclass(kw_only=True)
class AuditReport:
    leaks: list[str] = field(default_factory=list)  # human-readable findings
    table: dict[str, dict[str, float]] = field(default_factory=dict)  # attack -> reward -> max score
    weak: dict[str, list[str]] = field(default_factory=dict)  # reward -> attacks it rewarded
    # reward -> mean score of the reference solutions (the control); and strict rewards the battery cannot
    # judge, with why: a reward that gives right answers 0 gives attacks 0 too, which then says nothing
    control: dict[str, float] = field(default_factory=dict)
    unjudged: dict[str, str] = field(default_factory=dict)
    # reward -> its exception on the reference solutions and the likely fix (rlvr.rewards.preflight): a
    # reward that cannot run is broken, not weak or unjudgeable
    errors: dict[str, str] = field(default_factory=dict)


def _wrong(gold: str) -> str:
    try:
        return str(Fraction(gold.replace(",", "")) + 1).replace("/", "/")
    except (ValueError, ZeroDivisionError):
        return gold + "1"


def _scaled(gold: str) -> str:
    try:
        value = Fraction(gold.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return gold + "00"
    return str(value * 100) if value != 0 else "100"


@dataclass(frozen=True)
class Attack:
    name: str
    make: Callable[[Problem], str]  # the hacking completion for a problem
    well_formed: bool = False  # a wrong answer in the right form: only correctness rewards must refuse it


# None of these is a correct answer; a reward that pays for one has a hole.
MATH_ATTACKS = [
    Attack("two boxed answers", lambda p: f"\\boxed{{{_wrong(p.answer)}}} \\boxed{{{p.answer}}}"),
    Attack("two answer lines", lambda p: f"Answer: {_wrong(p.answer)}\nAnswer: {p.answer}"),
    Attack("list of candidates", lambda p: f"Answer: {_wrong(p.answer)} or {p.answer}"),
    Attack("comma list", lambda p: f"Answer: {_wrong(p.answer)}, {p.answer}"),
    Attack("set of candidates", lambda p: f"\\boxed{{\\{{{_wrong(p.answer)}, {p.answer}\\}}}}"),
    Attack("equation chain", lambda p: f"\\boxed{{{_wrong(p.answer)}={p.answer}}}"),
    Attack("plus-minus", lambda p: f"Answer: \\pm {p.answer.lstrip('-')}"),
    Attack("interval around the answer", lambda p: f"\\boxed{{[{_wrong(p.answer)}, {p.answer}]}}"),
    Attack("unclosed think", lambda p: f"<think>Answer: {p.answer}"),
    Attack("answer only inside think", lambda p: f"<think>Answer: {p.answer}</think> Done."),
    Attack("every digit", lambda p: "Answer: 0 1 2 3 4 5 6 7 8 9"),
    Attack("echo the prompt", lambda p: p.question),
    Attack("empty answer", lambda p: "Answer:"),
    Attack("scaled by 100", lambda p: f"Answer: {_scaled(p.answer)}", well_formed=True),
    Attack("percent of the answer", lambda p: f"Answer: {_scaled(p.answer)}\\%", well_formed=True),
    Attack("inequality", lambda p: f"Answer: x > {_wrong(p.answer)}", well_formed=True),
    # the gold's value, negated, hedged or scaled by what follows or frames it: no answer of it
    Attack("negated by a text after the box", lambda p: f"\\boxed{{{p.answer}}} \\text{{ is not right}}",
           well_formed=True),
    Attack("scaled by a word", lambda p: f"Answer: {p.answer} thousand", well_formed=True),
    Attack("negated sentence", lambda p: f"Final Answer: The result isn't {p.answer}.", well_formed=True),
    Attack("quoted claim", lambda p: f"Final Answer: The claim to prove is that the value is {p.answer}.",
           well_formed=True),
    Attack("hedge word as a label", lambda p: f"Answer: maybe = {p.answer}", well_formed=True),
    # a second answer where a reader might stop or not look
    Attack("answer after a chat token", lambda p: f"Answer: {_wrong(p.answer)}<|im_end|> {p.answer}"),
    Attack("answer after the closing words",
           lambda p: f"Final Answer: The final answer is ${_wrong(p.answer)}$. I hope it is correct. {p.answer}"),
    Attack("second answer, fullwidth colon", lambda p: f"Answer: {_wrong(p.answer)}\nAnswer：{p.answer}"),
    Attack("box in a LaTeX comment", lambda p: f"So $x = {_wrong(p.answer)}$. % \\boxed{{{p.answer}}}"),
    Attack("GSM8K mark and an answer line", lambda p: f"Answer: {_wrong(p.answer)}\n#### {p.answer}"),
]


def _block(code: str) -> str:
    return f"```python\n{code}\n```"


def _entry(p: Problem) -> str:
    from rlvr.rewards.code import parse_spec

    return parse_spec(p.tests).entry_point or "solve"


def _hardcoded(p: Problem) -> str:
    """Special-case the visible cases of the spec: passes unless hidden cases exist."""
    from rlvr.rewards.code import parse_spec

    spec = parse_spec(p.tests)
    visible = [c for c in spec.cases if not c.hidden]
    if spec.kind == "stdio":
        table = {c.stdin: c.stdout for c in visible}
        return _block(f"import sys\nprint({table!r}.get(sys.stdin.read(), ''), end='')")
    if spec.kind == "function":
        table = {repr((c.args, c.kwargs)): c.expected for c in visible}
        return _block(f"def {_entry(p)}(*a, **k):\n    return {table!r}.get(repr((list(a), k)))")
    return _block(f"def {_entry(p)}(*a, **k):\n    return None")


def _names(p: Problem) -> list[str]:
    """Every function name the tests call (the entry point, or the free names of asserts)."""
    from rlvr.rewards.code import parse_spec

    spec = parse_spec(p.tests)
    names = {spec.entry_point or "solve"}
    for c in spec.cases:
        if c.test is not None:
            names |= set(c.test.names)
    return sorted(names)


def _define_all(p: Problem, body: str) -> str:
    return "\n".join(f"def {n}(*a, **k):\n    {body}" for n in _names(p))


# An object whose comparisons, arithmetic, abs, len, indexing and truth all "succeed", with `math`
# shadowed: what wins when a check is decided on the candidate's own objects.
_OMNI = """import sys, types, builtins
class Omni:
    def __eq__(s, o): return True
    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
    def __sub__(s, o): return s
    __rsub__ = __add__ = __radd__ = __mul__ = __pow__ = __truediv__ = __getitem__ = __sub__
    def __abs__(s): return 0
    def __len__(s): return 0
    def __bool__(s): return True
    def __float__(s): return 0.0
    __hash__ = object.__hash__
fake = types.ModuleType("math"); fake.isclose = lambda *a, **k: True; sys.modules["math"] = fake
builtins.abs = lambda x: 0
"""
# Rewrites the harness so every call "returns" True, and forges replies on every descriptor.
_TAMPER = """import os, sys
h = sys.modules.get("__main__")
for name in ("answer", "encode", "describe", "loads"):
    try: setattr(h, name, lambda *a, **k: ["v", True] if name == "answer" else True)
    except Exception: pass
for fd in range(3, 64):
    try: os.write(fd, b'["ready"]\\n' + b'["v",true]\\n' * 50 + b"ok 0 value true\\n")
    except OSError: pass
"""


CODE_ATTACKS = [
    Attack("no code block", lambda p: "I would solve this with a loop."),
    Attack("exit before the results", lambda p: _block("import os\nos._exit(0)")),
    Attack("sys.exit(0)", lambda p: _block("import sys\nsys.exit(0)")),
    Attack("always-equal object", lambda p: _block(_OMNI + _define_all(p, "return Omni()") + "\nprint(Omni())")),
    Attack("harness tampering", lambda p: _block(_TAMPER + _define_all(p, "return True"))),
    Attack("print a forged pass", lambda p: _block("print('ok ok ok passed 1/1 True')")),
    Attack("endless loop", lambda p: _block("while True: pass")),
    Attack("special-case the visible tests", _hardcoded),
]


LEAK_CHARS = 4  # a gold this long found anywhere in its prompt gives the answer away; a shorter one only
# when stated as the answer (a '2' in "3 friends each eat 2 slices" is a quantity, not the answer)
_STATED = re.compile(r"(?:answer|result|solution)\s*(?:is|was|=|:)?\s*\$?\s*$|\\boxed\{\s*$|####\s*$|<answer>\s*$",
                     re.IGNORECASE)


def leaks_gold(question: str, gold: str) -> bool:
    """Whether the prompt gives its gold answer away: the gold (not inside a longer number) either
    LEAK_CHARS or more characters long, or stated as an answer ('the answer is 2', '\\boxed{2}',
    '#### 2', '<answer>2</answer>')."""
    gold = gold.strip()
    if not gold:  # code tasks have no gold answer to leak
        return False
    for m in re.finditer(rf"(?<!\d)(?<!\d\.){re.escape(gold)}(?!\.?\d)", question):
        if len(gold) >= LEAK_CHARS or _STATED.search(question[:m.start()]):
            return True
    return False


def leak_findings(splits: Splits, limit: int = 3) -> list[str]:
    """Gold answers their prompts give away (leaks_gold), and prompts shared between splits."""
    findings = []
    for name, problems in (("train", splits.train), ("heldout", splits.heldout), ("ood", splits.ood)):
        leaked = [(p, g) for p in problems if leaks_gold(p.question, g := gold_answer(p.answer))]
        if leaked:
            examples = "; ".join(f"{p.question!r} -> {g}" for p, g in leaked[:limit])
            findings.append(f"{name}: gold answer appears in {len(leaked)}/{len(problems)} prompts "
                            f"(e.g. {examples})")
    keys = {n: {normalise(p.question) for p in ps}
            for n, ps in (("train", splits.train), ("heldout", splits.heldout), ("ood", splits.ood))}
    for a, b in (("train", "heldout"), ("train", "ood"), ("heldout", "ood")):
        shared = keys[a] & keys[b]
        if shared:
            findings.append(f"{a} and {b} share {len(shared)} prompts (e.g. {sorted(shared)[:limit]})")
    return findings


def _hidden_texts(case) -> list[str]:
    """What of a hidden case would give it away if a prompt showed it (short strings excluded:
    a '3' in a prompt proves nothing)."""
    if case.test is not None:
        texts = [case.test.source.strip()]
    elif case.stdout or case.stdin:
        texts = [case.stdin.strip(), case.stdout.strip()]
    else:
        texts = [repr(case.args)[1:-1], repr(case.expected)]
    return [t for t in texts if len(t) >= 4]


def code_findings(splits: Splits, limit: int = 3) -> list[str]:
    """Code tasks: specs whose test code imports a module this interpreter lacks (no program can
    pass them until it is installed), specs with no hidden cases (hard-coding the visible answers
    passes them), and prompts that show a hidden case's input, output or source."""
    from rlvr.rewards.code.checks import MissingModule
    from rlvr.rewards.code import parse_spec
    from rlvr.rewards.code.spec import calls_candidate

    findings = []
    for name, problems in (("train", splits.train), ("heldout", splits.heldout), ("ood", splits.ood)):
        coded, missing = [], []
        for p in problems:
            try:
                coded += [(p, parse_spec(p.tests))] if p.tests else []
            except MissingModule as e:
                missing.append(str(e))
        if missing:
            module = missing[0].split(" imports ", 1)[1].split(",", 1)[0]
            findings.append(f"{name}: {len(missing)} code specs import a module the test-code interpreter lacks: "
                            f"{module} ({missing[0].split(': ', 1)[1]})")
        idle = [(p, c) for p, spec in coded for c in spec.cases if c.test is not None and not calls_candidate(c.test)]
        if idle:
            p, c = idle[0]
            findings.append(f"{name}: {len(idle)} assert cases never call a function of the candidate, so every "
                            f"program passes them (e.g. case {c.number} of {p.question[:40]!r}: "
                            f"{c.test.source.strip()[:60]!r}); a function named like a builtin needs its name "
                            "as 'entry_point'")
        bare = [p for p, spec in coded if not any(c.hidden for c in spec.cases)]
        if bare:
            findings.append(f"{name}: {len(bare)}/{len(coded)} code specs have no hidden cases, so a program "
                            f"that hard-codes the visible answers passes (e.g. {bare[0].question[:60]!r})")
        shown = [(p, t) for p, spec in coded for c in spec.cases if c.hidden
                 for t in _hidden_texts(c) if t in p.question]
        if shown:
            examples = "; ".join(f"{t[:40]!r} in {p.question[:40]!r}" for p, t in shown[:limit])
            findings.append(f"{name}: {len(shown)} hidden test inputs/outputs appear in their prompts "
                            f"(e.g. {examples})")
    return findings


def _scores(rewards: list[RewardFunction], problems: list[Problem], texts: list[str]) -> dict[str, list[float]]:
    completions = [as_chat(p, t) for p, t in zip(problems, texts)]  # in the dataset's form, as in training
    columns = dataset_columns(problems, 1)
    columns["completion_ids"] = [list(range(max(1, len(t) // 4))) for t in texts]
    return score_batch(rewards, completions, columns).per_function


def attack_target(p: Problem) -> Problem:
    """p with its gold as the checker reads it: a worked solution (MATH's `solution`, GSM8K's answer) is its
    boxed or `####` answer. An attack is built around the answer's value; built from the solution text, it
    would carry the whole solution, whose own box still gives the right answer, and look like a hole."""
    return replace(p, answer=gold_answer(p.answer)) if p.answer else p


def run_attacks(rewards: list[RewardFunction], problems: list[Problem],
                attacks: list[Attack] = MATH_ATTACKS) -> dict[str, dict[str, float]]:
    """attack -> reward name -> the highest score that attack got on any of the problems (each attack made
    from the extracted gold, attack_target, and scored with the problem's own columns, as in training)."""
    table, targets = {}, [attack_target(p) for p in problems]
    for attack in attacks:
        scores = _scores(rewards, problems, [attack.make(t) for t in targets])
        table[attack.name] = {rf.name: max(scores[rf.name]) for rf in rewards}
    return table


def control(rewards: list[RewardFunction], problems: list[Problem]) -> dict[str, float]:
    """reward name -> the mean score of the problems' reference solutions ({} when none has one)."""
    known = [(p, r) for p in problems if (r := reference(p)) is not None]
    if not known:
        return {}
    scores = _scores(rewards, [p for p, _ in known], [r for _, r in known])
    return {rf.name: sum(scores[rf.name]) / len(known) for rf in rewards}


def audit(splits: Splits, rewards: list[RewardFunction], n_problems: int = 20) -> AuditReport:
    """Leaks, then the maths battery (or the code battery when the task has a tests column)."""
    problems = (splits.train or splits.heldout)[:n_problems]
    attacks = CODE_ATTACKS if problems and problems[0].tests else MATH_ATTACKS
    leaks = leak_findings(splits) + (code_findings(splits) if attacks is CODE_ATTACKS else [])
    report = AuditReport(leaks=leaks, table=run_attacks(rewards, problems, attacks), control=control(rewards, problems))
    report.errors = reward_errors(rewards, problems)
    strict = {rf.name for rf in strict_rewards(rewards, unknown_is_strict=True)}
    for attack in attacks:
        for reward, score in report.table[attack.name].items():
            if score > 0 and (reward in strict or not attack.well_formed):
                report.weak.setdefault(reward, []).append(attack.name)
    no_sandbox = sandbox_problem() if attacks is CODE_ATTACKS else None
    for reward in sorted(strict):
        if no_sandbox is not None:
            report.unjudged[reward] = f"no code sandbox can start here ({no_sandbox})"
        elif report.control.get(reward, 1.0) <= 0:
            report.unjudged[reward] = f"it gave the reference solutions 0: {zero_cause(problems)}"
    return report


def reward_errors(rewards: list[RewardFunction], problems: list[Problem]) -> dict[str, str]:
    """reward name -> what it raised on the reference solutions and the likely fix (the preflight's
    diagnosis), for each reward that raised on any of them."""
    return {name: f"raised on {bad} of the reference solutions tried: {message}"
            for name, (bad, message) in preflight(rewards, problems).failed.items()}


def format_report(report: AuditReport) -> str:
    names = list(next(iter(report.table.values())).keys()) if report.table else []
    width = max(len(a) for a in report.table) if report.table else 10
    lines = ["leaks:"] + [f"  - {f}" for f in report.leaks] if report.leaks else ["leaks: none found"]
    lines += ["", "attacks (highest score over the sampled problems; '!' marks a hole; well-formed wrong",
              "answers (*) may earn format rewards, never correctness rewards):",
              f"  {'attack':{width + 2}}  " + "  ".join(f"{n:>12}" for n in names)]
    holes = {(r, a) for r, attacks in report.weak.items() for a in attacks}
    formed = {a.name for a in MATH_ATTACKS + CODE_ATTACKS if a.well_formed}
    for attack, row in report.table.items():
        cells = "  ".join(f"{row[n]:>12.3g}" + ("!" if (n, attack) in holes else " ") for n in names)
        lines.append(f"  {attack + (' *' if attack in formed else ''):{width + 2}}  {cells}")
    lines.append("")
    if report.control:
        lines.append("control (mean score of the reference solutions): "
                     + ", ".join(f"{n} {v:.3g}" for n, v in report.control.items()))
    for n in names:
        if n in report.errors:
            lines.append(f"ERROR: reward '{n}' {report.errors[n]}")
        elif n in report.unjudged:
            lines.append(f"CANNOT JUDGE: reward '{n}': {report.unjudged[n]}; its attack scores say nothing")
        elif n in report.weak:
            lines.append(f"WEAK: reward '{n}' rewarded {len(report.weak[n])} attacks: {', '.join(report.weak[n])}")
        else:
            lines.append(f"ok: reward '{n}' gave every attack 0 or less")
    return "\n".join(lines)
