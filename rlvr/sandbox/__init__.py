"""Running untrusted programs: below both the code reward (rlvr.rewards.code) and the Python tool
(rlvr.envs.python_tool), so neither owns it.

run.py       one run under bubblewrap, rlimits and a wall clock (`run_harness`, `spawn`, `sandbox_problem`)
limits.py    what a run may use (`SandboxLimits`) and how to isolate it (`Sandbox`)
launcher.py  the first process of a run: cgroup, oom score, uid, keyring, rlimits, then exec bubblewrap
cgroup.py    a cgroup per run: total memory and tasks
seccomp.py   the system-call filter bubblewrap loads
harness.py   the program inside the sandbox, and the plain-data codec both sides share
pipes.py     reading a run's pipes to caps under a wall clock; killing and reaping what is left
program.py   one program kept running across calls (`Program`): the parent calls its functions
worker.py    one killable worker process answering JSON lines (the maths and judge workers)

Nothing here is imported by the training loop unless a run uses a code reward or a tool.
"""
