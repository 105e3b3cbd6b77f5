"""A preallocated KV cache for decoding: each step writes into a buffer sized for the whole rollout
instead of concatenating (which copies the whole cache of every layer at every step)."""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer
from transformers.modeling_outputs import BaseModelOutputWithPast


def _cache_keyword() -> str:
    """The name under which transformers' forward takes and returns the KV cache: `cache` in the release
    rlvr pins (5.24), `past_key_values` in earlier 5.x releases (5.17, the GPU machines' image). Read
    once from the output class every decoder returns, so each call site passes `cache_arg(cache)`."""
    fields = BaseModelOutputWithPast.__dataclass_fields__
    if "cache" in fields:
        return "cache"
    if "past_key_values" in fields:
        return "past_key_values"
    raise ImportError("this transformers release names the KV cache neither `cache` nor `past_key_values` "
                      f"(BaseModelOutputWithPast fields: {sorted(fields)}); install the transformers rlvr pins "
                      "(pyproject.toml)")


CACHE_KEYWORD = _cache_keyword()


def cache_arg(cache) -> dict:
    """The forward's keyword argument that passes `cache`: model(..., **cache_arg(cache))."""
    return {CACHE_KEYWORD: cache}


def cache_out(out):
    """The KV cache a forward returned (out.cache or out.past_key_values, by release)."""
    return getattr(out, CACHE_KEYWORD)


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views into buffers [B, H, capacity, D]."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        b, h, t, d = keys.shape
        self.buf_k = keys.new_empty((b, h, max(capacity, t), d))
        self.buf_v = values.new_empty((b, h, max(capacity, t), values.shape[-1]))
        self.buf_k[:, :, :t] = keys
        self.buf_v[:, :, :t] = values
        self.length, self.device, self.is_initialized = t, keys.device, True
        self._views()

    @classmethod
    def of_buffers(cls, buf_k: torch.Tensor, buf_v: torch.Tensor, length: int) -> "PreallocatedLayer":
        """A layer over buffers [B, H, capacity, D] taken as they are (no copy), `length` positions used."""
        layer = cls.__new__(cls)
        DynamicLayer.__init__(layer)
        layer.buf_k, layer.buf_v, layer.length, layer.device, layer.is_initialized = buf_k, buf_v, length, buf_k.device, True
        layer._views()
        return layer

    def _views(self) -> None:
        self.keys, self.values = self.buf_k[:, :, :self.length], self.buf_v[:, :, :self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.length + n > self.buf_k.shape[2]:  # past the planned size: grow (not on the hot path)
            grow = lambda buf: torch.cat([buf, buf.new_empty(buf.shape[:2] + (buf.shape[2] + n,) + buf.shape[3:])], 2)
            self.buf_k, self.buf_v = grow(self.buf_k), grow(self.buf_v)
        self.buf_k[:, :, self.length:self.length + n] = key_states
        self.buf_v[:, :, self.length:self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.buf_k = self.buf_k.repeat_interleave(repeats, dim=0)
        self.buf_v = self.buf_v.repeat_interleave(repeats, dim=0)
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.buf_k, self.buf_v = self.buf_k[indices], self.buf_v[indices]
        self._views()


def cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]], length: int, model_config):
    """A DynamicCache over ready buffers [B, H, capacity, D] per layer whose first `length` positions
    hold the context (multi-turn sessions build these from rows of different lengths)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model_config)
    cache.layers = [PreallocatedLayer.of_buffers(k, v, length) for k, v in layers]
    return cache
