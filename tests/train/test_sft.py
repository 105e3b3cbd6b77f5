"""Supervised fine-tuning: the loss mask, the loss, that steps learn, and the whole `rlvr sft` run."""
import copy
import json
import math
import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.models import stop_token_ids
from rlvr.tasks.base import Problem, Splits
from rlvr.train import sft as sft_module
from rlvr.train.optim import adamw, warmup_scheduler
from rlvr.train.rundir import LOCK, RunLock
from rlvr.train.sft import baseline_of, collate, end_of_turn_id, make_example, sft_step, target_nll

SOLVED = [Problem(question=f"What is {a} + {b}?", answer=str(a + b), difficulty="d1",
                  solution=f"{a} + {b} = {a + b}\nAnswer: {a + b}")
          for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (6, 3), (4, 0)]]


def test_end_of_turn_is_im_end(tiny):
    model, tok = tiny
    assert end_of_turn_id(tok, stop_token_ids(model, tok)) == tok.convert_tokens_to_ids("<|im_end|>") == 3


def test_loss_mask_covers_exactly_the_solution_and_the_stop_token(tiny):
    _, tok = tiny
    long, short = (make_example(tok, p, [], "", 3) for p in (SOLVED[0],
                                                             Problem(question="Hi?", answer="1", solution="1")))
    # the tiny tokenizer is one token per character: "<|im_start|>" "user\n" question "<|im_end|>" "\n"
    # "<|im_start|>" "assistant\n" is 1 + 5 + 14 + 1 + 1 + 1 + 10 = 33 prompt tokens
    assert len(long.prompt) == 33 and len(long.target) == len("1 + 2 = 3\nAnswer: 3") + 1 == 20
    ids, attention, mask = collate([long, short], pad_id=0)
    assert ids.shape == (2, 53)
    assert mask[0].tolist() == [0.0] * 33 + [1.0] * 20
    n_short = len(short.prompt)  # 1 + 5 + 3 + 3 + 10 = 22
    assert n_short == 22 and mask[1].tolist() == [0.0] * 22 + [1.0, 1.0] + [0.0] * 29
    assert attention[1].tolist() == [1] * 24 + [0] * 29  # right-padded
    assert ids[1, 24:].tolist() == [0] * 29
    assert tok.decode(ids[0][mask[0] == 1]) == "1 + 2 = 3\nAnswer: 3<|im_end|>"
    assert tok.decode(ids[1][mask[1] == 1]) == "1<|im_end|>"


def test_target_nll_by_hand():
    ids = torch.tensor([[0, 1, 0]])  # [B=1, T=3]
    assert target_nll(torch.zeros(1, 3, 2), ids, torch.tensor([[0.0, 1.0, 1.0]])).item() == pytest.approx(
        2 * math.log(2))
    # position 1 is predicted from logits at position 0: p(token 1) = 3 / (1 + 3)
    logits = torch.tensor([[[0.0, math.log(3)], [5.0, -5.0], [0.0, 0.0]]])
    assert target_nll(logits, ids, torch.tensor([[0.0, 1.0, 0.0]])).item() == pytest.approx(-math.log(0.75))


def batch_loss(model, examples, pad_id):
    ids, attention, mask = collate(examples, pad_id)
    with torch.no_grad():
        return (target_nll(model(input_ids=ids, attention_mask=attention).logits, ids, mask) / mask.sum()).item()


def test_micro_batches_give_the_full_batch_loss_and_gradient(tiny):
    model, tok = tiny
    examples = [make_example(tok, p, [], "", 3) for p in SOLVED[:4]]
    whole, parts = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    a = sft_step(whole, torch.optim.SGD(whole.parameters(), lr=0.0), examples, 0, micro=4, max_grad_norm=0)
    b = sft_step(parts, torch.optim.SGD(parts.parameters(), lr=0.0), examples, 0, micro=1, max_grad_norm=0)
    assert a["tokens"] == b["tokens"] == sum(len(e.target) for e in examples)
    assert a["loss"] == pytest.approx(batch_loss(model, examples, 0), rel=1e-5)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)


def test_a_few_steps_lower_the_loss(tiny):
    model, tok = tiny
    model.train()
    examples = [make_example(tok, p, [], "", 3) for p in SOLVED[:4]]
    before = batch_loss(model, examples, 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(8):
        sft_step(model, optimizer, examples, 0, micro=2, max_grad_norm=1.0)
    assert batch_loss(model, examples, 0) < 0.7 * before


def test_rlvr_sft_trains_bf16_weights_through_fp32_masters(tmp_path, monkeypatch):
    """rlvr sft takes its AdamW from the same adamw() as rlvr train: bf16 weights get fp32 masters there too,
    and the loss falls over its steps (lr 1e-2 on tiny-random)."""
    from rlvr.train.optim import MasterAdamW

    made = []

    def recording(*args, **kwargs):
        made.append(adamw(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sft_module, "build_splits", hand_made(SOLVED[:4]))  # the data source only
    monkeypatch.setattr(sft_module, "adamw", recording)
    out = tmp_path / "sft"
    assert main(["sft", *SMALL, "--model.dtype=bfloat16", "--train.steps=8", "--optimizer.lr=1e-2",
                 "--optimizer.warmup_steps=0", "--eval.before=false", "--eval.after=false", f"--train.out={out}"]) == 0
    (opt,) = made
    assert isinstance(opt, MasterAdamW) and {p.dtype for p, _ in opt.pairs} == {torch.bfloat16}
    assert {m.dtype for _, m in opt.pairs} == {torch.float32} and len(opt.inner.state) == len(opt.pairs)
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 8 and losses[-1] < 0.7 * losses[0], losses


def test_warmup_is_linear_then_constant_per_group():
    w, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    optimizer = adamw([{"params": [w], "lr": 0.3}, {"params": [b], "lr": 0.03}], weight_decay=0.1)
    assert optimizer.defaults["weight_decay"] == 0.1 and optimizer.defaults["fused"]
    scheduler = warmup_scheduler(optimizer, 3)
    lrs = []
    for _ in range(5):
        lrs.append(scheduler.get_last_lr())
        optimizer.step()
        scheduler.step()
    # step s runs at min(1, (s + 1) / 3) of each group's lr
    assert lrs == [pytest.approx(x) for x in ([0.1, 0.01], [0.2, 0.02], [0.3, 0.03], [0.3, 0.03], [0.3, 0.03])]
    assert warmup_scheduler(adamw([{"params": [w], "lr": 0.3}], 0.0), 0).get_last_lr() == [0.3]


SMALL = ["--model.name=tiny-random", "--train.steps=3", "--sft.batch_size=4", "--optimizer.micro_batch_prompts=2",
         "--optimizer.lr=1e-3", "--eval.max_new_tokens=4", "--eval.batch_size=4"]


def hand_made(problems):
    return lambda task: Splits(train=problems, heldout=SOLVED[4:], ood=SOLVED[5:], few_shot=[])


@pytest.mark.slow
def test_rlvr_sft_writes_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(sft_module, "build_splits", hand_made(SOLVED[:4]))  # the data source only
    out = tmp_path / "sft"
    assert main(["sft", *SMALL, f"--train.out={out}"]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert {"loss", "tokens", "lr", "grad_norm", "time/step_s"} <= set(metrics[0])
    assert metrics[0]["tokens"] == 4 * 20  # four solutions of 19 characters plus <|im_end|>
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "sft" and summary["steps"] == 3 and summary["examples"] == 4
    for k in ("heldout_accuracy", "ood_accuracy", "heldout_format", "ood_format"):
        assert 0 <= summary[f"{k}_before"] <= 1 and 0 <= summary[f"{k}_after"] <= 1
    assert "batch_size: 4" in (out / "config.yaml").read_text().split("sft:")[1]
    assert len((out / "eval_after.jsonl").read_text().splitlines()) == 2 + 1
    flips = summary["flips"]["heldout"]
    assert flips["n"] == 2 and flips["fixed"] + flips["broken"] + flips["kept"] + flips["never"] == 2
    assert summary["decomposition"]["heldout"]["text"].endswith(f"broken of 2)")
    AutoModelForCausalLM.from_pretrained(out / "final")
    base = baseline_of(str(out / "final"))
    keys = ("heldout_accuracy", "heldout_format", "heldout_lenient", "ood_accuracy", "ood_format", "ood_lenient")
    assert base == {"run": str(out), **{k: summary[f"{k}_after"] for k in keys},
                    **{f"base_{k}": summary[f"{k}_before"] for k in keys}}
    grpo = tmp_path / "grpo"  # GRPO from the SFT model: its report shows the SFT baseline
    assert main(["train", "configs/smoke.yaml", f"--model.name={out / 'final'}", f"--train.out={grpo}"]) == 0
    grpo_summary = json.loads((grpo / "summary.json").read_text())
    assert grpo_summary["sft"] == base
    assert "SFT baseline" in (grpo / "report.html").read_text()


def test_sft_batch_is_its_own_setting_and_an_overwrite_clears_an_earlier_runs_records(tmp_path, monkeypatch, capsys):
    """sft.batch_size, not rollout.prompts_per_step, is the batch; the run directory is set up as rlvr
    train sets it up (rlvr.train.checkpoint): refused while it holds anything, and with train.overwrite an
    earlier run's samples, health records and checkpoints are gone."""
    monkeypatch.setattr(sft_module, "build_splits", hand_made(SOLVED[:4]))
    out = tmp_path / "sft"
    (out / "checkpoints").mkdir(parents=True)
    for stale in ("samples.jsonl", "health.jsonl", "report.html", "checkpoints/step_000001.pt"):
        (out / stale).write_text("an earlier run's\n")
    argv = ["sft", *SMALL, "--sft.batch_size=2", "--rollout.prompts_per_step=4", "--train.steps=1",
            "--eval.before=false", "--eval.after=false", f"--train.out={out}"]
    assert main(argv) == 2
    assert (f"{out} already holds files (checkpoints, health.jsonl, report.html, samples.jsonl) and nothing in it "
            "was changed: choose another directory with --train.out=DIR or replace it with --train.overwrite=true"
            ) in capsys.readouterr().err
    assert (out / "samples.jsonl").read_text() == "an earlier run's\n"
    assert main([*argv, "--train.overwrite=true"]) == 0
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["examples"] == 2 and row["tokens"] == 2 * 20  # two solutions of 19 characters plus <|im_end|>
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "final", "metrics.jsonl", "summary.json"]


def test_sft_into_a_directory_another_run_writes_is_refused_and_leaves_it_as_it_was(tmp_path, monkeypatch, capsys):
    """rlvr sft takes the run directory's lock as rlvr train does: a second writer is told the holder's PID
    (here this very process, holding the lock through another open file) before anything loads."""
    monkeypatch.setattr(sft_module, "build_splits", hand_made(SOLVED[:4]))
    out = tmp_path / "sft"
    with RunLock(out):
        assert main(["sft", *SMALL, "--train.steps=1", f"--train.out={out}"]) == 2
        assert sorted(p.name for p in out.iterdir()) == [LOCK]
    assert (f"rlvr: error: {out} is in use by another rlvr process (PID {os.getpid()}), which holds {out / LOCK}"
            ) in capsys.readouterr().err
    assert not out.exists()  # the lock's holder made the directory and, left empty, it goes with the lock


def test_baseline_of_other_models_is_none(tmp_path):
    assert baseline_of("smollm2-135m-instruct") is None
    (tmp_path / "grpo" / "final").mkdir(parents=True)
    (tmp_path / "grpo" / "summary.json").write_text(json.dumps({"heldout_accuracy_after": 0.5}))
    assert baseline_of(str(tmp_path / "grpo" / "final")) is None
    assert baseline_of(str(tmp_path / "grpo")) is None


def test_no_solutions_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sft_module, "build_splits",
                        hand_made([Problem(question="What is 1 + 1?", answer="2", difficulty="d1")]))
    assert main(["sft", *SMALL, f"--train.out={tmp_path / 'x'}"]) == 2
    assert "no train problem of task 'arithmetic' has a worked solution" in capsys.readouterr().err
    # TRL's prompt-completion rows: the error names the column to map
    monkeypatch.setattr(sft_module, "build_splits", hand_made(
        [Problem(question="What is 1 + 1?", answer="2", difficulty="d1", row={"completion": "1 + 1 = 2"})]))
    assert main(["sft", *SMALL, f"--train.out={tmp_path / 'y'}"]) == 2
    assert ("; the rows' 'completion' column (TRL's prompt-completion form) is used with "
            "--task.columns.solution=completion\n") in capsys.readouterr().err


def test_sft_of_a_config_names_its_own_run_directory_and_the_grpo_command(tmp_path, monkeypatch):
    """`rlvr sft mine.yaml` writes runs/mine-sft (not runs/mine, where `rlvr train mine.yaml` goes) and says
    `rlvr train mine.yaml --model.name=runs/mine-sft/final`; plain `rlvr sft` (configs/sft.yaml) says
    configs/arithmetic.yaml, the same task; `rlvr sft --task.name=F` carries the task's overrides."""
    from pathlib import Path

    from rlvr.cli import SFT_CONFIG, grpo_command
    from rlvr.config import build_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("task: {name: mine.jsonl}\n")
    assert build_config("mine.yaml", [], command="sft").train.out == "runs/mine-sft"
    assert build_config("mine.yaml", []).train.out == "runs/mine"
    assert build_config(None, ["--task.name=f.jsonl"], command="sft").train.out == "runs/sft"
    assert build_config(SFT_CONFIG, [], command="sft").train.out == "runs/sft"   # the file's own
    assert grpo_command("mine.yaml", ["--train.steps=3", "--optimizer.lr=1e-4"], Path("runs/mine-sft/final")) == \
        "rlvr train mine.yaml --model.name=runs/mine-sft/final"
    assert grpo_command(SFT_CONFIG, [], Path("runs/sft/final")) == \
        f"rlvr train {SFT_CONFIG.parent / 'arithmetic.yaml'} --model.name=runs/sft/final"   # tmp_path is outside the repo
    monkeypatch.chdir(SFT_CONFIG.parent.parent)
    assert grpo_command(SFT_CONFIG, [], Path("runs/sft/final")) == "rlvr train configs/arithmetic.yaml --model.name=runs/sft/final"
    assert grpo_command(None, ["--task.name=my data.jsonl", "--task.columns.prompt=question", "--sft.batch_size=2"],
                        Path("runs/sft/final")) == \
        "rlvr train '--task.name=my data.jsonl' --task.columns.prompt=question --model.name=runs/sft/final"


@pytest.mark.slow
def test_sft_on_a_small_file_starts_from_the_defaults_as_train_does(tmp_path, monkeypatch, capsys):
    """`rlvr sft --task.name=small.jsonl --task.columns.prompt=question` on a 20-row file: held-out a fifth
    (4 rows) and no few-shot turn, as `rlvr train` would (not configs/sft.yaml's arithmetic settings, held-out
    100 and one worked example); its hint runs as printed; a GRPO run that evaluates with a few-shot turn
    the SFT baseline did not have is warned about."""
    import shlex

    monkeypatch.chdir(tmp_path)
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b), "solution": f"{a} + {b} = {a + b}\nAnswer: {a + b}"}
            for a in range(4) for b in range(5)]
    (tmp_path / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tiny = ["--model.name=tiny-random", "--train.steps=1", "--sft.batch_size=4", "--eval.max_new_tokens=4"]
    assert main(["sft", "--task.name=small.jsonl", "--task.columns.prompt=question", *tiny]) == 0
    out = capsys.readouterr().err
    assert "small.jsonl: 20 rows: holding out 4 (a fifth)" in out
    summary = json.loads((tmp_path / "runs/sft/summary.json").read_text())
    assert summary["examples"] == 16 and summary["flips"]["heldout"]["n"] == 4   # no row taken as a few-shot turn
    hint = out.split("(start GRPO from it: ")[1].split(")\n")[0]
    assert hint == ("rlvr train --task.name=small.jsonl --task.columns.prompt=question --eval.max_new_tokens=4 "
                    "--model.name=runs/sft/final")
    grpo = [*shlex.split(hint)[1:], "--train.steps=1", "--rollout.max_new_tokens=4", "--rollout.group_size=2",
            "--rollout.prompts_per_step=2"]
    assert main(grpo) == 0
    assert "warning: the SFT baseline" not in capsys.readouterr().err
    assert json.loads((tmp_path / "runs/run/summary.json").read_text())["sft"]["run"] == str(tmp_path / "runs/sft")
    assert main([*grpo, "--train.out=runs/shots", "--task.few_shot=1"]) == 0
    assert (f"warning: the SFT baseline ({tmp_path / 'runs/sft'}) was evaluated with other prompts than this run: "
            "task.few_shot=0 there, 1 here; give this run the same (--task.few_shot=0) to compare like with like"
            ) in capsys.readouterr().err


def test_gsm8k_rows_without_a_solution_column_name_the_column_of_worked_solutions(tmp_path, capsys):
    """`rlvr sft --task.name=gsm8k.jsonl --task.columns.prompt=question`: GSM8K's worked solutions are its
    `answer` column; the refusal names it and the override that uses it (before the model loads)."""
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": f"Tom has {i} apples and buys 3 more. How many?",
                                        "answer": f"{i} + 3 = <<{i}+3={i + 3}>>{i + 3}\n#### {i + 3}"}) + "\n"
                            for i in range(10)))
    args = ["sft", f"--task.name={data}", "--task.columns.prompt=question", "--model.name=no-such-model",
            f"--train.out={tmp_path / 'run'}"]
    assert main(args) == 2
    assert capsys.readouterr().err.endswith(
        "file tasks need a 'solution' column (or task.columns: {solution: <column>}); column 'answer' holds worked "
        "solutions (a final '#### N' or \\boxed{...}): --task.columns.solution=answer\n")
    assert not (tmp_path / "run").exists()
