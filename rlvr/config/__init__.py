"""Run configuration: dataclass sections (sections.py) and how a config is built from defaults, a preset,
YAML and command-line overrides (build.py), and the checks on a built config (validate.py)."""
from rlvr.config.build import (build_config, describe, field_docs, load_yaml, parse_override, to_dict, to_yaml,
                               valid_keys)
from rlvr.config.sections import (AlgoConfig, Config, ConfigError, CurriculumConfig, EnvConfig, EvalConfig, LogConfig,
                                  LoraConfig, ModelConfig, OptimizerConfig, RewardsConfig, RolloutConfig, SftConfig, TaskConfig,
                                  TrainConfig, VllmConfig)
from rlvr.config.validate import validate

__all__ = ["AlgoConfig", "Config", "ConfigError", "CurriculumConfig", "EnvConfig", "EvalConfig", "LogConfig", "LoraConfig",
           "ModelConfig", "OptimizerConfig", "RewardsConfig", "RolloutConfig", "SftConfig", "TaskConfig", "TrainConfig", "VllmConfig",
           "build_config", "describe", "field_docs", "load_yaml", "parse_override", "to_dict", "to_yaml",
           "valid_keys", "validate"]
