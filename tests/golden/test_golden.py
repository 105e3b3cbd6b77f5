"""The golden trace holds: the per-step metrics of tests/golden/runs.py's fixed runs, made now in a fresh
process, equal tests/golden/trace.json bit for bit (every float to its last bit, every count)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.golden.runs import RUNS, TRACE

ROOT = Path(__file__).resolve().parents[2]
HOW = ("If your change is meant to move these numbers, regenerate the trace with `make golden` and commit it "
       "with the change, saying in the commit message why they moved.")


def differences(want: dict, got: dict, limit: int = 8) -> list[str]:
    """The first `limit` places where got differs from want: run, step, metric, both values."""
    out = []
    for name in sorted(set(want) | set(got)):
        if name not in got or name not in want:
            out.append(f"{name}: {'missing now' if name not in got else 'not in the trace'}")
            continue
        if want[name]["args"] != got[name]["args"]:
            out.append(f"{name}: its arguments changed (tests/golden/runs.py)")
        w, g = want[name]["steps"], got[name]["steps"]
        if len(w) != len(g):
            out.append(f"{name}: {len(g)} steps, the trace has {len(w)}")
        for i, (rw, rg) in enumerate(zip(w, g)):
            for key in sorted(set(rw) | set(rg)):
                # compared as JSON text: equal floats print alike, and a NaN equals a NaN
                if json.dumps(rw.get(key)) != json.dumps(rg.get(key)):
                    out.append(f"{name} step {i + 1} {key}: {rg.get(key, 'absent')!r}, the trace has "
                               f"{rw.get(key, 'absent')!r}")
    return out[:limit]


@pytest.mark.slow
def test_the_golden_runs_repeat_the_trace_bit_for_bit(tmp_path):
    want = json.loads(TRACE.read_text())
    assert set(want) == set(RUNS), f"tests/golden/trace.json holds other runs than tests/golden/runs.py. {HOW}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the module pins the kernels itself
    proc = subprocess.run([sys.executable, "-m", "tests.golden.runs"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    moved = differences(want, json.loads(proc.stdout))
    assert not moved, "the golden trace moved:\n  " + "\n  ".join(moved) + f"\n{HOW}"


def test_differences_name_the_run_step_and_metric():
    trace = {"a": {"args": ["x"], "steps": [{"loss": 0.5, "grad_norm": float("nan")}]}}
    same = json.loads(json.dumps(trace))
    assert differences(trace, same) == []  # NaN against NaN is no difference
    moved = json.loads(json.dumps(trace))
    moved["a"]["steps"][0]["loss"] = 0.5000000000000001  # one ulp
    assert differences(trace, moved) == ["a step 1 loss: 0.5000000000000001, the trace has 0.5"]
    assert differences(trace, {}) == ["a: missing now"]
