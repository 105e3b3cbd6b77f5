"""Multi-turn sessions: the first turn is single-turn generate; later turns continue each row's kept
context, so their log-probs equal one full forward of the whole token sequence."""
import pytest
import torch

from rlvr.rollout.builtin import BuiltinSession, RecomputeSession, _cut, generate

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 22, 23]]
STOPS = [3, 30, 31, 32, 33, 34, 35, 36, 37]  # many stop tokens: rows end their turns at different steps


def sampling(tok, **kw):
    return dict(group_size=3, temperature=1.0, stop_ids=STOPS, pad_id=tok.pad_token_id, **kw)


def full_logp(model, seq: list[int], tokens: list[int]) -> list[float]:
    """log p of `tokens`, the last len(tokens) of seq, from one forward of the whole sequence."""
    with torch.no_grad():
        lp = model(torch.tensor([seq], device=model.device)).logits.log_softmax(-1)[0]
    start = len(seq) - len(tokens)
    return [float(lp[start - 1 + i, t]) for i, t in enumerate(tokens)]


def test_first_turn_samples_what_generate_samples(tiny_on):
    model, tok = tiny_on
    r = generate(model, PROMPTS, max_new_tokens=10, seeds=[11, 22], **sampling(tok))
    s = BuiltinSession(model, PROMPTS, seeds=[11, 22], **sampling(tok))
    turns = s.sample(list(range(6)), [10] * 6, keep=False)
    assert [t.tokens for t in turns] == r.completion_token_lists()
    assert [t.stopped for t in turns] == (~r.truncated).tolist()
    lengths = r.completion_mask.sum(-1).long().tolist()
    for t, row, n in zip(turns, r.sampler_logp.tolist(), lengths):
        assert t.logp == pytest.approx(row[:n], abs=1e-6)


def test_later_turns_continue_each_rows_context(tiny_on):
    """Rows stop at different steps (their caches are parked), get environment tokens of different
    lengths, and sample again: every log-prob equals a full forward of prompt + turns."""
    model, tok = tiny_on
    s = BuiltinSession(model, PROMPTS, seeds=[1, 2], **sampling(tok))
    first = s.sample(list(range(6)), [12] * 6)
    assert len({len(t.tokens) for t in first}) > 1  # the test needs rows that finished at different steps
    rows, env = [0, 2, 3, 5], [[40, 41], [42], [43, 44, 45, 46], [47, 48, 49]]
    s.extend(rows, env)
    second = s.sample(rows, [8, 3, 8, 8])
    assert len(second[1].tokens) <= 3
    for b, e, t in zip(rows, env, second):
        seq = PROMPTS[b // 3] + first[b].tokens + e + t.tokens
        assert t.logp == pytest.approx(full_logp(model, seq, t.tokens), abs=1e-5)
    s.extend([3], [[50]])
    third = s.sample([3], [5])[0]
    seq = PROMPTS[1] + first[3].tokens + env[2] + second[2].tokens + [50] + third.tokens
    assert third.logp == pytest.approx(full_logp(model, seq, third.tokens), abs=1e-5)


def test_recompute_session_samples_the_same_tokens(tiny):
    model, tok = tiny
    kept = BuiltinSession(model, PROMPTS, seeds=[7, 8], **sampling(tok))
    redo = RecomputeSession(lambda p, **kw: generate(model, p, **kw), PROMPTS, seeds=[7, 8], **sampling(tok))
    for s in (kept, redo):
        s.first = s.sample(list(range(6)), [10] * 6)
        s.extend([1, 4], [[40, 41, 42], [43]])
        s.second = s.sample([1, 4], [6, 6])
    assert [t.tokens for t in kept.first] == [t.tokens for t in redo.first]
    assert [t.tokens for t in kept.second] == [t.tokens for t in redo.second]
    for a, b in zip(kept.second, redo.second):
        assert a.logp == pytest.approx(b.logp, abs=1e-5)


def test_sampling_twice_without_extend_is_refused(tiny):
    model, tok = tiny
    s = BuiltinSession(model, PROMPTS, **sampling(tok))
    s.sample([0, 1], [4, 4])
    with pytest.raises(RuntimeError, match="before extend"):
        s.sample([0], [4])


def test_cut_keeps_the_stop_token_or_stops_at_the_cap():
    assert _cut([4, 5, 3, 6], [-1.0, -2.0, -3.0, -4.0], [3], 4).tokens == [4, 5, 3]
    t = _cut([4, 5, 6, 7], [-1.0, -2.0, -3.0, -4.0], [3], 2)
    assert (t.tokens, t.logp, t.stopped) == ([4, 5], [-1.0, -2.0], False)


def test_hf_engine_sessions_recompute_the_history(tiny):
    """rollout.engine=hf: later turns run HF generate on each row's whole history; their log-probs are
    still the policy's on the full sequence."""
    from rlvr.rollout.hf_engine import hf_generate
    from rlvr.rollout.engines import PolicyEngine

    model, tok = tiny
    s = PolicyEngine(model, hf_generate).session(PROMPTS, seeds=[1, 2], top_p=1.0, top_k=0, **sampling(tok))
    assert isinstance(s, RecomputeSession)
    first = s.sample(list(range(6)), [8] * 6)
    s.extend([0, 4], [[40, 41], [42]])
    second = s.sample([0, 4], [6, 6])
    for b, e, t in zip([0, 4], [[40, 41], [42]], second):
        seq = PROMPTS[b // 3] + first[b].tokens + e + t.tokens
        assert t.logp == pytest.approx(full_logp(model, seq, t.tokens), abs=1e-4)
