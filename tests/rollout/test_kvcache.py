import torch
from transformers.cache_utils import DynamicLayer

from rlvr.rollout.kvcache import PreallocatedLayer


def test_preallocated_layer_matches_a_growing_layer():
    g = torch.Generator().manual_seed(0)
    k0, v0 = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g)
    ref = DynamicLayer()
    ref.update(k0, v0)
    pre = PreallocatedLayer(k0, v0, capacity=6)
    steps = [(torch.randn(2, 3, 1, 5, generator=g), torch.randn(2, 3, 1, 5, generator=g)) for _ in range(3)]
    for i, (k, v) in enumerate(steps):  # the third step runs past the capacity and grows
        a, b = ref.update(k, v), pre.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert pre.get_seq_length() == ref.get_seq_length() == 5 + i
    ref.batch_repeat_interleave(2)
    pre.batch_repeat_interleave(2)
    keep = torch.tensor([3, 0])
    ref.batch_select_indices(keep)
    pre.batch_select_indices(keep)
    k, v = torch.randn(2, 3, 1, 5, generator=g), torch.randn(2, 3, 1, 5, generator=g)
    a, b = ref.update(k, v), pre.update(k, v)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
