"""rlvr: reinforcement learning from verifiable rewards, with GRPO at its core.

`rlvr.fit(model=..., rewards={fn: 1.0}, train_dataset=rows, **overrides)` runs what `rlvr train` runs,
from Python (rlvr/api.py)."""
import logging
import os


def openmp_wait(load: float, cores: int) -> dict[str, str]:
    """How torch's OpenMP threads wait for each other, from the load average when rlvr is imported. They spin
    (libgomp's default, about 3 ms) before they sleep. On a CPU that other work holds (reward workers,
    sandboxes, other jobs: load at least the core count) a spinning thread burns its slice waiting for a
    peer that is not running, so there they sleep at once (PASSIVE): greedy evaluation of 6 problems on
    smollm2 took 75-85 s instead of 7 s spinning without bound (bench/eval_threads.py), and the update's
    forward + backward 53-68 s sleeping against 155-162 s with a 0.3 ms spin (bench/omp_wait.py, load 18 on
    2 cores). On a quiet machine sleeping at once costs a wake-up at every parallel region of a step: the GRPO
    update on smollm2 took 5.5-7.2 s against 4.1-5.8 s side by side at the commit before PASSIVE was set
    everywhere, running the same ops (torch.profiler: 103.6k against 103.5k, the same 2516 matmuls)."""
    return {"OMP_WAIT_POLICY": "PASSIVE"} if load >= cores else {}


# read when torch loads its OpenMP runtime, so set before; a value the user set wins
try:
    _load = os.getloadavg()[0]
except OSError:  # no load average (not Unix): the default wait
    _load = 0.0
for _key, _value in openmp_wait(_load, os.cpu_count() or 1).items():
    os.environ.setdefault(_key, _value)
# torchao (model.quantize=nf4, optimizer.state=8bit; peft imports it wherever it is installed) logs a warning
# for each of its optional GPU kernels that did not load: on a CPU, every one, on every import
logging.getLogger("torchao").setLevel(logging.ERROR)
# transformers imports torchao wherever it is installed (its quantizers), and torchao 0.18 registers two enums
# with torch's pytree the way torch 2.13 deprecates: two warnings at the start of every run, none of them ours
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

from rlvr.api import fit  # noqa: E402 (after the OpenMP setting, though rlvr.api loads no torch itself)

__version__ = "0.1.0"
__all__ = ["fit"]
