"""train.deterministic: what it resolves to on each device, and the settings it makes and puts back."""
import pytest
import torch

from rlvr.config import build_config
from rlvr.device import CUDA_ENV, Determinism, determinism, determinism_applied
from rlvr.errors import RlvrError
from rlvr.train.settings import determinism_of


def test_auto_is_on_for_the_cpu_and_off_on_cuda():
    assert determinism("auto", "cpu") == Determinism(on=True, algorithms=True)
    assert determinism("auto", "cuda") == Determinism(on=False)
    assert determinism("off", "cpu") == Determinism(on=False)


def test_on_cuda_it_sets_what_verl_full_determinism_sets():
    d = determinism("on", "cuda")
    assert d.on and d.algorithms and d.cudnn
    assert d.env == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple",
                     "FLASH_ATTENTION_DETERMINISTIC": "1", "VLLM_BATCH_INVARIANT": "1"}
    with pytest.raises(RlvrError, match="train.deterministic 'yes' is not one of auto, on, off"):
        determinism("yes", "cpu")


def test_the_config_key_is_read_with_the_device_it_names():
    assert determinism_of(build_config(None, ["--train.device=cpu"])) == Determinism(on=True, algorithms=True)
    assert determinism_of(build_config(None, ["--train.device=cpu", "--train.deterministic=off"])).on is False
    with pytest.raises(RlvrError, match="train.deterministic"):
        build_config(None, ["--train.deterministic=true"])


def test_the_settings_are_made_for_the_run_and_put_back_after_it():
    environ = {"NCCL_ALGO": "Tree"}  # the user's own value stays
    assert not torch.are_deterministic_algorithms_enabled()
    fill, bench, cudnn_det = (torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark,
                              torch.backends.cudnn.deterministic)
    with determinism_applied(determinism("on", "cuda"), environ) as set_now:
        assert set_now == {k: v for k, v in CUDA_ENV.items() if k != "NCCL_ALGO"}
        assert environ["NCCL_ALGO"] == "Tree" and environ["VLLM_BATCH_INVARIANT"] == "1"
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        assert torch.backends.cudnn.deterministic is True and torch.backends.cudnn.benchmark is False
    assert environ == {"NCCL_ALGO": "Tree"}
    assert not torch.are_deterministic_algorithms_enabled()
    assert (torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic) == (fill, bench, cudnn_det)


def test_off_makes_no_setting():
    environ = {}
    with determinism_applied(determinism("off", "cuda"), environ) as set_now:
        assert set_now == {} and environ == {} and not torch.are_deterministic_algorithms_enabled()
