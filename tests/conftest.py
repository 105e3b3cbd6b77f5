import json
import os
import textwrap
import threading
from pathlib import Path

import pytest
import torch

# Nothing in the suite may reach the Hugging Face Hub (CI has none): offline, and an endpoint that is no one
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"

from rlvr.models import tiny_random
from tests.sandbox_skip import pytest_runtest_call, pytest_runtest_setup  # noqa: F401 (hooks: skip without a sandbox)


@pytest.fixture
def tiny():
    """A 2-layer random Llama and its character tokenizer."""
    model, tok = tiny_random(seed=0)
    model.eval()
    return model, tok


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # equivalence tests run on each


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture
def tiny_on(device):
    """The tiny model on each device present (the CPU always, CUDA when torch sees a GPU)."""
    model, tok = tiny_random(seed=0)
    model.to(device).eval()
    return model, tok


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file a run wrote (metrics.jsonl, samples.jsonl, ...), one per line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def python_block(src: str, before: str = "") -> str:
    """A completion whose one fenced Python block is `src` (dedented), after the prose `before`."""
    return before + "```python\n" + textwrap.dedent(src).strip() + "\n```"


# f(x) = x + 1, and a function spec and an assert spec (with a hidden case) that it passes
ADD_ONE = python_block("def f(x):\n    return x + 1")
ADD_ONE_FUNCTION_SPEC = {"kind": "function", "entry_point": "f", "cases": [{"args": [1], "expected": 2}]}
ADD_ONE_ASSERT_SPEC = {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert f(41) == 42"]}


def returns_within(seconds: float, fn, *args, **kwargs):
    """fn(*args, **kwargs), run on a thread of its own: a hang backstop, never a measure of speed. The test
    fails, saying so, when fn has not returned after `seconds`, which is set far above what a loaded machine
    needs and below the hang it guards against (the attacks' sleeps of 100 s)."""
    box = {}

    def call():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's own thread
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} had not returned after {seconds} s: it hangs", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box["value"]


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: the test runs on CUDA (skipped where torch sees no GPU)")
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False  # the files' order is longest_files_first's


# The slow tier by measured cost, not by folder: tests/slow_tests.txt names each test function with a case over
# ~1.5 s on a 2-core machine (bench/suite.py --write-slow makes it from a --durations=0 log of the suite), and
# the shared fixtures that train a run ("fixture NAME"): a test that asks for one is slow however short its own
# part, since the run's cost falls on whichever of its users the tier runs first
SLOW_LINES = [line.split() for line in (Path(__file__).parent / "slow_tests.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
SLOW_TESTS = {words[0]: float(words[1]) if words[1:2] and words[1].replace(".", "", 1).isdigit() else 1.5
              for words in SLOW_LINES if words[0] != "fixture"}  # test -> seconds (over 1.5 where unsaid)
SLOW_FIXTURES = {words[1] for words in SLOW_LINES if words[0] == "fixture"}
FAST_TEST_S = 0.2  # what a test not in slow_tests.txt costs, near enough to order the groups


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[", 1)[0] in SLOW_TESTS or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = longest_files_first(items)


def longest_files_first(items: list) -> list:
    """The items file by file, the files in order of their cost (slow_tests.txt's seconds): make test runs
    two workers (pytest-xdist, --dist loadfile: a file's tests on one worker, its module fixtures made once)
    that take the files in this order, so that no long file starts last while the other worker has nothing
    left. Both workers collect the same order, as xdist requires."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    cost = {f: sum(SLOW_TESTS.get(i.nodeid.split("[", 1)[0], FAST_TEST_S) for i in tests)
            for f, tests in files.items()}
    return [item for f in sorted(files, key=lambda f: -cost[f]) for item in files[f]]  # stable on ties


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _cpu_unless_asked(request, monkeypatch):
    """On a GPU machine train.device=auto would move every whole run to CUDA and bf16, where the exact
    equalities those tests pin (resume = uninterrupted, N processes = one) do not hold bit for bit. So a
    test sees no GPU unless it asks for one: the gpu marker, or the cuda case of the `device` fixture."""
    params = getattr(request.node, "callspec", None)
    asked = request.node.get_closest_marker("gpu") or (params and params.params.get("device") == "cuda")
    if not asked:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
