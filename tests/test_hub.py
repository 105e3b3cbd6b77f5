"""Hub names through a Hugging Face cache built here (HF_HUB_CACHE in tmp: models--org--name/refs/main and
snapshots/<rev>/), offline: the suite never reaches the network (tests/conftest.py sets HF_HUB_OFFLINE and
an endpoint that is no one)."""
import json

import pytest
import torch

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.hub import is_hub_name
from rlvr.models import load_model, tiny_random
from rlvr.tasks import build_splits

REV = "0123456789abcdef0123456789abcdef01234567"


def repo(cache, kind: str, repo_id: str):
    """The snapshot folder of `repo_id` in the cache layout huggingface_hub reads."""
    root = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(REV)
    snap = root / "snapshots" / REV
    snap.mkdir(parents=True)
    return snap


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def gsm8k(cache):
    """openai/gsm8k's layout: <config>/<split>-00000-of-00001.parquet for configs main and socratic."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    snap = repo(cache, "dataset", "openai/gsm8k")
    for config in ("main", "socratic"):
        (snap / config).mkdir()
        for split, n in (("train", 10), ("test", 3)):
            rows = [{"question": f"{config} {split} {i}: what is {i} + {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>"
                     f"{2 * i}\n#### {2 * i}"} for i in range(n)]
            pq.write_table(pa.Table.from_pylist(rows), snap / config / f"{split}-00000-of-00001.parquet")


def test_a_cached_hub_model_loads_offline(cache, tmp_path):
    model, tok = tiny_random(seed=3)
    snap = repo(cache, "model", "someone/tiny-random-llama")
    model.save_pretrained(snap)
    tok.save_pretrained(snap)
    loaded, loaded_tok = load_model("someone/tiny-random-llama")
    ids = torch.tensor([loaded_tok("Answer: 42")["input_ids"]])
    assert loaded_tok("Answer: 42")["input_ids"] == tok("Answer: 42")["input_ids"]
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_an_uncached_hub_model_offline_names_the_download_command(cache):
    with pytest.raises(RlvrError) as e:
        load_model("Qwen/Qwen2.5-0.5B-Instruct")
    assert str(e.value) == (f"model 'Qwen/Qwen2.5-0.5B-Instruct' is not a local path and not in the Hugging Face "
                            f"cache ({cache}), and HF_HUB_OFFLINE is set: download it on a machine that is online with "
                            "`hf download Qwen/Qwen2.5-0.5B-Instruct` (into that cache), or unset HF_HUB_OFFLINE")


def test_a_cached_hub_dataset_with_its_config_and_split(cache):
    gsm8k(cache)
    s = build_splits(TaskConfig(name="openai/gsm8k", config="main", columns={"prompt": "question"}, heldout_size=2))
    assert (len(s.train), len(s.heldout)) == (8, 2)
    assert all(p.question.startswith("main train ") for p in s.train + s.heldout)
    assert s.train[0].origin == "openai/gsm8k (main, train) train-00000-of-00001.parquet row 1"
    assert s.train[0].answer == "0 + 0 = <<0+0=0>>0\n#### 0"  # the gold as the dataset gives it
    test = build_splits(TaskConfig(name="openai/gsm8k", config="socratic", split="test",
                                   columns={"prompt": "question"}, heldout_size=1))
    assert len(test.train) == 2 and all(p.question.startswith("socratic test ") for p in test.train)


def test_a_hub_dataset_holds_out_its_test_split_when_asked(cache):
    gsm8k(cache)
    task = TaskConfig(name="openai/gsm8k", config="main", heldout_split="test", columns={"prompt": "question"})
    s = build_splits(task)
    assert len(s.train) == 10 and [p.question[:14] for p in s.heldout] == ["main test 0: w", "main test 1: w",
                                                                             "main test 2: w"]
    assert s.heldout[0].origin == "openai/gsm8k (main, test) test-00000-of-00001.parquet row 1"
    assert len(build_splits(TaskConfig(**{**vars(task), "heldout_size": 2})).heldout) == 2
    with pytest.raises(RlvrError, match="set task.heldout_file or task.heldout_split, not both"):
        build_splits(TaskConfig(**{**vars(task), "heldout_file": "x.jsonl"}))


def test_hub_dataset_errors_name_the_setting_to_change(cache):
    gsm8k(cache)
    with pytest.raises(RlvrError, match=r"dataset 'openai/gsm8k' has several configs \(main, socratic\): choose one "
                                        r"with task.config"):
        build_splits(TaskConfig(name="openai/gsm8k", columns={"prompt": "question"}))
    with pytest.raises(RlvrError, match=r"dataset 'openai/gsm8k': no .parquet, .jsonl, .json, .csv file of split 'validation' "
                                        r"in config 'main' in .* \(it has: main/test-00000-of-00001.parquet, "
                                        r"main/train-00000-of-00001.parquet, socratic/test.*\); set task.split and "
                                        r"task.config"):
        build_splits(TaskConfig(name="openai/gsm8k", config="main", split="validation"))
    with pytest.raises(RlvrError, match=r"dataset 'openai/missing' is not a local path and not in the Hugging Face "
                                        r"cache .* `hf download openai/missing --repo-type dataset`"):
        build_splits(TaskConfig(name="openai/missing"))


def test_a_jsonl_hub_dataset_with_one_config(cache):
    snap = repo(cache, "dataset", "me/sums")
    (snap / "data").mkdir()
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(12)]
    (snap / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (snap / "data" / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    s = build_splits(TaskConfig(name="me/sums"))
    assert len(s.train) + len(s.heldout) == 12 and len(s.heldout) == 2  # a fifth of 12, with a note
    assert any(n.startswith("me/sums (train): 12 rows: holding out 2 (a fifth)") for n in s.notes)


def test_a_hub_dataset_of_json_and_gzipped_jsonl_files(cache):
    """Hub datasets ship `.json` (an array, or JSON lines) and `.jsonl.gz` files: each is a data file of its
    split, read as a file task's; another JSON file beside them (dataset_infos.json) is of no split."""
    import gzip

    snap = repo(cache, "dataset", "me/json")
    rows = [{"prompt": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(10)]
    (snap / "train.json").write_text(json.dumps(rows[:6], indent=1))
    (snap / "train-2.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows[6:]).encode()))
    (snap / "test.json").write_text(json.dumps(rows[0]) + "\n")
    (snap / "dataset_infos.json").write_text("{}")
    s = build_splits(TaskConfig(name="me/json", heldout_split="test", few_shot=0))
    assert sorted(int(p.answer) for p in s.train) == list(range(3, 12))  # the held-out prompt leaves train
    assert [p.question for p in s.heldout] == ["What is 0 + 2?"]


def test_a_local_copy_of_a_hub_dataset_reads_as_the_hub_one(cache, tmp_path):
    """`hf download openai/gsm8k --repo-type dataset --local-dir gsm8k` (or a git clone of it), then
    task.name=gsm8k: the folder is read in the Hub's layout, config and split as for the Hub name (its
    `.cache` metadata skipped); it was refused as 'not one written by datasets' save_to_disk'. A folder with
    no data file at all still says what it expected."""
    import shutil

    gsm8k(cache)
    local = tmp_path / "gsm8k"
    shutil.copytree(cache / "datasets--openai--gsm8k" / "snapshots" / REV, local)
    (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (local / ".cache" / "huggingface" / "download" / "train.json").write_text("not data")
    s = build_splits(TaskConfig(name=str(local), config="main", heldout_split="test", few_shot=0,
                                columns={"prompt": "question"}))
    assert len(s.train) == 10 and len(s.heldout) == 3 and s.heldout[0].question.startswith("main test 0")
    assert s.heldout[2].answer.endswith("#### 4")
    with pytest.raises(RlvrError, match=r"dataset '.*gsm8k' has several configs \(main, socratic\)"):
        build_splits(TaskConfig(name=str(local), columns={"prompt": "question"}))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RlvrError, match=r"empty: a directory, but not one written by datasets' save_to_disk "
                                        r"\(no state.json\), nor one holding data files"):
        build_splits(TaskConfig(name=str(tmp_path / "empty")))


def test_is_hub_name_leaves_paths_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert is_hub_name("openai/gsm8k") and is_hub_name("Qwen/Qwen2.5-0.5B-Instruct")
    (tmp_path / "runs" / "x").mkdir(parents=True)
    assert not is_hub_name("runs/x")  # a local folder wins
    assert not any(map(is_hub_name, ("tiny-random", "runs/demo/final", "./a/b", "/abs/x", "data.jsonl")))


def test_rlvr_plan_reads_a_cached_hub_models_config_alone(cache, capsys):
    from rlvr.cli import main
    from rlvr.plan import SHAPES, shape_of, stored_dtype

    # only config.json in the cache (`hf download ORG/NAME config.json`): no weights are needed to plan
    snap = repo(cache, "model", "meta-llama/Llama-3.1-8B-Instruct")
    (snap / "config.json").write_text((SHAPES / "llama-3.1-8b.json").read_text())
    shape = shape_of("meta-llama/Llama-3.1-8B-Instruct")
    assert shape.params == 8_030_261_248 and shape.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert stored_dtype("meta-llama/Llama-3.1-8B-Instruct") == "bfloat16"  # model.dtype auto reads it
    assert main(["plan", "--model.name=meta-llama/Llama-3.1-8B-Instruct", "--model.dtype=auto", "--model.lora.r=16",
                 "--memory=80GiB"]) == 0
    assert "meta-llama/Llama-3.1-8B-Instruct (8.03B parameters) on cuda, weights bfloat16, LoRA r=16" in capsys.readouterr().out
    # not cached: the one file to fetch, named
    with pytest.raises(RlvrError, match=rf"'Qwen/Qwen2.5-7B-Instruct' is not in the Hugging Face cache \({cache}\); "
                                        r"the plan needs its config.json alone: `hf download Qwen/Qwen2.5-7B-Instruct "
                                        r"config.json`"):
        shape_of("Qwen/Qwen2.5-7B-Instruct")


def test_an_uncached_hub_model_with_no_network_says_where_it_looked_and_what_to_do(cache, monkeypatch):
    # online allowed, but the endpoint answers no one (tests/conftest.py): each connection is refused at once.
    # huggingface_hub retries a refused connection 5 times, sleeping 1, 2, 4, 8 and 8 s between tries (23 s of
    # waiting); its retries still run here, only its sleeps are recorded instead of slept
    import types

    import huggingface_hub.utils._http as hf_http

    waits = []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_http, "time", types.SimpleNamespace(**{**vars(hf_http.time), "sleep": waits.append}))
    with pytest.raises(RlvrError) as e:
        load_model("Qwen/Qwen2.5-7B-Instruct")
    assert waits  # it retried (and gave up) before the message below, as it would with a network that is down
    assert str(e.value) == (
        f"model 'Qwen/Qwen2.5-7B-Instruct' is not a local path nor in the Hugging Face cache ({cache}), and could "
        "not be downloaded (ConnectError: [Errno 111] Connection refused): download it on a machine that is online "
        "with `hf download Qwen/Qwen2.5-7B-Instruct` (into that cache; HF_HUB_CACHE or HF_HOME choose it), or give "
        "a local model directory (config.json, weights and tokenizer, as save_pretrained writes them)")


def test_a_hub_model_with_pytorch_weights_only_downloads_them_and_loads(cache, tmp_path):
    """A repository holding only pytorch_model.bin (older models) gets its weights fetched: the patterns
    rlvr gives snapshot_download, through huggingface_hub's own filter, select the files below from a model
    folder as the Hub lists it; those files, and no others, in the cache load as the model saved."""
    import shutil

    from huggingface_hub.utils import filter_repo_objects

    from rlvr.hub import model_patterns

    model, tok = tiny_random(seed=5)
    remote = tmp_path / "remote"  # the repository's files
    tok.save_pretrained(remote)
    model.config.save_pretrained(remote)
    torch.save(model.state_dict(), remote / "pytorch_model.bin")
    (remote / "training_args.bin").write_bytes(b"not weights")
    (remote / "tf_model.h5").write_bytes(b"not for torch")
    (remote / "README.md").write_text("# a model")
    files = sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file())
    chosen = sorted(filter_repo_objects(files, allow_patterns=model_patterns("old/bin-only", files)))
    assert chosen == ["chat_template.jinja", "config.json", "pytorch_model.bin", "tokenizer.json",
                      "tokenizer_config.json"]
    snap = repo(cache, "model", "old/bin-only")
    for name in chosen:  # what snapshot_download would have written
        shutil.copy(remote / name, snap / name)
    loaded, _ = load_model("old/bin-only")
    ids = torch.tensor([tok("Answer: 42")["input_ids"]])
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_a_hub_model_with_both_formats_downloads_safetensors_only():
    from huggingface_hub.utils import filter_repo_objects

    from rlvr.hub import model_patterns

    # openai-community/gpt2's files, as the Hub lists them (abridged)
    gpt2 = [".gitattributes", "64-8bits.tflite", "README.md", "config.json", "flax_model.msgpack",
            "generation_config.json", "merges.txt", "model.safetensors", "onnx/decoder_model.onnx",
            "pytorch_model.bin", "rust_model.ot", "tf_model.h5", "tokenizer.json", "tokenizer_config.json", "vocab.json"]
    assert sorted(filter_repo_objects(gpt2, allow_patterns=model_patterns("openai-community/gpt2", gpt2))) == [
        "config.json", "generation_config.json", "merges.txt", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json", "vocab.json"]
    sharded = ["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
               "pytorch_model.bin.index.json", "tokenizer.model"]
    assert sorted(filter_repo_objects(sharded, allow_patterns=model_patterns("old/sharded", sharded))) == sharded
    with pytest.raises(RlvrError, match=r"model 'x/gguf' on the Hugging Face Hub has no weights rlvr loads "
                                        r"\(\*.safetensors or pytorch_model\*.bin; it has: README.md, m.Q4_K_M.gguf\)"):
        model_patterns("x/gguf", ["README.md", "m.Q4_K_M.gguf"])
