"""`rlvr eval` of what a run saved scores the model the run evaluated: a full, a LoRA and a QLoRA run's final/ (and
the QLoRA adapter on its base) give the greedy answers of the run's own final evaluation; a baseline is evaluated
as it is named, in 4 bits only when --model.quantize asks (rlvr/saved_model.py, rlvr/eval/suite.py)."""
import json
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from tests.conftest import read_jsonl

pytest.importorskip("peft")

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
KINDS = {"full": ["--train.save_every=0"], "lora": ["--model.lora.r=4", "--train.save_every=0"],
         "qlora": ["--model.lora.r=4", "--model.quantize=nf4", "--train.save_every=1"]}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    """tiny-random's shape with weights drawn 15 times wider (initializer_range 0.3): tiny-random itself answers
    every prompt with the same repeated character, so no model could be told from another by its answers; these
    differ by prompt, by a training step and by 4-bit rounding, with top-two logit gaps near 1."""
    from transformers import AutoModelForCausalLM

    from rlvr.models import tiny_config, tiny_tokenizer

    tok = tiny_tokenizer()
    config = tiny_config(tok=tok)
    config.initializer_range = 0.3
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    path = tmp_path_factory.mktemp("base") / "wide"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def run_args(base: str, kind: str) -> list[str]:
    return [ARITHMETIC, f"--model.name={base}", *KINDS[kind], "--task.heldout_size=6", "--task.ood_size=2",
            "--rollout.prompts_per_step=2", "--rollout.group_size=3", "--rollout.max_new_tokens=6",
            "--eval.max_new_tokens=6", "--train.steps=1", "--optimizer.lr=3e-2", "--optimizer.warmup_steps=0",
            "--rewards.weights={'tests.e2e.test_tiny_run:varied_reward': 1.0}"]


def answers(run: Path, tag: str) -> list[str]:
    """The greedy held-out completions of the run's evaluation before or after training."""
    return [r["completion"] for r in read_jsonl(run / f"eval_{tag}.jsonl") if r["split"] == "heldout"]


def evaluated(out: Path, *args: str) -> tuple[dict, list[str], list[str]]:
    """`rlvr eval ARGS --k 1 --out OUT`: eval.json, the model's greedy completions and the baseline's."""
    assert main(["eval", *args, "--k", "1", "--out", str(out)]) == 0
    base = out / "baseline_samples.jsonl"
    return (json.loads((out / "eval.json").read_text()), [r["greedy"] for r in read_jsonl(out / "samples.jsonl")],
            [r["greedy"] for r in read_jsonl(base)] if base.is_file() else [])


@pytest.mark.parametrize("kind", list(KINDS))
def test_eval_of_a_runs_final_gives_the_runs_own_final_answers_and_the_baseline_unquantised(
        kind, trained, base, tmp_path):
    """`rlvr eval RUN/config.yaml --model RUN/final --baseline BASE`: the model's answers are those of the run's
    final evaluation (eval_after.jsonl, the accuracy of evals.jsonl's last row), which differ from the base's; the
    baseline's are the full-precision base's (the full run's evaluation before training), the QLoRA run's
    model.quantize=nf4 notwithstanding."""
    run, full = trained(*run_args(base, kind)), trained(*run_args(base, "full"))
    doc, model, baseline = evaluated(tmp_path / "ev", str(run / "config.yaml"), "--model", str(run / "final"),
                                     "--baseline", base)
    assert model == answers(run, "after") != answers(run, "before")
    assert doc["pass@1"] == read_jsonl(run / "evals.jsonl")[-1]["heldout_accuracy"]
    assert baseline == answers(full, "before")
    assert doc["loaded"] == ("a full fine-tune" if kind == "full" else "LoRA adapters merged into their base") + \
        ", saved in float32: loaded in float32, unquantised"
    assert doc["baseline"]["loaded"] == "loaded in float32, unquantised"


def test_a_qlora_adapter_on_its_4bit_base_is_final_and_4_bits_are_for_when_asked(trained, base, tmp_path, capsys):
    """The QLoRA run's final/adapter, evaluated alone, is loaded on the base as it was trained on (NF4-rounded,
    dequantised) and gives final/'s answers, as does its last checkpoint (merged as final/ is); --model.quantize=nf4
    quantises every model evaluated: the base then answers as in the run's evaluation before training (its 4-bit
    base), and final/ quantised a second time loses what the adapters learned (the answers `rlvr eval` gave
    before models loaded as saved)."""
    run = trained(*run_args(base, "qlora"))
    config = str(run / "config.yaml")
    assert evaluated(tmp_path / "step", config, "--model", str(run / "checkpoints" / "step_000001.pt"))[1] == \
        answers(run, "after")
    doc, model, _ = evaluated(tmp_path / "adapter", config, "--model", str(run / "final" / "adapter"))
    assert model == answers(run, "after")
    assert doc["loaded"] == (f"the adapter merged onto {Path(base).resolve()} as it was trained on (nf4, dequantised), "
                             "in float32")
    err = capsys.readouterr().err
    assert ("note: the config's model.quantize=nf4 is not applied: each model loads as it was saved (a run's final/ "
            "is unquantised); --model.quantize=nf4 evaluates them in 4 bits") in err

    doc, model, baseline = evaluated(tmp_path / "nf4", config, "--model", str(run / "final"), "--baseline", base,
                                     "--model.quantize=nf4")
    assert baseline == answers(run, "before")
    assert model != answers(run, "after")
    assert doc["baseline"]["loaded"] == "loaded in float32, quantised to nf4 (--model.quantize)"
    assert "is not applied" not in capsys.readouterr().err


def test_lora_final_adapter_names_its_base_and_loads_with_peft(trained, base):
    """A LoRA run from a model directory: final/ is the merged model, and final/adapter/ a PEFT directory whose
    adapter_config.json names the directory, so PeftModel.from_pretrained(base, adapter) gives the merged
    model's outputs; its model card names the base and the way to load the pair."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = trained(*run_args(base, "lora"))
    config = json.loads((run / "final" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(base).resolve())
    merged = AutoModelForCausalLM.from_pretrained(run / "final")
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                        run / "final" / "adapter")
    ids = torch.tensor([[5, 9, 13, 2, 7]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted(ids).logits, atol=1e-5)
        assert not torch.allclose(merged(ids).logits, AutoModelForCausalLM.from_pretrained(base)(ids).logits)
    card = (run / "final" / "adapter" / "README.md").read_text()
    assert f"Base model: `{Path(base).resolve()}` (model.name)" in card and "PeftModel.from_pretrained" in card
