"""What the benchmark scripts share: the prompts they time, tokenized as training renders them."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def task_prompts(tok, cfg, n: int) -> list[list[int]]:
    """The first n training prompts of cfg's task as token ids, rendered as the training loop renders them
    (the task's few-shot turns and system prompt). A task's own prints (a dataset build) stay out of the
    benchmark's figures."""
    from rlvr.tasks import build_splits, encode_prompt

    with contextlib.redirect_stdout(io.StringIO()):
        splits = build_splits(cfg.task)
    return [encode_prompt(tok, p.question, splits.few_shot, cfg.task.system_prompt) for p in splits.train[:n]]


def config_prompts(tok, config_file: str, n: int) -> list[list[int]]:
    """task_prompts of a file under configs/ (e.g. "demo.yaml")."""
    from rlvr.config import build_config

    return task_prompts(tok, build_config(ROOT / "configs" / config_file), n)
