"""Small copies of the conventions users bring, written the way TRL's and verl's users write them.
Nothing here knows about rlvr."""
import asyncio
import random
import re

import numpy as np
import torch


# ---- TRL reward functions (GRPOTrainer calls them by keyword, with **kwargs for the other columns)

def accuracy_reward(completions, solution, **kwargs):
    """TRL style: conversational completions, the gold in a `solution` column."""
    contents = [completion[0]["content"] for completion in completions]
    return [1.0 if sol.strip() and sol.strip() in content else 0.0 for content, sol in zip(contents, solution)]


def think_format_reward(completions, **kwargs):
    """TRL style: a conversational format reward."""
    pattern = r"^<think>.*?</think>"
    return [1.0 if re.match(pattern, completion[0]["content"], re.DOTALL) else 0.0 for completion in completions]


def length_penalty(prompts, completions, completion_ids, trainer_state, **kwargs):
    """TRL style: reads the token ids and the trainer state; numpy return."""
    scale = 1.0 + trainer_state.global_step
    return np.array([-len(ids) / (100.0 * scale) for ids in completion_ids], dtype=np.float32)


def tensor_reward(completions, **kwargs):
    return torch.tensor([0.5] * len(completions))


def only_with_solution(completions, solution, **kwargs):
    """None: does not apply to rows without a solution."""
    return [None if not sol else 1.0 for sol in solution]


async def async_judge(completions, **kwargs):
    await asyncio.sleep(0)
    return [float(len(str(c)) % 2) for c in completions]


# ---- verl reward functions (one sample at a time)

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl style: the last number of the response against the ground truth; a dict with details."""
    numbers = re.findall(r"-?\d+", solution_str)
    pred = numbers[-1] if numbers else None
    return {"score": 1.0 if pred == str(ground_truth) else 0.0, "acc": pred == str(ground_truth), "pred": pred}


def gsm8k_like_compute_score(solution_str, ground_truth, method="strict", format_score=0.0, score=1.0):
    """verl's per-dataset scorers take only these two: a float."""
    match = re.search(r"#### (-?\d+)", solution_str)
    if match is None:
        return 0.0
    return score if match.group(1) == ground_truth else format_score


def prime_like_compute_score(model_output: str, ground_truth: str):
    """verl's prime_math form: other parameter names (verl calls it positionally) and a tuple back,
    (is_correct, format_correctness, extracted), of which verl's default_compute_score scores the first."""
    boxed = re.search(r"\\boxed\{([^}]*)\}", model_output)
    extracted = boxed.group(1) if boxed else ""
    return extracted == str(ground_truth), "Step 2:" in model_output, extracted


def verify_like_compute_score(model_output: str, ground_truth: str, timeout_score: float = 0):
    """verl's math_verify and geo3k form: other parameter names, a float back."""
    return 1.0 if model_output.strip().endswith(str(ground_truth)) else 0.0


def logs_as_trl_1x(completions, log_metric, log_extra, **kwargs):
    """TRL 1.x hands every reward function log_metric(name, value) and log_extra(column, values)."""
    lengths = [len(c if isinstance(c, str) else c[-1]["content"]) for c in completions]
    log_metric("mean_chars", sum(lengths) / len(lengths))
    log_extra("chars", lengths)
    return [0.0 for _ in completions]


# ---- TRL environments (environment_factory): reset(**row), public methods are tools

class DrawsItsOwnProblem:
    """reset() ignores the row and draws a random problem; the reward reads the instance."""

    def reset(self, **kwargs):
        self.a, self.b = random.randint(10, 99), random.randint(10, 99)
        self.answered = None
        return f"What is {self.a} + {self.b}?"

    def submit(self, answer: str) -> str:
        """Submit the final answer.

        Args:
            answer: the sum, as digits
        """
        self.answered = answer
        return "correct" if answer.strip() == str(self.a + self.b) else "wrong"


class GymStyleEnv:
    """A TRL environment whose tool is named `step` (a gym-style action): still TRL's form, since it has
    no reward_columns (an rlvr Environment must have one)."""

    def reset(self, **kwargs):
        self.position = 0
        return "Reach 3."

    def step(self, action: int) -> str:
        """Move.

        Args:
            action: how far to move
        """
        self.position += action
        return f"at {self.position}"


class TargetEnv:
    """reset takes a named column of the row (a `target` column)."""

    def reset(self, target, **kwargs):
        self.target = target
        return None

    def get_reward(self):
        return 1.0 if self.target else 0.0


def solved_reward(environments, **kwargs):
    """TRL passes the episode's environment instances."""
    return [1.0 if env.answered is not None and env.answered.strip() == str(env.a + env.b) else 0.0
            for env in environments]


async def async_compute_score(data_source, solution_str, ground_truth, extra_info=None):
    await asyncio.sleep(0)
    return float(solution_str.strip() == str(ground_truth))


def batch_compute_score(data_sources, solution_strs, ground_truths, extra_infos):
    """verl's BatchRewardManager form: lists in, one score each out."""
    return [float(s.endswith(str(g))) for s, g in zip(solution_strs, ground_truths)]


def word_count(text: str) -> int:
    """Count the words of a text.

    Args:
        text: the text
    """
    return len(text.split())
