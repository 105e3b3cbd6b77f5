"""Every key of `rlvr train --help` has one check: in a phase's table (tests/key_reach/test_*_keys.py, and
tests/e2e/test_key_reach_runs.py for what only a whole run shows), or a reason a CPU cannot show it."""
from collections import Counter


from tests.key_reach.harness import KEYS

from tests.e2e.test_key_reach_runs import RUN
from tests.key_reach.test_data_keys import DATA
from tests.key_reach.test_model_keys import MODELS
from tests.key_reach.test_rollout_keys import ROLLOUT
from tests.key_reach.test_update_keys import LEARN


# keys whose effect a CPU run cannot show, and why (each is covered where it can be: see the reason)
CPU_UNOBSERVABLE = {
    "rollout.cuda_graph": "CUDA only: decode replayed as CUDA graphs (tests/rollout/test_graphed.py on a GPU)",
    "rollout.vllm.gpu_memory_utilization": "vLLM on a GPU only (tests/rollout/test_vllm_gpu.py)",
    "rollout.vllm.sleep": "vLLM on a GPU only (tests/rollout/test_vllm_gpu.py)",
    "rollout.vllm.server_url": "needs a vLLM server: tests/rollout/test_vllm_server.py runs one in the vLLM venv",
    "train.parallel": "torchrun with several processes (tests/e2e/test_torchrun.py runs ddp and fsdp on gloo)",
    "train.join_timeout_s": "torchrun with several processes (tests/e2e/test_torchrun.py: a node whose process "
                            "never joins, and a collective that waits longer than it)",
    "rollout.compile": "speed only: the compiled decode step gives the eager step's tokens "
                       "(tests/rollout/test_lean.py); compiling takes tens of seconds on a CPU",
    "env.tool_budget_s": "binds only when a tool call outlasts it; a random model writes no tool call "
                         "(tests/envs/test_tool_batches.py times the budget out with a slow tool)",
    "env.max_turns": "a random model writes no tool call, so its episodes end after one turn "
                     "(tests/envs/test_episodes.py runs scripted multi-turn episodes to the limit)",
    "env.max_tool_tokens": "a random model writes no tool call, so no tool result is cut "
                           "(tests/envs/test_episodes.py cuts a scripted tool's result)",
    "task.config": "Hub datasets only (no Hub here); tests/tasks/test_files.py reads local files",
    "task.split": "Hub datasets and save_to_disk directories: RUN checks the file task keys",
    "task.heldout_split": "Hub datasets and save_to_disk directories: RUN checks the file task keys",
    "sft.batch_size": "rlvr sft only (tests/train/test_sft.py)",
    **{f"rollout.vllm.{k}": "vLLM only, not installed here (tests/rollout/test_vllm_engine.py, test_vllm_gpu.py)"
       for k in ("kv_cache_gib", "max_model_len", "weight_push", "weights_dir", "timeout_s", "sync")},
    "log.project": "read by wandb and trackio only, neither installed here (tensorboard writes into the run "
                   "directory: RUN checks log.trackers)",
}
def test_every_key_is_checked_once():
    tables = (LEARN, ROLLOUT, DATA, MODELS, RUN, CPU_UNOBSERVABLE)
    counts = Counter(k for table in tables for k in table)
    assert sorted(set(KEYS) - set(counts)) == [], "give each new key a check (or a reason) in a table here"
    assert sorted(set(counts) - set(KEYS)) == []  # no check of a key that no longer exists
    assert [k for k, n in counts.items() if n > 1] == []
