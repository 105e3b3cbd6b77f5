"""take_rows: a prompt's states read by each of its G completions, with a backward that sums the G
gradients in one order on any number of threads."""
import torch

from rlvr.train.packed import take_rows


def test_take_rows_is_indexing_with_a_backward_that_repeats_on_two_threads():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 40, 64, generator=g, requires_grad=True)  # 8 prompts' keys: 61440 values each 8 rows
    index = torch.randperm(64, generator=g) // 8  # 64 completions, 8 per prompt, in a bucket's order
    upstream = torch.randn(64, 3, 40, 64, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # one thread: advanced indexing's backward adds in index order too
        (x[index] * upstream).sum().backward()
        serial, x.grad = x.grad, None
        torch.set_num_threads(2)  # past 32768 values on 2 threads advanced indexing adds with atomics
        grads = []
        for _ in range(10):
            out = take_rows(x, index)
            assert torch.equal(out, x[index])
            (out * upstream).sum().backward()
            grads.append(x.grad)
            x.grad = None
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(grad, serial) for grad in grads)


def test_take_rows_keeps_the_index_shape():
    x = torch.arange(12.0).view(6, 2)
    index = torch.tensor([[0, 5], [5, 5]])
    assert take_rows(x, index).tolist() == [[[0.0, 1.0], [10.0, 11.0]], [[10.0, 11.0], [10.0, 11.0]]]
