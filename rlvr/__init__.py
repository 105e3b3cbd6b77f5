"""rlvr: reinforcement learning from verifiable rewards, with GRPO at its core.

`rlvr.fit(model=..., rewards={fn: 1.0}, train_dataset=rows, **overrides)` runs what `rlvr train` runs,
from Python (rlvr/api.py)."""
import logging
import os

# torch's OpenMP threads wait for each other by spinning. On a CPU shared with other work (reward workers,
# sandboxes, other jobs) a thread spinning without bound burns its slice waiting for a peer that is not running:
# greedy evaluation of 6 problems on smollm2 took 75-85 s instead of 7 s on a busy 2-core machine with
# OMP_WAIT_POLICY=ACTIVE (bench/eval_threads.py). PASSIVE alone sleeps at once, and then every parallel region
# pays a wake-up: a GRPO update (~100k ops back to back) on smollm2 took 5.5-7.2 s against 4.1-5.8 s, side by
# side, at the commit before the policy was set, running the same ops (torch.profiler: 103.6k against 103.5k,
# the same 2516 matmuls): the policy is what changed on the CPU. So threads spin a bounded while, about 0.3 ms
# (GOMP_SPINCOUNT, libgomp's count: torch's OpenMP on Linux; bench/omp_wait.py), to catch the next region of a
# running step, then sleep, as PASSIVE. Both are read when torch loads its OpenMP runtime, so they are set
# before; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "30000")
# torchao (model.quantize=nf4, optimizer.state=8bit; peft imports it wherever it is installed) logs a warning
# for each of its optional GPU kernels that did not load: on a CPU, every one, on every import
logging.getLogger("torchao").setLevel(logging.ERROR)
# transformers imports torchao wherever it is installed (its quantizers), and torchao 0.18 registers two enums
# with torch's pytree the way torch 2.13 deprecates: two warnings at the start of every run, none of them ours
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

from rlvr.api import fit  # noqa: E402 (after the OpenMP setting, though rlvr.api loads no torch itself)

__version__ = "0.1.0"
__all__ = ["fit"]
