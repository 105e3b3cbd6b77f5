"""The vLLM server engine's client side, without vLLM: request bodies, answers to completions, the weight files,
and servers that refuse, hang or answer the wrong version (real sockets on 127.0.0.1). The engine against real
vLLM servers is tests/rollout/test_vllm_server.py (the vLLM venv)."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from safetensors.torch import load_file

from rlvr.errors import RlvrError
from rlvr.rollout import vllm_server as vs
from rlvr.train.settings import engine_settings


def test_completion_body_asks_for_token_ids_and_sampled_logprobs():
    body = vs.completion_body("m", [1, 2], seed=7, group_size=3, max_new_tokens=5, temperature=0.8, top_p=0.9,
                              top_k=0, stop_ids=[2, 9])
    assert body == {"model": "m", "prompt": [1, 2], "n": 3, "max_tokens": 5, "temperature": 0.8, "top_p": 0.9,
                    "top_k": -1, "seed": 7, "stop_token_ids": [2, 9], "logprobs": 0, "return_token_ids": True,
                    "skip_special_tokens": False}
    assert vs.completion_body("m", [1], seed=None, group_size=2, max_new_tokens=1, temperature=1.0, top_p=1.0,
                              top_k=4, stop_ids=[])["top_k"] == 4


def test_completion_lists_in_index_order():
    answer = {"choices": [
        {"index": 1, "token_ids": [7, 2], "logprobs": {"token_logprobs": [-0.5, -0.25]}, "finish_reason": "stop"},
        {"index": 0, "token_ids": [5], "logprobs": {"token_logprobs": [-1.0]}, "finish_reason": "length"}]}
    assert vs.completion_lists(answer, 2, "http://x") == ([[5], [7, 2]], [[-1.0], [-0.5, -0.25]], ["length", "stop"])
    with pytest.raises(vs.ServerError, match="http://x: asked for 3 completions, got 2"):
        vs.completion_lists(answer, 3, "http://x")
    del answer["choices"][0]["token_ids"]
    with pytest.raises(vs.ServerError, match="without token_ids or logprobs"):
        vs.completion_lists(answer, 2, "http://x")


def test_write_weights_whole_with_the_tied_head_as_a_copy(tmp_path, tiny):
    from rlvr.rollout.weights import policy_weight_items

    model, _ = tiny
    items = policy_weight_items(model)
    out = vs.write_weights(items, tmp_path / "w" / "v1")
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["v1"]  # no temporary directory left
    loaded = load_file(str(out / "model.safetensors"))
    assert sorted(loaded) == sorted(n for n, _ in items)
    for n, t in items:
        assert torch.equal(loaded[n], t)
    assert torch.equal(loaded["lm_head.weight"], loaded["model.embed_tokens.weight"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_names_the_server():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(vs.ServerError, match=f"vLLM server {url}: /v1/models .* Is the server running"):
        vs.VllmServerEngine([url], weights_dir="unused", timeout_s=5)


def test_a_hung_server_is_told_at_the_first_contact_not_after_the_request_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts connections, never answers
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:  # the error names first_contact_s (0.5 s): rollout.vllm.timeout_s (600) would have said otherwise
        with pytest.raises(vs.ServerError, match=rf"vLLM server {url}: no answer to /v1/models \(listing its model\) "
                                                 r"within 0.5 s of the first contact: a vLLM server answers it at once.*"
                                                 r"\(rollout.vllm.server_url\)"):
            vs.VllmServerEngine([url], weights_dir="unused", timeout_s=600, first_contact_s=0.5)
    finally:
        listener.close()


def test_an_address_that_drops_packets_is_told_in_seconds_naming_the_key():
    """A host that drops the connection's packets (a firewall, an address nobody holds) never refuses: the
    connection waits. A listener whose one-place accept queue is full drops new connections' packets alike
    (Linux), on this machine."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # one connection waits to be accepted; the kernel drops the packets of any more
    port = listener.getsockname()[1]
    queued = socket.create_connection(("127.0.0.1", port), timeout=5)
    url = f"http://127.0.0.1:{port}"
    try:  # the error names first_contact_s (0.5 s), not rollout.vllm.timeout_s (600)
        with pytest.raises(vs.ServerError, match=rf"vLLM server {url}: no connection within 0.5 s of the first contact: "
                                                 r"is rollout.vllm.server_url's host and port right"):
            vs.VllmServerEngine([url], weights_dir="unused", timeout_s=600, first_contact_s=0.5)
    finally:
        queued.close()
        listener.close()


class FakeVllm(BaseHTTPRequestHandler):
    """Answers as a vLLM server in dev mode would (routes rlvr uses), with settings from the server object."""

    def log_message(self, *args):
        pass

    def _send(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        s = self.server
        if self.path == "/v1/models":
            self._send(200, {"data": [{"id": "tiny"}]})
        elif self.path.startswith("/server_info"):
            self._send(200, {"vllm_config": {"model_config": {"logprobs_mode": s.logprobs_mode},
                                             "device_config": {"device_type": "cpu"},
                                             "scheduler_config": {"enable_chunked_prefill": s.chunked}}})
        elif self.path == "/weight_info":
            self._send(200, {"weight_version": s.version})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        s.posts.append((self.path, body))
        if self.path == "/update_weight_version":
            s.version = body["new_version"]
            self._send(200, {"success": True})
        elif self.path == "/collective_rpc" and body.get("method") == "reload_weights" and s.reload_fails:
            self._send(500, {"error": {"message": "Call to collective_rpc method failed: Worker failed with error ''"}})
        elif self.path in ("/collective_rpc", "/reset_prefix_cache"):
            self._send(200, {})
        elif self.path == "/v1/completions":
            time.sleep(s.generate_s)
            n = body["n"]
            self._send(200, {"choices": [{"index": i, "token_ids": [4, 3], "finish_reason": "stop",
                                          "logprobs": {"token_logprobs": [-0.5, -0.1]}} for i in range(n)]})
        else:
            self._send(404, {"detail": "Not Found"})


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    server.logprobs_mode, server.version, server.posts, server.chunked = "processed_logprobs", "default", [], False
    server.reload_fails, server.generate_s = False, 0.0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_raw_logprobs_server_is_refused(fake_server):
    server, url = fake_server
    server.logprobs_mode = "raw_logprobs"
    with pytest.raises(vs.ServerError, match=f"{url} runs with logprobs_mode 'raw_logprobs'.*--logprobs-mode "
                                             "processed_logprobs"):
        vs.VllmServerEngine([url], weights_dir="unused", timeout_s=5)


def test_cpu_server_with_chunked_prefill_is_refused(fake_server):
    server, url = fake_server
    server.chunked = True
    with pytest.raises(vs.ServerError, match=f"{url} runs on the CPU with chunked prefill.*--no-enable-chunked-prefill"):
        vs.VllmServerEngine([url], weights_dir="unused", timeout_s=5)
    vs.check_server_config(url, {"model_config": {"logprobs_mode": "processed_logprobs"},  # a GPU server may chunk
                                 "device_config": {"device_type": "cuda"},
                                 "scheduler_config": {"enable_chunked_prefill": True}})


def test_push_names_the_version_and_a_stale_server_is_refused(fake_server, tmp_path, tiny):
    server, url = fake_server
    model, tok = tiny
    engine = vs.VllmServerEngine([url], weights_dir=tmp_path / "w", timeout_s=5)
    pushed = engine.sync_weights(model)
    version = f"{engine.tag}-1"
    # the bytes written for the servers (rollout/sync_bytes): the file, every weight in it (the tied head a copy)
    assert pushed == (tmp_path / "w" / version / "model.safetensors").stat().st_size
    assert pushed > sum(t.numel() * 4 for t in model.state_dict().values())
    assert server.version == version and engine.expected == version
    paths = [p for p, _ in server.posts]
    assert paths == ["/collective_rpc", "/reset_prefix_cache", "/update_weight_version"]
    rpc = server.posts[0][1]
    assert rpc == {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path / "w" / version)}}
    engine.sync_weights(model)
    assert [p.name for p in (tmp_path / "w").iterdir()] == [f"{engine.tag}-2"]  # the older version removed
    sampling = dict(group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[3], pad_id=0)
    r = engine.generate([[1, 2], [5]], seeds=[1, 2], **sampling)
    assert r.completion_ids.tolist() == [[4, 3]] * 4 and torch.equal(r.sampler_logp, torch.tensor([[-0.5, -0.1]] * 4))
    server.version = "default"  # as after a restart: the weights it was started with
    with pytest.raises(vs.ServerError, match=f"vLLM server {url} holds weights version 'default', not "
                                             f"'{engine.tag}-2'.*stale weights"):
        engine.generate([[1, 2]], seeds=[1], **sampling)


def test_prompts_are_spread_over_the_servers(fake_server, tmp_path):
    server, url = fake_server
    other = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    other.logprobs_mode, other.version, other.posts, other.chunked = "processed_logprobs", "default", [], False
    other.generate_s = 0.0
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        urls = [url, f"http://127.0.0.1:{other.server_address[1]}"]
        sampling = dict(group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[3], pad_id=0)
        for rank, first in ((0, server), (1, other)):
            server.posts.clear()
            other.posts.clear()
            engine = vs.VllmServerEngine(urls, weights_dir=tmp_path, timeout_s=5, rank=rank, world=2)
            engine.generate([[1], [2], [3]], seeds=[1, 2, 3], **sampling)
            second = other if first is server else server
            assert [b["prompt"] for _, b in first.posts] in ([[1], [3]], [[3], [1]])  # prompts 0 and 2
            assert [b["prompt"] for _, b in second.posts] == [[2]]
    finally:
        other.shutdown()
        other.server_close()


def test_generation_has_rollout_vllm_timeout_s_not_the_first_contacts(fake_server, tmp_path):
    server, url = fake_server
    server.generate_s = 1.0  # longer than the first contact's limit, within the requests' one
    sampling = dict(group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[3], pad_id=0)
    engine = vs.VllmServerEngine([url], weights_dir=tmp_path, timeout_s=5, first_contact_s=0.5)
    assert engine.generate([[1]], seeds=[1], **sampling).completion_ids.shape[0] == 2
    engine.timeout = 0.5  # a generation past rollout.vllm.timeout_s
    with pytest.raises(vs.ServerError, match=rf"vLLM server {url}: no answer to /v1/completions .* within "
                                             r"rollout.vllm.timeout_s=0.5 s: is it overloaded or hung\?"):
        engine.generate([[1]], seeds=[1], **sampling)


def test_nccl_push_needs_a_gpu_trainer(tmp_path):
    from rlvr.config import build_config

    cfg = build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=http://127.0.0.1:9",
                              "--rollout.vllm.weight_push=nccl"])
    with pytest.raises(RlvrError, match="weight_push=nccl broadcasts from the trainer's GPU"):
        vs.make_server_engine(engine_settings(cfg), torch.nn.Linear(1, 1), tmp_path)


def test_a_first_push_the_server_cannot_load_says_why_and_leaves_no_run_directory(fake_server, tmp_path, tiny):
    from rlvr.config import build_config

    server, url = fake_server
    server.reload_fails = True
    cfg = build_config(None, ["--rollout.engine=vllm", f"--rollout.vllm.server_url={url}",
                              "--rollout.vllm.timeout_s=5"])
    out = tmp_path / "run"
    with pytest.raises(vs.ServerError, match=f"vLLM server {url}: /collective_rpc .* answered HTTP 500.*could not "
                                             "load the trainer's weights.*restart the server"):
        vs.make_server_engine(engine_settings(cfg), tiny[0], out)
    assert not out.exists()  # a rerun of the same command is not refused for a directory this start made
    assert not [p for p, _ in server.posts if p == "/update_weight_version"]


def test_a_missing_route_says_what_to_check(fake_server):
    _, url = fake_server
    with pytest.raises(vs.ServerError, match=r"/v1/embeddings \(x\) answered HTTP 404.*; is it a vLLM server\?$"):
        vs.call(url, "/v1/embeddings", timeout=5, what="x")
    with pytest.raises(vs.ServerError, match="/get_world_size .*HTTP 404.*VLLM_SERVER_DEV_MODE=1"):
        vs.call(url, "/get_world_size", timeout=5, what="x")


def test_the_run_directorys_weights_keep_only_the_newest_and_a_shared_directory_its_own(fake_server, tmp_path, tiny):
    from rlvr.config import build_config

    _, url = fake_server
    run_dir, shared = tmp_path / "run", tmp_path / "shared"
    for d in (run_dir / "vllm-weights", shared):  # what a run killed during a push left there
        (d / "0123abcd-7").mkdir(parents=True)
        (d / ".0123abcd-8-tmp").mkdir()
    args = ["--rollout.engine=vllm", f"--rollout.vllm.server_url={url}", "--rollout.vllm.timeout_s=5"]
    engine = vs.make_server_engine(engine_settings(build_config(None, args)), tiny[0], run_dir)
    assert [p.name for p in (run_dir / "vllm-weights").iterdir()] == [f"{engine.tag}-1"]
    engine = vs.make_server_engine(engine_settings(build_config(None, [*args, f"--rollout.vllm.weights_dir={shared}"])), tiny[0], run_dir)
    assert sorted(p.name for p in shared.iterdir()) == [".0123abcd-8-tmp", "0123abcd-7", f"{engine.tag}-1"]


def test_a_server_that_cannot_take_the_adapters_is_refused_naming_the_flag():
    url = "http://127.0.0.1:9"
    lora = {"lora_config": {"max_lora_rank": 16}}
    with pytest.raises(vs.ServerError, match=f"vLLM server {url} runs without LoRA, and with LoRA rlvr pushes the "
                                             "adapters alone: start the server with --enable-lora"):
        vs.check_lora_server(url, {"lora_config": None}, 8)
    with pytest.raises(vs.ServerError, match=f"vLLM server {url} takes LoRA ranks up to 16 .*adapters have rank 20: "
                                             "restart it with --max-lora-rank 32"):
        vs.check_lora_server(url, lora, 20)
    with pytest.raises(vs.ServerError, match="cannot load adapters while it runs .VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        vs.check_lora_server(url, lora, 16, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": False})
    vs.check_lora_server(url, lora, 16, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": True})
    vs.check_lora_server(url, lora, 9, {})  # a vLLM that does not list it: the first push tells
