"""Whole runs on tiny-random with what TRL and verl users bring, unchanged: a verl parquet file, TRL reward
functions, verl's compute_score, a TRL environment that draws its own problems, and a broken reward."""
import json

import pyarrow as pa
import pyarrow.parquet as pq

from rlvr.cli import main
from tests.conftest import read_jsonl

CONV = "tests.compat.conventions"


def verl_parquet(path, n):
    rows = [{"data_source": "toy/add", "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"split": "train", "index": i}} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def config(tmp_path, task: str, weights: dict, **sections) -> str:
    cfg = {"model": {"name": "tiny-random"},
           "task": {"name": task, "heldout_size": 2, "ood_size": 0, "few_shot": 0},
           "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6},
           "rewards": {"weights": weights}, "eval": {"max_new_tokens": 6},
           "train": {"steps": 2, "out": str(tmp_path / "run")}, **sections}
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return str(path)


def test_verl_parquet_with_trl_rewards_and_verl_compute_score(tmp_path):
    data = verl_parquet(tmp_path / "train.parquet", 10)
    weights = {"correctness": 1.0, f"{CONV}:think_format_reward": 0.2, f"{CONV}:length_penalty": 0.1,
               f"{CONV}:async_judge": 0.1, f"verl:{CONV}:compute_score": 1.0}
    assert main(["train", config(tmp_path, str(data), weights)]) == 0
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for name in weights:
        assert metrics[0][f"reward/{name}/errors"] == 0, name
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 2 * 2 * 2
    assert all(s["rewards"][f"verl:{CONV}:compute_score"]["reason"].startswith("acc=") for s in samples)


def test_a_trl_environment_that_draws_its_own_problems(tmp_path):
    data = verl_parquet(tmp_path / "train.parquet", 6)
    path = config(tmp_path, str(data), {f"{CONV}:solved_reward": 1.0},
                  env={"name": f"{CONV}:DrawsItsOwnProblem", "tools": [], "max_turns": 2, "max_episode_tokens": 64})
    assert main(["train", path]) == 0
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert metrics[-1][f"reward/{CONV}:solved_reward/errors"] == 0
    assert "env/turns_mean" in metrics[0]


def test_a_reward_missing_its_column_stops_the_run_before_it_starts(tmp_path, capsys):
    data = verl_parquet(tmp_path / "train.parquet", 6)
    # TRL's accuracy reward wants a `solution` column this dataset does not have
    assert main(["train", config(tmp_path, str(data), {f"{CONV}:accuracy_reward": 1.0})]) == 2
    err = capsys.readouterr().err
    assert f"reward '{CONV}:accuracy_reward' raised on 3 of 3 rows tried" in err
    assert "missing 1 required positional argument: 'solution'" in err
    assert f"parameter 'solution' of '{CONV}:accuracy_reward' has no column: the row has columns data_source, " \
           "ability, reward_model, extra_info, answer" in err
    assert not (tmp_path / "run").exists()


def test_a_trl_conversational_dataset_with_a_solution_column(tmp_path, capsys):
    rows = [{"prompt": [{"role": "system", "content": "Think, then answer."},
                        {"role": "user", "content": f"What is {i} times 3?"}], "solution": str(3 * i)} for i in range(8)]
    data = tmp_path / "trl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    weights = {f"{CONV}:accuracy_reward": 1.0, f"{CONV}:think_format_reward": 0.5, f"{CONV}:only_with_solution": 0.1,
               f"{CONV}:logs_as_trl_1x": 1.0}
    assert main(["train", config(tmp_path, str(data), weights)]) == 0
    assert "2 held-out/OOD problems have no gold answer (column 'answer')" in capsys.readouterr().err
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert all(s["rewards"][f"{CONV}:only_with_solution"]["score"] == 1.0 for s in samples)
    assert all(s["extra"] == {"chars": len(s["completion"])} for s in samples)  # TRL's log_extra
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    for m, step in zip(metrics, [1, 2]):  # TRL's log_metric: the mean length of the step's final turns
        lengths = [len(s["completion"]) for s in samples if s["step"] == step]
        assert abs(m["reward/logged/mean_chars"] - sum(lengths) / len(lengths)) < 1e-9
    assert all(m[f"reward/{name}/errors"] == 0 for m in metrics for name in weights)
