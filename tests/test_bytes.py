"""Bytes a user's files may hold: data and config files that are not UTF-8 are refused naming the file,
the line and the byte offset, through `rlvr train` itself (exit 2, nothing written); the honest files,
a byte-order mark and a U+2028 inside a JSON string included, load as before."""
import json
from pathlib import Path

import pytest

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def csv_bytes(rows) -> bytes:
    return ("prompt,answer\n" + "".join(f"{r['prompt']},{r['answer']}\n" for r in rows)).encode()


def train(capsys, tmp_path, *args) -> tuple[int, str]:
    out = tmp_path / "run"
    code = main(["train", *args, "--train.steps=0", "--eval.before=false", "--eval.after=false",
                 "--task.heldout_size=2", "--task.ood_size=0", f"--train.out={out}"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("suffix, encode", [(".jsonl", jsonl), (".csv", csv_bytes)])
def test_a_latin1_byte_in_a_data_file_names_file_line_and_offset(tmp_path, capsys, suffix, encode):
    data = bytearray(encode(ROWS))
    line3 = data.index(b"What is 2")  # the third row: line 3 of the JSONL, line 4 of the CSV (header first)
    data[line3:line3 + 4] = b"Wh\xe9t"  # 'Whét' as Latin-1: 0xe9 starts a UTF-8 sequence that does not go on
    path = tmp_path / f"d{suffix}"
    path.write_bytes(bytes(data))
    code, err = train(capsys, tmp_path, SMOKE, f"--task.name={path}")
    assert code == 2
    line = 3 if suffix == ".jsonl" else 4
    assert (f"rlvr: error: {path} line {line}: not UTF-8 text (byte 0xe9 at byte offset {line3 + 2}); "
            "save the file as UTF-8") in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("suffix, encode", [(".jsonl", jsonl), (".csv", csv_bytes)])
def test_utf8_with_a_bom_and_non_ascii_text_loads(tmp_path, capsys, suffix, encode):
    rows = [dict(r, prompt=r["prompt"] + " (é\u2028ü)") if suffix == ".jsonl" else dict(r, prompt=r["prompt"] + " é")
            for r in ROWS]
    path = tmp_path / f"d{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + encode(rows))
    code, err = train(capsys, tmp_path, SMOKE, f"--task.name={path}")
    assert code == 0, err


def test_a_config_file_that_is_not_utf8_names_file_line_and_offset(tmp_path, capsys):
    text = Path(SMOKE).read_bytes()
    cut = text.index(b"\n", text.index(b"\n") + 1) + 1  # after line 2
    path = tmp_path / "c.yaml"
    path.write_bytes(text[:cut] + b"# caf\xe9\n" + text[cut:])
    code, err = train(capsys, tmp_path, str(path))
    assert code == 2
    assert f"rlvr: error: {path} line 3: not UTF-8 text (byte 0xe9 at byte offset {cut + 5})" in err
    path.write_bytes(text[:cut] + "# café\n".encode() + text[cut:])  # the same comment in UTF-8 is fine
    code, err = train(capsys, tmp_path, str(path))
    assert code == 0, err


def test_a_prompt_longer_than_the_context_is_left_out_with_a_count_and_named(tmp_path, capsys):
    """tiny-random's context is 1024 positions and its tokenizer reads a character a token: a 1500-character
    question cannot fit, and is left out (said with a count, the row named); the others train."""
    rows = [dict(r) for r in ROWS]
    rows[4]["prompt"] = "What is " + "1 + " * 375 + "1?"
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl(rows))
    code, err = train(capsys, tmp_path, SMOKE, "--model.name=tiny-random", f"--task.name={path}")
    assert code == 0, err
    line = [x for x in err.splitlines() if "do not fit" in x]
    assert len(line) == 1 and line[0].startswith(
        "task: 1 of 6 train problems do not fit the model's context of 1024 tokens with ")
    assert f"the first, {path} line 5, has a " in line[0] and line[0].endswith("-token prompt; left out")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["data"]["problems"] == {"train": 5, "heldout": 2, "ood": 0}


def test_prompts_that_all_overflow_the_context_are_refused(tmp_path, capsys):
    rows = [dict(r, prompt="What is " + "1 + " * 375 + f"{i}?") for i, r in enumerate(ROWS)]
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl(rows))
    code, err = train(capsys, tmp_path, SMOKE, "--model.name=tiny-random", f"--task.name={path}")
    assert code == 2
    assert "rlvr: error: task: 6 of 6 train problems do not fit the model's context of 1024 tokens" in err
    assert not (tmp_path / "run").exists()


def test_prompts_that_fit_are_all_kept(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl(ROWS))
    code, err = train(capsys, tmp_path, SMOKE, "--model.name=tiny-random", f"--task.name={path}")
    assert code == 0 and "do not fit" not in err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["data"]["problems"]["train"] == 6


def test_prompts_an_environment_makes_too_long_name_its_settings(tmp_path, capsys):
    """configs/tools.yaml on tiny-random: questions that fit the context alone, but not beside the tools'
    schemas and the worked tool-use conversation (env.example); the error names those settings too."""
    rows = [dict(r, prompt="What is " + "1 + " * 150 + f"{i}?") for i, r in enumerate(ROWS)]
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl(rows))
    assert train(capsys, tmp_path, SMOKE, f"--task.name={path}")[0] == 0  # alone they fit
    code, err = train(capsys, tmp_path, str(ROOT / "configs" / "tools.yaml"), "--model.name=tiny-random",
                      f"--task.name={path}", "--train.overwrite=true")
    assert code == 2
    assert ("train problems do not fit the model's context of 1024 tokens with 40 new tokens" in err
            and "shorten the prompts (task.few_shot, task.system_prompt, env.example, env.tools) or the" in err)
