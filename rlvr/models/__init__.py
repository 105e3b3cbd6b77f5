"""A policy and its tokenizer, by concern: loading.py (load_model: built-in names, local directories, Hub names,
a run's checkpoint), dtypes.py (model.dtype resolved), gguf.py (the built-in SmolLM2, converted from its GGUF
file), tiny.py (tiny-random and random:SHAPE, built in code), lora.py (LoRA adapters, `unwrap`, seeded
dropout), checkpointing.py (gradient checkpointing). The names scripts, tests and the docs import from
rlvr.models are re-exported here; rlvr's own modules import from the module that holds a name."""
from rlvr.models.checkpointing import checkpointing_active, enable_gradient_checkpointing
from rlvr.models.dtypes import checkpoint_dtype, weight_dtype
from rlvr.models.gguf import SMOLLM2, prepare_smollm2
from rlvr.models.loading import BUILTINS, base_model_path, check_model_name, load_model, stop_token_ids
from rlvr.models.lora import SeededDropout, apply_lora, is_peft, seeded_dropouts, unwrap
from rlvr.models.tiny import RANDOM, SHAPES, TINY, random_shape, tiny_config, tiny_random, tiny_tokenizer

__all__ = ["BUILTINS", "RANDOM", "SHAPES", "SMOLLM2", "TINY", "SeededDropout", "apply_lora", "base_model_path",
           "check_model_name", "checkpoint_dtype", "checkpointing_active", "enable_gradient_checkpointing", "is_peft",
           "load_model", "prepare_smollm2", "random_shape", "seeded_dropouts", "stop_token_ids", "tiny_config",
           "tiny_random", "tiny_tokenizer", "unwrap", "weight_dtype"]
