"""bench/gpu.py runs end to end on the CPU (--smoke: tiny shapes), so the GPU benchmark cannot rot unseen;
its wheel selection and shape parsing are checked on hand-made cases."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from gpu import check_runtime, parse_shape  # noqa: E402
from gpu_wheels import needed_wheels  # noqa: E402


def test_smoke_run_on_cpu(tmp_path):
    save = tmp_path / "results.jsonl"
    done = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--device", "cpu", "--smoke", "--parts",
                           "rlvr,decode", "--save", str(save)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["name"]: r for r in map(json.loads, save.read_text().splitlines())}
    assert list(rows) == ["build", "rlvr tiny 2x2x8", "rlvr-bf16-weights tiny 2x2x8", "engine rlvr", "HF generate"]
    assert all(r["status"] == "ok" for r in rows.values()), rows
    steps = rows["rlvr tiny 2x2x8"]
    assert len(steps["step_s"]) == len(steps["rollout_s"]) == len(steps["update_s"]) == 2  # 1 warm-up dropped
    assert all(0 < t <= 2 * 2 * 8 for t in steps["tokens"])  # 2 prompts x 2 completions x at most 8 tokens
    assert all(r < s for r, s in zip(steps["rollout_s"], steps["step_s"]))
    # fp32 on the CPU: the engine's sampler log-probs are the trainer's up to float rounding
    assert all(0 <= m < 1e-5 for m in steps["logp_mismatch"])
    assert steps["peak_gib"] > 0
    for name in ("engine rlvr", "HF generate"):  # no stop token: every row is 8 tokens long
        assert {b: r["tokens"] for b, r in rows[name]["batches"].items()} == {"2": 2 * 8, "4": 4 * 8}
    assert "probe passed" in done.stdout
    assert "skipped: nothing" in done.stdout
    assert "decode tokens/s" in done.stdout and "rlvr tiny 2x2x8" in done.stdout


TRANSFORMERS = ("5.24.0", ["tokenizers<0.24.0,>=0.23.1", "regex>=2025.10.22", 'pytest; extra == "testing"'])


def test_a_wheel_goes_in_only_where_the_image_falls_short():
    carried = {"transformers": TRANSFORMERS, "regex": ("2026.4.4", [])}
    old = {"transformers": "5.17.0", "tokenizers": "0.23.2", "regex": "2024.11.6", "pytest": None}
    assert needed_wheels(["transformers==5.24.0"], carried, old) == (
        {"transformers": "5.17.0 is not ==5.24.0", "regex": "2024.11.6 is not >=2025.10.22"}, {})
    # the image's transformers is the pinned one: nothing to install, its requirements are not looked at
    assert needed_wheels(["transformers==5.24.0"], carried, {**old, "transformers": "5.24.0"}) == ({}, {})
    # a recent enough regex stays the image's
    assert needed_wheels(["transformers==5.24.0"], carried, {**old, "regex": "2026.1.15"}) == (
        {"transformers": "5.17.0 is not ==5.24.0"}, {})


def test_requirements_no_wheel_meets_are_reported():
    carried = {"transformers": TRANSFORMERS, "regex": ("2024.1.1", [])}  # a carried regex that is too old
    image = {"transformers": None, "tokenizers": "0.22.1", "regex": None}
    assert needed_wheels(["transformers==5.24.0"], carried, image) == (
        {"transformers": "absent"},
        {"tokenizers": "0.22.1 is not <0.24.0,>=0.23.1", "regex": "absent (carried: 2024.1.1)"})


def test_shapes_parse_or_say_what_is_expected():
    assert parse_shape("32x8x256") == (32, 8, 256)
    for bad in ("8x8", "8x0x128", "axbxc"):
        with pytest.raises(SystemExit, match="PROMPTSxGROUPxTOKENS"):
            parse_shape(bad)


def test_check_runtime_stops_with_one_line_where_rlvr_cannot_import(tmp_path, capsys):
    broken = tmp_path / "transformers"  # a transformers that cannot load, first on the jobs' path
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('transformers 4.0.0 has no DynamicLayer')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(BENCH), str(BENCH.parent)])}
    with pytest.raises(SystemExit) as stop:
        check_runtime(env, "rlvr's processes: installed nothing\n  warning: rlvr needs transformers (4.0.0 is not "
                           "==5.24.0): pass --wheels DIR holding it (see --help)")
    line = str(stop.value)
    assert "\n" not in line and line.startswith("stopped before the first job: rlvr cannot run")
    assert "transformers 4.0.0 has no DynamicLayer" in line and "rlvr needs transformers (4.0.0" in line


def test_check_runtime_passes_on_this_python(capsys):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), str(BENCH.parent)])}
    check_runtime(env, "")
    assert "probe passed" in capsys.readouterr().out


@pytest.mark.slow
def test_memory_part_smoke_on_cpu(tmp_path):
    """The memory rows and the largest-fits chain on tiny-random (LoRA on fp32 and on an NF4 base), each with
    rlvr plan's peaks beside the measured ones."""
    save = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--device", "cpu", "--smoke", "--parts", "memory",
                           "--save", str(save)], capture_output=True, text=True, cwd=BENCH.parent, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["name"]: r for r in map(json.loads, save.read_text().splitlines())}
    assert list(rows) == ["build", "tiny LoRA fp32 2x2x8", "tiny LoRA nf4 2x2x8", "fits 1 GiB: tiny-random"]
    assert all(r["status"] == "ok" for r in rows.values()), rows
    for name in list(rows)[1:]:
        assert rows[name]["plan"]["rollout"] > 0 and rows[name]["plan"]["update"] > 0
    assert "memory (GiB; plan / measured)" in done.stdout and "largest that fits 1 GiB" in done.stdout
