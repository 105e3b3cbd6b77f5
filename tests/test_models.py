import pytest

from rlvr.errors import RlvrError
from rlvr.models import load_model, stop_token_ids, tiny_random, tiny_tokenizer
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
