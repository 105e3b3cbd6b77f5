"""The other names a setting goes by: its own former names (RENAMED: refused, naming the new key; MOVED: still
read, with a note) and other trainers' names for it (FOREIGN: TRL's, OpenRLHF's and verl's), which a config
file, a command line or rlvr.fit refuse with the rlvr key that means the same thing."""
from __future__ import annotations


# Keys that were renamed: each setting has one name, so an old one is an error that names the new one.
# old key -> (new key, the old key's default): a run directory's config.yaml written before the rename
# holds the old key at its default, which means "unset" and is passed over so that --resume works
RENAMED = {"rollout.vllm.tis_cap": ("rollout.tis_cap", 0.0)}

# Keys that moved to the section whose code reads them, with the same meaning: the old key still works
# (config files, run directories' config.yaml, command lines) and a note on stderr names the new one.
MOVED = {
    **{f"algo.{k}": f"optimizer.{k}" for k in ("lr", "weight_decay", "warmup_steps", "max_grad_norm",
                                              "micro_batch_prompts", "micro_batch_tokens")},
    "algo.soft_overlong": "rewards.soft_overlong",
    **{f"task.{k}": f"task.params.{k}" for k in ("digits", "operands", "operators", "min_digits")},
    "task.ood_digits": "task.ood_params.digits", "task.ood_operands": "task.ood_params.operands",
}


# Other trainers' names for rlvr's settings (TRL's GRPOConfig and its ModelConfig, OpenRLHF's flags, verl's
# keys), by the name's last part: a config or command line written from those habits is refused, as any
# unknown key is, with the rlvr key that means the same thing instead of the nearest spelling (which for
# `learning_rate` or `max_completion_length` is some other setting). name -> (rlvr key, where it comes
# from, what differs)
FOREIGN: dict[str, tuple[str, str, str]] = {
    "num_generations": ("rollout.group_size", "TRL", ""),
    "n_samples_per_prompt": ("rollout.group_size", "OpenRLHF", ""),
    "learning_rate": ("optimizer.lr", "TRL", ""),
    "actor_learning_rate": ("optimizer.lr", "OpenRLHF", ""),
    "max_completion_length": ("rollout.max_new_tokens", "TRL", ""),
    "generate_max_len": ("rollout.max_new_tokens", "OpenRLHF", ""),
    "max_response_length": ("rollout.max_new_tokens", "verl", ""),
    "max_prompt_length": ("", "TRL and verl", "rlvr does not cut prompts: a problem whose prompt and "
                          "rollout.max_new_tokens do not fit the model's context is left out, with a count"),
    "per_device_train_batch_size": ("rollout.prompts_per_step", "TRL",
                                    "TRL counts completions, rlvr prompts: a step samples rollout.prompts_per_step "
                                    "x rollout.group_size completions, optimizer.micro_batch_prompts prompts a forward pass"),
    "rollout_batch_size": ("rollout.prompts_per_step", "OpenRLHF", ""),
    "train_batch_size": ("rollout.prompts_per_step", "verl", ""),
    "gradient_accumulation_steps": ("optimizer.micro_batch_prompts", "TRL",
                                    "gradients accumulate over the step's micro-batches of that many prompts"),
    "micro_train_batch_size": ("optimizer.micro_batch_prompts", "OpenRLHF", ""),
    "ppo_micro_batch_size_per_gpu": ("optimizer.micro_batch_prompts", "verl", ""),
    "num_iterations": ("algo.iterations", "TRL", ""),
    "ppo_epochs": ("algo.iterations", "verl", ""),
    "max_epochs": ("algo.iterations", "OpenRLHF", ""),
    "epsilon": ("algo.clip_low", "TRL", ""),
    "epsilon_high": ("algo.clip_high", "TRL", ""),
    "eps_clip": ("algo.clip_low", "OpenRLHF", ""),
    "clip_ratio_low": ("algo.clip_low", "verl", ""),
    "clip_ratio_high": ("algo.clip_high", "verl", ""),
    "init_kl_coef": ("algo.beta", "OpenRLHF", ""),
    "kl_coef": ("algo.beta", "verl", "algo.kl_in=reward puts the KL in the reward, as verl's kl_ctrl does"),
    "kl_loss_coef": ("algo.beta", "verl", ""),
    "loss_type": ("algo.aggregation", "TRL", "or algo.preset (grpo, dr_grpo, dapo) for the whole recipe"),
    "loss_agg_mode": ("algo.aggregation", "verl", ""),
    "scale_rewards": ("algo.adv_scale", "TRL", ""),
    "advantage_estimator": ("algo.adv_estimator", "OpenRLHF", ""),
    "entropy_coeff": ("algo.entropy_coef", "verl", ""),
    "mask_truncated_completions": ("algo.mask_truncated", "TRL", ""),
    "reward_weights": ("rewards.weights", "TRL", "a mapping of reward function to weight"),
    "reward_funcs": ("rewards.weights", "TRL", "a mapping of reward function to weight"),
    "max_steps": ("train.steps", "TRL", ""),
    "total_training_steps": ("train.steps", "verl", ""),
    "num_train_epochs": ("train.steps", "TRL", "rlvr counts steps, each rollout.prompts_per_step prompts"),
    "output_dir": ("train.out", "TRL", ""),
    "save_steps": ("train.save_every", "TRL", ""),
    "save_total_limit": ("train.keep_checkpoints", "TRL", ""),
    "eval_steps": ("train.eval_every", "TRL", ""),
    "report_to": ("log.trackers", "TRL", ""),
    "bf16": ("model.dtype", "TRL", "bfloat16 weights; train.mixed_precision=bf16 autocasts over fp32 ones"),
    "torch_dtype": ("model.dtype", "TRL", ""),
    "fp16": ("model.dtype", "TRL", "bfloat16 or float32: float16 is not trained in, its range needs loss scaling"),
    "model_name_or_path": ("model.name", "TRL", ""),
    "pretrain": ("model.name", "OpenRLHF", ""),
    "dataset_name": ("task.name", "TRL", ""),
    "prompt_data": ("task.name", "OpenRLHF", ""),
    "input_key": ("task.columns.prompt", "OpenRLHF", "the prompt's column"),
    "prompt_key": ("task.columns.prompt", "verl", "the prompt's column"),
    "label_key": ("task.columns.answer", "OpenRLHF", "the gold answer's column"),
    "train_files": ("task.name", "verl", ""),
    "use_peft": ("model.lora.r", "TRL", "LoRA is on when model.lora.r > 0"),
    "lora_r": ("model.lora.r", "TRL", ""),
    "lora_rank": ("model.lora.r", "OpenRLHF and verl", ""),
    "lora_alpha": ("model.lora.alpha", "TRL", ""),
    "lora_dropout": ("model.lora.dropout", "TRL", ""),
    "lora_target_modules": ("model.lora.target_modules", "TRL", ""),
    "load_in_4bit": ("model.quantize", "TRL", "model.quantize=nf4 with model.lora.r > 0 (QLoRA)"),
    "enable_gradient_checkpointing": ("train.gradient_checkpointing", "verl", ""),
    "use_vllm": ("rollout.engine", "TRL", "rollout.engine=vllm"),
    "vllm_gpu_memory_utilization": ("rollout.vllm.gpu_memory_utilization", "TRL", ""),
    # TRL's Trainer habits rlvr has no key for: what it does instead
    "push_to_hub": ("", "TRL", "rlvr saves the model as a Hugging Face directory, RUN_DIR/final (LoRA: also "
                    "final/adapter); upload it with `hf upload ORG/NAME RUN_DIR/final`"),
    "hub_model_id": ("", "TRL", "the repository is named when you upload: `hf upload ORG/NAME RUN_DIR/final`"),
    "hub_strategy": ("", "TRL", "upload RUN_DIR/final, or a checkpoint, with `hf upload` when you choose"),
    "logging_steps": ("", "TRL", "rlvr logs every step: its metrics row goes to RUN_DIR/metrics.jsonl, "
                      "log.trackers and the console line; train.samples_every sets how often samples are printed"),
    "log_completions": ("", "TRL", "every step's completions, with each reward, are in RUN_DIR/samples.jsonl; "
                        "train.samples_every prints some to the console"),
    "callbacks": ("", "TRL", "from Python, rlvr.fit(..., callbacks=[obj]) calls obj.on_step_end(step, metrics, "
                  "control) after each step: return {name: number} to log a metric, set "
                  "control.should_training_stop = True to end the run (README, \"Callbacks\")"),
    # verl's nested keys, by their last two parts (actor_rollout_ref.rollout.n, actor_rollout_ref.actor.optim.lr)
    "rollout.n": ("rollout.group_size", "verl", ""),
    "optim.lr": ("optimizer.lr", "verl", ""),
    "model.path": ("model.name", "verl", ""),
    "actor.use_kl_loss": ("algo.beta", "verl", "the KL term is on when algo.beta > 0; algo.kl_in says where"),
}


def foreign_key(key: str) -> str | None:
    """The FOREIGN name `key` is (by its last two parts, else its last: actor_rollout_ref.rollout.n is
    verl's rollout.n), else None."""
    return next((n for n in (".".join(key.split(".")[-2:]), key.rsplit(".", 1)[-1]) if n in FOREIGN), None)


def foreign_name(key: str) -> str | None:
    """What to say about `key` when it is another trainer's name for an rlvr setting (FOREIGN), else None."""
    name = foreign_key(key)
    if name is None:
        return None
    ours, origin, differs = FOREIGN[name]
    said = f"{origin}'s '{name}' is rlvr's '{ours}'" if ours else f"{origin}'s '{name}' has no rlvr key"
    return said + (f" ({differs})" if differs else "")
