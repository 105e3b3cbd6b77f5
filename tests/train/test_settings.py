"""The config is read by the commands and the few builders docs/DESIGN.md names (rlvr/train/settings.py above
all): no function below them takes the Config, so each phase's and engine's signature says what it depends on."""
import ast
import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Where the whole config may be taken, and why (docs/DESIGN.md, "Conventions": the config is read in one place
# per entry point). A module maps to None (every function of it) or to the functions that may.
READERS: dict[str, set[str] | None] = {
    "rlvr/config": None,  # the config itself: building, checking, describing, anchoring and diffing it
    "rlvr/cli.py": None,  # each command's parser and run
    "rlvr/cli_args.py": None,
    "rlvr/api.py": None,  # rlvr.fit: rlvr train from Python
    "rlvr/plan.py": None,  # rlvr plan (PlanSettings.of reads it once; setup prints the plan)
    "rlvr/train/grpo.py": {"start", "train", "_locked", "_joined", "_train"},  # rlvr train
    "rlvr/train/sft.py": {"sft", "_locked"},  # rlvr sft
    "rlvr/eval/suite.py": {"run_eval"},  # rlvr eval
    "rlvr/train/assemble.py": None,  # the builder of a Run: tasks, rewards, models, optimizer, engine, settings
    # each phase's settings; determinism_of: train.deterministic, read before anything starts CUDA
    "rlvr/train/settings.py": {"of", "update_settings", "engine_settings", "eval_settings", "determinism_of"},
}
CONFIG_NAMES = {"cfg", "config"}


def takes_the_config(arg: ast.arg) -> bool:
    """A parameter annotated as the Config, or named as it with no annotation that says it is something else
    (an HF model's config, a section dataclass, a dict of plain values)."""
    if arg.annotation is not None:
        return "Config" in {n.id for n in ast.walk(arg.annotation) if isinstance(n, ast.Name)} or (
            isinstance(arg.annotation, ast.Constant) and str(arg.annotation.value).split("|")[0].strip() == "Config")
    return arg.arg in CONFIG_NAMES


def config_takers(root: Path = ROOT) -> list[str]:
    """'file:function' of every function under root/rlvr outside READERS that takes the Config."""
    found = []
    for path in sorted((root / "rlvr").rglob("*.py")):
        rel = str(path.relative_to(root))
        allowed = next((v for k, v in READERS.items() if rel == k or rel.startswith(k + "/")), set())
        if allowed is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in allowed:
                a = node.args
                if any(takes_the_config(arg) for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]):
                    found.append(f"{rel}:{node.name}")
    return found


def test_no_function_below_the_commands_takes_the_config():
    assert config_takers() == []


def test_the_check_finds_a_function_that_takes_it(tmp_path):
    (tmp_path / "rlvr" / "rollout").mkdir(parents=True)
    (tmp_path / "rlvr" / "rollout" / "engines.py").write_text(
        "def make_engine(cfg, policy): ...\n"            # named as the config, read across its sections
        "def typed(c: Config): ...\n"
        "def quoted(c: 'Config | None'): ...\n"
        "def section(cfg: CodeTestsConfig): ...\n"       # a section or an HF config, typed: fine
        "def hf(model_config): ...\n")
    (tmp_path / "rlvr" / "train").mkdir()
    (tmp_path / "rlvr" / "train" / "settings.py").write_text("def update_settings(cfg): ...\ndef other(cfg): ...\n")
    assert config_takers(tmp_path) == ["rlvr/rollout/engines.py:make_engine", "rlvr/rollout/engines.py:typed",
                                       "rlvr/rollout/engines.py:quoted", "rlvr/train/settings.py:other"]


def config_types(value, seen: set | None = None) -> set[type]:
    """The dataclass types of a config: the Config and every section and subsection it holds."""
    seen = set() if seen is None else seen
    if dataclasses.is_dataclass(value) and type(value) not in seen:
        seen.add(type(value))
        for f in dataclasses.fields(value):
            config_types(getattr(value, f.name), seen)
    return seen


def config_held(value, kinds: set[type], sections: set[str], where: str = "settings") -> list[str]:
    """Where in `value` (a settings object, walked through its dataclasses, tuples and dicts) a config section,
    the Config itself, or a dict of plain values keyed by section names (a whole config as to_dict makes it) is
    held."""
    if type(value) in kinds:
        return [f"{where}: {type(value).__name__}"]
    if isinstance(value, dict) and sections & set(value):
        return [f"{where}: a dict of the config's sections {sorted(sections & set(value))}"]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [m for f in dataclasses.fields(value) for m in config_held(getattr(value, f.name), kinds, sections,
                                                                           f"{where}.{f.name}")]
    if isinstance(value, (tuple, list)):
        return [m for i, v in enumerate(value) for m in config_held(v, kinds, sections, f"{where}[{i}]")]
    return []


def test_no_phase_is_given_a_config_section_or_the_whole_config():
    """Each phase's settings hold the typed values it reads, each once: never a section of the config (the
    update once held the algo and optimizer sections whole) nor the config itself (the trackers' record of it
    once rode in the log settings as a dict; the builder that takes the Config gives it to the trackers)."""
    from rlvr.config import build_config
    from rlvr.train.settings import Settings

    cfg = build_config(None, ["--algo.beta=0.04", "--rollout.weights=int8"])
    kinds, sections = config_types(cfg), {f.name for f in dataclasses.fields(cfg)}
    settings = Settings.of(cfg, stop_ids=[1], pad_id=0, precision="no")
    assert config_held(settings, kinds, sections) == []

    @dataclasses.dataclass
    class Planted:
        algo: object
        record: dict
        parts: tuple

    planted = Planted(algo=cfg.algo, record={"rollout": {}, "seed": 0}, parts=(1, cfg.optimizer))
    assert config_held(planted, kinds, sections) == ["settings.algo: AlgoConfig",
                                                     "settings.record: a dict of the config's sections ['rollout']",
                                                     "settings.parts[1]: OptimizerConfig"]
