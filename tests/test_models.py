import pytest

from rlvr.errors import RlvrError
from rlvr.models import base_model_path, load_model, stop_token_ids, tiny_random, tiny_tokenizer
from rlvr.tasks import encode_prompt


def test_tiny_tokenizer_round_trip_and_chat_template():
    tok = tiny_tokenizer()
    ids = tok("What is 3 + 4?\nAnswer: 7")["input_ids"]
    assert tok.decode(ids) == "What is 3 + 4?\nAnswer: 7"
    prompt = encode_prompt(tok, "Q?", [("q1", "a1")])
    text = tok.decode(prompt)
    assert text == "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n" \
                   "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"


def test_tiny_random_is_seeded():
    a, _ = tiny_random(seed=0)
    b, _ = tiny_random(seed=0)
    assert all((x == y).all() for x, y in zip(a.parameters(), b.parameters()))


def test_stop_ids(tiny):
    model, tok = tiny
    assert stop_token_ids(model, tok) == [tok.eos_token_id]


def test_unknown_name_lists_builtins():
    with pytest.raises(RlvrError, match="unknown model 'gpt5'.*smollm2-135m-instruct, tiny-random"):
        load_model("gpt5")


def test_missing_directory(tmp_path):
    with pytest.raises(RlvrError, match="model directory not found: ./nope/model"):
        load_model("./nope/model")
    with pytest.raises(RlvrError, match="has no config.json"):
        load_model(str(tmp_path))


def test_saved_tiny_model_loads_from_directory(tmp_path, tiny):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_model(str(tmp_path))
    assert tok2("12")["input_ids"] == tok("12")["input_ids"]
    assert all((x == y).all() for x, y in zip(model.parameters(), loaded.parameters()))


def test_a_directory_without_a_tokenizer_says_so(tmp_path, tiny):
    # model.save_pretrained alone: transformers' error asked for sentencepiece or tiktoken
    model, tok = tiny
    model.save_pretrained(tmp_path)
    with pytest.raises(RlvrError, match=rf"model directory {tmp_path} has no tokenizer \(none of tokenizer.json, "
                                        rf"tokenizer_config.json, .*\): save the base model's tokenizer beside the "
                                        rf"weights, AutoTokenizer.from_pretrained\(BASE\).save_pretrained"):
        load_model(str(tmp_path))
    tok.save_pretrained(tmp_path)  # and with it the directory loads
    assert load_model(str(tmp_path))[1]("12")["input_ids"] == tok("12")["input_ids"]


def test_a_sharded_checkpoint_loads_whole(tmp_path, tiny):
    # safetensors shards and their index, as save_pretrained writes a large model
    model, tok = tiny
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    tok.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("*.safetensors"))) > 2
    loaded, _ = load_model(str(tmp_path))
    assert all((x == y).all() for x, y in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_a_random_shape_is_built_from_its_shipped_config_alone():
    import torch

    from rlvr.models import load_model
    from rlvr.plan import shape_of

    model, tok = load_model("random:smollm2-135m", "float32", "cpu")
    assert sum(p.numel() for p in model.parameters()) == shape_of("smollm2-135m").params
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as its config says
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tok("What is 2 + 2?")["input_ids"]])).logits
    assert logits.shape[-1] == 49152 and torch.isfinite(logits).all() and 0.1 < logits.std() < 10


def test_an_unknown_random_shape_names_the_shipped_ones():
    import pytest

    from rlvr.errors import RlvrError
    from rlvr.models import load_model

    with pytest.raises(RlvrError, match="llama-3.1-8b"):
        load_model("random:gpt-5", "float32", "cpu")


def test_a_save_draws_no_progress_bar_and_leaves_the_setting_as_it_was(tmp_path, tiny, capfd):
    from transformers.utils import logging as hf_logging

    from rlvr.io import atomic_save_model

    model, tok = tiny
    assert hf_logging.is_progress_bar_enabled()
    model.save_pretrained(tmp_path / "plain")  # the control: transformers' own save draws its bar
    assert "Writing model shards" in capfd.readouterr().err
    atomic_save_model(model, tok, tmp_path / "final")
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()
    assert load_model(str(tmp_path / "final"))[0] is not None


def varied(completions, **kwargs):
    """A reward that differs across a group (a random model's answers are all wrong): the update moves."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


@pytest.mark.slow
@pytest.mark.parametrize("setting", [{}, {"model__lora__r": 4}, {"model__lora__r": 4, "model__quantize": "nf4"}],
                         ids=["full", "lora", "nf4-lora"])
def test_a_runs_checkpoint_loads_as_its_model(tmp_path, setting):
    """model.name (rlvr eval --model, rlvr train --model.name) takes RUN_DIR/checkpoints/step_N.pt: the run's
    model with that step's weights, LoRA merged as final/ holds it; the last step's is final/ itself."""
    import torch

    import rlvr
    from rlvr.train.checkpoint import checkpoints

    out = tmp_path / "run"
    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(12)]
    rlvr.fit(model="tiny-random", rewards={varied: 1.0}, train_dataset=rows, train__steps=2, train__save_every=1,
             train__keep_checkpoints=2, rollout__prompts_per_step=2, rollout__group_size=4,
             rollout__max_new_tokens=6, eval__max_new_tokens=4, optimizer__lr=0.05, optimizer__warmup_steps=0,
             train__out=str(out), **setting)
    first, last = checkpoints(out)
    x = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        logits = {name: load_model(str(m))[0](x).logits for name, m in
                  (("first", first), ("last", last), ("final", out / "final"), ("base", "tiny-random"))}
    assert torch.equal(logits["last"], logits["final"])
    assert base_model_path(str(last)) == str(last.resolve())  # a LoRA run started from it: its adapter's base
    assert not torch.allclose(logits["first"], logits["last"]) and not torch.allclose(logits["first"], logits["base"])
    with pytest.raises(RlvrError, match=rf"^{out} is an rlvr run directory, not a model: its trained model is "
                                        rf"{out / 'final'}$"):
        load_model(str(out))
