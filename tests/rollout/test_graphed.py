"""The static decode loop (rlvr/rollout/graphed.py) samples what the compacting loop samples: the same tokens
from the same draws, log-probs to float rounding, rows ending at different steps, caps, padding rows."""
import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig

from rlvr.rollout import graphed
from rlvr.rollout.quant import rollout_copy
from rlvr.rollout.builtin import BuiltinSession, generate

PROMPTS = [[5, 6, 7, 8, 9], [5, 6, 7, 20, 21, 22, 23, 24], [30, 31]]  # left padding of 3 and 6
STOPS = [3, 40, 41, 42, 43, 44, 45]  # many stop tokens: rows end at different steps


def pair(model, capture=False):
    """(the model as it is, a copy that decodes through the static loop)."""
    static = copy.deepcopy(model)
    assert graphed.enable(static, capture=capture)
    return model, static


def both(plain, static, **kw):
    return generate(plain, PROMPTS, **kw), generate(static, PROMPTS, **kw)


def assert_same(a, b, atol=1e-5):
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.truncated, b.truncated)
    assert torch.allclose(a.sampler_logp, b.sampler_logp, atol=atol)


@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9, top_k=20),
                                      dict(temperature=0.0)])
def test_static_loop_samples_what_the_compacting_loop_samples(tiny, sampling):
    plain, static = pair(tiny[0])
    kw = dict(group_size=3, max_new_tokens=20, stop_ids=STOPS, pad_id=0, seeds=[1, 2, 3], **sampling)
    a, b = both(plain, static, **kw)
    lengths = a.completion_mask.sum(-1)
    if sampling["temperature"] > 0:
        assert len(set(lengths.tolist())) > 2 and bool(a.truncated.any()) and not bool(a.truncated.all())
    assert_same(a, b)


def test_rows_are_padded_to_a_power_of_two_and_a_capture_is_reused(tiny):
    plain, static = pair(tiny[0])
    kw = dict(group_size=3, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, pad_id=0)
    for seeds in ([1, 2, 3], [4, 5, 6]):  # 9 rows -> 16; the second rollout reloads the same buffers
        assert_same(*both(plain, static, seeds=seeds, **kw))
    entries = graphed.Graphs  # the model's captures: one key, 16 rows, 8 + 12 positions -> 64
    (key, (state, graphs)), = static.rlvr_graphs.entries.items()
    assert isinstance(static.rlvr_graphs, entries) and key[:2] == (16, 12) and graphs == {}
    assert state.tokens.shape == (16, 12) and state.mask.shape == (16, 64)


def test_a_new_prompt_length_reuses_the_buffers_while_they_are_long_enough(tiny):
    plain, static = pair(tiny[0])
    kw = dict(group_size=2, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[1, 2, 3])
    assert_same(*both(plain, static, **kw))  # 8 + 12 positions: 64
    (first, _), = static.rlvr_graphs.entries.values()
    longer = [p + [9] * 30 for p in PROMPTS]  # 38 + 12 positions: still 64, the same buffers
    assert_same(generate(plain, longer, **kw), generate(static, longer, **kw))
    (again, _), = static.rlvr_graphs.entries.values()
    assert again is first
    longest = [p + [9] * 60 for p in PROMPTS]  # 68 + 12: 128 positions, new buffers in place of the old
    assert_same(generate(plain, longest, **kw), generate(static, longest, **kw))
    (grown, _), = static.rlvr_graphs.entries.values()
    assert grown is not first and grown.mask.shape == (8, 128)


def test_per_row_caps_of_a_last_turn(tiny):
    """A session's last turn (keep=False) with caps that differ per row takes the static loop too."""
    plain, static = pair(tiny[0])
    caps = [3, 9, 1, 12, 5, 7, 12, 2, 4]
    kw = dict(group_size=3, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[7, 8, 9])
    turns = [BuiltinSession(m, PROMPTS, **kw).sample(list(range(9)), caps, keep=False) for m in (plain, static)]
    for x, y, cap in zip(*turns, caps):
        assert x.tokens == y.tokens and len(x.tokens) <= cap and x.stopped == y.stopped
        assert x.logp == pytest.approx(y.logp, abs=1e-5)


def test_a_bf16_rollout_copy_decodes_the_same_through_the_static_loop(tiny):
    copy_ = rollout_copy(tiny[0], "bf16")
    plain, static = pair(copy_)
    a, b = both(plain, static, group_size=2, max_new_tokens=10, temperature=1.0, stop_ids=STOPS, pad_id=0,
                seeds=[1, 2, 3])
    assert_same(a, b, atol=1e-4)


def test_models_lean_cannot_step_are_left_alone():
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=4)
    model = AutoModelForCausalLM.from_config(config)
    assert not graphed.enable(model) and not graphed.enabled(model)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9, top_k=20),
                                      dict(temperature=0.0)])  # top-k / top-p: topk and sort inside the capture
def test_a_captured_graph_replays_the_eager_static_loop(tiny, autocast, sampling):
    model = tiny[0].to("cuda")
    eager, captured = pair(model)[1], pair(model, capture=True)[1]
    kw = dict(group_size=4, max_new_tokens=140, stop_ids=[3], pad_id=0, **sampling)  # 8 + 140: windows 64, 128, 192
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for seeds in ([1, 2, 3], [4, 5, 6]):  # the second rollout replays the first one's captures
            a = generate(eager, PROMPTS, seeds=seeds, **kw)
            b = generate(captured, PROMPTS, seeds=seeds, **kw)
            assert_same(a, b, atol=1e-3 if autocast else 1e-5)
    (_, graphs), = captured.rlvr_graphs.entries.values()
    assert all(isinstance(g, torch.cuda.CUDAGraph) for g in graphs.values())
    assert sorted(graphs) == [64, 128, 192][:len(graphs)] and len(graphs) >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")
def test_a_capture_for_two_tokens_warms_up_within_bounds(tiny):
    """Two tokens to sample: one warm-up step, not two (a second wrote token 2 of 2: a device-side assert)."""
    model = tiny[0].to("cuda")
    eager, captured = pair(model)[1], pair(model, capture=True)[1]
    kw = dict(group_size=2, max_new_tokens=2, temperature=1.0, stop_ids=[], pad_id=0, seeds=[1, 2, 3])
    assert_same(generate(eager, PROMPTS, **kw), generate(captured, PROMPTS, **kw))


class _ExternalReads(TorchDispatchMode):
    """The storages of the tensors (not scalars) ops read that no earlier op under the mode made: what a
    captured step reads from outside itself. It holds them, so their memory is not reused meanwhile."""

    def __init__(self):
        super().__init__()
        self.made, self.read = set(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for a in tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor) and a.dim() > 0 and a.untyped_storage().data_ptr() not in self.made:
                self.read[a.untyped_storage().data_ptr()] = a
        self.made |= {o.untyped_storage().data_ptr() for o in tree_leaves(out) if isinstance(o, torch.Tensor)}
        return out


def test_a_replayed_step_reads_only_buffers_that_outlive_the_rollout(tiny, monkeypatch):
    """A CUDA graph replays on the addresses it was captured with, so every tensor a step reads from
    outside itself must be the same buffer in every rollout that reuses the capture (the state's, the
    model's). The stop ids were a tensor made per rollout: a replay read the first rollout's, freed."""
    _, static = pair(tiny[0])
    reads, step = [], graphed._step

    def first_step_recorded(lm, st, *args):
        if len(reads) < 2 and int(st.t) == 0:  # the first step of each rollout
            with _ExternalReads() as mode:
                step(lm, st, *args)
            reads.append(set(mode.read))
            return
        step(lm, st, *args)

    monkeypatch.setattr(graphed, "_step", first_step_recorded)
    kw = dict(group_size=3, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, pad_id=0)
    for seeds in ([1, 2, 3], [4, 5, 6]):
        generate(static, PROMPTS, seeds=seeds, **kw)
    assert len(static.rlvr_graphs.entries) == 1 and len(reads) == 2 and reads[0]
    assert reads[0] == reads[1]


def test_the_warm_up_before_a_capture_stays_within_the_tokens(tiny):
    """Capturing warms up with real steps; with two tokens to sample a second warm-up step wrote token 2
    of a [B, 2] buffer (on CUDA a device-side assert, fatal to the process). On the CPU the same write
    raises, so the warm-up runs here as it runs before a capture, and leaves the buffers as loaded."""
    _, static = pair(tiny[0])
    generate(static, PROMPTS, group_size=2, max_new_tokens=2, temperature=1.0, stop_ids=[], pad_id=0, seeds=[1, 2, 3])
    (key, (st, _)), = static.rlvr_graphs.entries.items()
    assert st.tokens.shape[1] == 2
    st.t.fill_(0)  # as _load leaves it: token 0 sampled
    before = {k: v.clone() for k, v in graphed._snapshot(st).items()}
    graphed._warm_up(static, st, key[3], 0)
    for k, v in graphed._snapshot(st).items():
        assert torch.equal(v, before[k]), k


def test_models_whose_rotary_embedding_reads_positions_on_the_host_are_left_alone():
    """Dynamic NTK scaling calls torch.max(position_ids) and compares it in Python at every step: not
    capturable, and a replay would not redo it. Such a model decodes eagerly."""
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2,
                         rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    model = AutoModelForCausalLM.from_config(config)
    assert not graphed.enable(model) and not graphed.enabled(model)


def test_an_fsdp_sharded_model_is_left_alone(tiny, tmp_path):
    """FSDP gathers the full weights into fresh memory at each unshard (rlvr.train.distributed.gathered)
    and frees them at reshard, so a graph captured in one rollout would read freed memory in the next."""
    import torch.distributed as tdist
    from torch.distributed.fsdp import fully_shard

    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = tiny[0]
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model.model)
        assert not graphed.enable(model) and not graphed.enabled(model)
    finally:
        tdist.destroy_process_group()


def test_under_autocast_the_static_cache_is_in_its_dtype_and_samples_the_same(tiny):
    """transformers' prefill leaves keys in float32 under autocast (bf16 projections times float32 RoPE
    tables); attention casts them to bf16 at every call, so a float32 static cache was re-cast over every
    position of every layer at every step. Stored in bf16, the tokens are the same."""
    plain, static = pair(tiny[0])
    kw = dict(group_size=3, max_new_tokens=16, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[1, 2, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = both(plain, static, **kw)
    (st, _), = static.rlvr_graphs.entries.values()
    assert {layer.keys.dtype for layer in st.kv} == {layer.values.dtype for layer in st.kv} == {torch.bfloat16}
    # the two loops round differently in bf16 (RoPE, norms): 0.0039 at most here, with a float32 cache too
    assert_same(a, b, atol=1e-2)


def test_a_deep_copy_of_the_model_starts_without_captures(tiny):
    """Saving a LoRA model deep-copies it to merge the adapters (rlvr/report/sinks.py). Captures are bound
    to the original's buffers and a CUDA graph cannot be copied: the copy starts empty, and decodes the same."""
    plain, static = pair(tiny[0])
    kw = dict(group_size=2, max_new_tokens=6, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[1, 2, 3])
    first = generate(static, PROMPTS, **kw)
    assert len(static.rlvr_graphs.entries) == 1
    twin = copy.deepcopy(static)
    assert graphed.enabled(twin) and twin.rlvr_graphs is not static.rlvr_graphs and twin.rlvr_graphs.entries == {}
    assert_same(first, generate(twin, PROMPTS, **kw))


def test_graph_decode_enables_models_on_a_gpu_only_and_warns_for_one_it_cannot_step(tiny, monkeypatch, caplog):
    from rlvr.config.sections import RolloutConfig
    from rlvr.rollout import engines

    model = copy.deepcopy(tiny[0])
    engines.graph_decode(RolloutConfig(), model)
    assert not graphed.enabled(model)   # on the CPU: the compacting loop as before
    on_gpu = lambda m: torch.device("cuda")
    monkeypatch.setattr(engines, "of_model", on_gpu)   # placement is all graph_decode reads
    engines.graph_decode(RolloutConfig(cuda_graph=False), model)
    assert not graphed.enabled(model)
    mistral = AutoModelForCausalLM.from_config(MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=4))
    with caplog.at_level("WARNING"):
        engines.graph_decode(RolloutConfig(), model, model)
        assert graphed.enabled(model) and not caplog.records
        engines.graph_decode(RolloutConfig(), model, mistral)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["rollout.cuda_graph"]


def test_engine_sleep_releases_the_static_cache_and_the_next_rollout_is_the_same(tiny):
    """The loop calls engine.sleep() between the rollout and the update: the static buffers (the KV cache
    above all) are let go, so the update can use that memory, and the next rollout builds them again."""
    import gc
    import weakref

    from rlvr.rollout.engines import builtin_engine

    _, static = pair(tiny[0])
    engine = builtin_engine(static)
    kw = dict(seeds=[1, 2, 3], group_size=2, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0,
              stop_ids=STOPS, pad_id=0)
    first = engine.generate(PROMPTS, **kw)
    (st, _), = static.rlvr_graphs.entries.values()
    kv = weakref.ref(st.kv[0].keys)
    del st
    engine.sleep()
    gc.collect()
    assert static.rlvr_graphs.entries == {} and kv() is None
    assert graphed.release(static) == 0  # nothing left to drop
    assert_same(first, engine.generate(PROMPTS, **kw), atol=0)
    assert len(static.rlvr_graphs.entries) == 1


def test_a_single_turn_reads_the_prefill_block_without_gathering_a_batch(tiny, monkeypatch):
    """The static loop copies each row's context into its own buffers straight from the prefill's P rows
    (G rollout rows per prompt row): no batch of P x G rows with room for every new token is built first."""
    plain, static = pair(tiny[0])
    kw = dict(group_size=3, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[1, 2, 3])
    expected = generate(plain, PROMPTS, **kw)

    def no_gather(self, rows, extra):
        raise AssertionError("gathered a batch")
    monkeypatch.setattr(BuiltinSession, "_gather", no_gather)
    assert_same(expected, generate(static, PROMPTS, **kw))


def test_attention_windows_grow_with_the_cache_and_sample_what_the_compacting_loop_samples(tiny, monkeypatch):
    """Each step attends over the smallest multiple of 64 positions that holds its slot: 8-token prompts and
    150 new tokens run windows 64, 128 and 192 (the buffers hold 192), with the compacting loop's tokens."""
    plain, static = pair(tiny[0])
    windows, step = [], graphed._step

    def recorded(lm, st, sampling, pad_id, window=None):
        windows.append((int(st.slot), window))
        step(lm, st, sampling, pad_id, window)
    monkeypatch.setattr(graphed, "_step", recorded)
    kw = dict(group_size=2, max_new_tokens=150, temperature=1.0, stop_ids=[3], pad_id=0, seeds=[1, 2, 3])
    a, b = both(plain, static, **kw)
    assert_same(a, b)
    assert all(slot < window <= slot + 64 for slot, window in windows)
    assert {w for _, w in windows} == {64, 128, 192} and windows[0] == (8, 64)


def test_multi_turn_sessions_take_the_static_loop_and_sample_what_the_compacting_loop_samples(tiny):
    """Every turn of an episode decodes through the static loop: rows that end a turn are parked from
    the static buffers (their fed tokens kept, the positions where they decoded on masked out), the
    environment's tokens are prefilled onto them, and a later turn samples what the compacting loop's
    parked caches sample; some rows extended and others not make a turn of several blocks."""
    plain, static = pair(tiny[0])
    kw = dict(group_size=2, temperature=1.0, stop_ids=STOPS, pad_id=0, seeds=[7, 8, 9])
    sessions = [BuiltinSession(m, PROMPTS, **kw) for m in (plain, static)]
    rows = list(range(6))

    def turn(rows, caps, keep=True):
        a, b = (s.sample(rows, caps, keep=keep) for s in sessions)
        for x, y in zip(a, b):
            assert x.tokens == y.tokens and x.stopped == y.stopped
            assert x.logp == pytest.approx(y.logp, abs=1e-5)
        return a

    first = turn(rows, [9, 3, 12, 7, 1, 12])
    assert len({len(t.tokens) for t in first}) > 2  # rows ended at different steps
    for s in sessions:
        s.extend(rows, [[30 + i, 31] for i in rows])
    turn(rows, [10] * 6)
    for s in sessions:
        s.extend(rows[:3], [[40, 41, 42]] * 3)
        s.extend(rows[3:], [[50]] * 3)
    turn(rows[:3], [8, 8, 8])  # one block
    for s in sessions:
        s.extend(rows[:3], [[60]] * 3)
    turn(rows, [12] * 6, keep=False)  # rows from two blocks
    assert len(static.rlvr_graphs.entries) >= 1
