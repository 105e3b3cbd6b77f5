"""The demo (configs/demo.yaml) trained one step off (rollout.overlap=one_step_off), as a user runs it:
does it learn as the synchronous demo does?

    python bench/overlap_demo.py [--out runs/overlap-demo]      # or: make demo-overlap

20 steps x 64 rollouts on SmolLM2-135M-Instruct plus the greedy evaluations before and after: minutes on a
2-core CPU (more than five at load 4), which is why the suite checks the overlap's promise on tiny-random
instead (tests/e2e/test_overlap.py: policy lag 1, each batch sampled from the weights one update old, a killed
run resumed to the run left alone). Prints held-out and OOD accuracy before and after and the policy lag of
each step; exits 1 when the run falls short of the synchronous demo's range (held-out 16% -> 64-74% over six
clean-clone runs, README; 0.55 is its low end less a margin) or a lag is not the one-step-off one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(prog="overlap_demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "overlap-demo",
                        help="the run directory (replaced; default runs/overlap-demo)")
    parser.add_argument("--min-heldout", type=float, default=0.55,
                        help="the held-out accuracy after training it must reach (default 0.55)")
    args = parser.parse_args()
    from rlvr.cli import main as rlvr

    code = rlvr(["train", str(ROOT / "configs" / "demo.yaml"), "--rollout.overlap=one_step_off",
                 f"--train.out={args.out}", "--train.overwrite=true", "--train.samples_every=0"])
    if code != 0:
        return code
    summary = json.loads((args.out / "summary.json").read_text())
    lags = [json.loads(line)["rollout/policy_lag"] for line in (args.out / "metrics.jsonl").read_text().splitlines()]
    print(f"held-out {summary['heldout_accuracy_before']:.0%} -> {summary['heldout_accuracy_after']:.0%}, "
          f"OOD {summary['ood_accuracy_before']:.0%} -> {summary['ood_accuracy_after']:.0%}; policy lag per step {lags}")
    problems = []
    if summary["heldout_accuracy_before"] >= 0.3:
        problems.append(f"held-out accuracy before training {summary['heldout_accuracy_before']:.0%} (expected < 30%)")
    if summary["heldout_accuracy_after"] < args.min_heldout:
        problems.append(f"held-out accuracy after training {summary['heldout_accuracy_after']:.0%} "
                        f"< {args.min_heldout:.0%}")
    if lags != [0] + [1] * (len(lags) - 1):
        problems.append(f"policy lag {lags}, expected 0 then 1 on every step")
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
