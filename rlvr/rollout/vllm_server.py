"""vLLM servers as the rollout engine (`rollout.engine=vllm` with `rollout.vllm.server_url`): vLLM runs in
processes the user started (on other GPUs, other nodes, or beside the trainer on the CPU), and the trainer
talks to them over HTTP. docs/vllm.md gives the server command.

    engine.generate(prompts, seeds=...)   one /v1/completions request per prompt (n = group size, prompt
                                          and completion as token ids, the sampled tokens' log-probs),
                                          spread over the servers; checked against the weights version
    engine.sync_weights(policy)           push the policy's weights to every server (rank 0), then name
                                          the new weights version on each

Pushing weights (rank 0 under torchrun; every rank gathers, since an FSDP gather is a collective):
- `disk` (the CPU platform, and any servers sharing a filesystem with the trainer): the weights are
  written as safetensors under rollout.vllm.weights_dir (a new directory per version, renamed into place
  whole), and each server reloads them in place: `POST /collective_rpc {"method": "reload_weights",
  "kwargs": {"weights_path": DIR}}` (needs VLLM_SERVER_DEV_MODE=1).
- adapters (rollout.vllm.sync resolved to adapters: LoRA, model.lora.r > 0): the policy's LoRA adapter alone in
  PEFT's format under rollout.vllm.weights_dir (a new directory per version, renamed into place whole), loaded by
  each server under the version's name (`POST /v1/load_lora_adapter`: servers started with --enable-lora and
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), which every later completion request names as its model; the previous
  version unloaded. The base each server holds is the one it started with (a server whose base a merged push
  overwrote is refused at the first contact).
- `nccl` (servers on GPUs): vLLM's own weight-transfer API (`/init_weight_transfer_engine`,
  `/update_weights`, ...: vllm.distributed.weight_transfer), broadcast from the trainer's GPU into each
  server's. Written against vLLM 0.32's API and NOT tested here (no GPU); docs/vllm.md says how to run it.

The version check: after a push the trainer names the version on every server
(`POST /update_weight_version`); before and after each rollout every server used is asked for its
version (`GET /weight_info`). A server that restarted, or missed a push, answers another version, and the
rollout stops with an error naming it: a rollout never silently comes from stale weights.

Failures: every request has a timeout (rollout.vllm.timeout_s), the first contact with each server a short one
(FIRST_CONTACT_S), so a wrong address is told in seconds; a server that refuses, dies or hangs stops the run
with an RlvrError naming its URL and what it was asked; the training loop first checkpoints the steps done
(rlvr/train/grpo.py), so `rlvr train --resume` continues once the server is back.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.lora import unwrap
from rlvr.rollout.builtin import RecomputeSession
from rlvr.rollout.decoding import Rollout
from rlvr.rollout.vllm_engine import outputs_to_rollout
from rlvr.rollout.weights import (adapter_items, adapter_rank, dir_bytes, policy_weight_items, resolve_sync,
                                  vllm_lora_rank, write_adapter, write_tensors)
from rlvr.text import say

LORA_ROUTES = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
LORA_HINT = ("with LoRA rlvr pushes the adapters alone: start the server with --enable-lora --max-lora-rank R "
             "--max-loras 1 and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (docs/vllm.md), or set rollout.vllm.sync=merged")
ADAPTER_VERSION = "lora-"  # the version names of adapter pushes: the server's base is still the one it loaded
DEV_MODE_HINT = ("start it with VLLM_SERVER_DEV_MODE=1 (its weight-reload and weight-version routes) and "
                 "--logprobs-mode processed_logprobs: docs/vllm.md")


# The first contact's limit: a running vLLM server lists its model at once, while a wrong address whose host
# drops packets (a firewall, an address no host holds) would hold the connection until rollout.vllm.timeout_s,
# which must be long for a group's generation.
FIRST_CONTACT_S = 10.0


class ServerError(RlvrError):
    """A vLLM server that refused, failed or did not answer in time."""


def call(url: str, path: str, body: dict | None = None, *, timeout: float, what: str, first: bool = False,
         text: bool = False) -> dict:
    """One HTTP request to a server: GET without a body, POST with one (JSON); the JSON answer ({} when
    empty; text: the answer may be plain text, as vLLM's LoRA routes give, and is then dropped). Any failure is
    a ServerError naming the server, the route and `what` it was for. first: the first contact, whose short
    `timeout` (FIRST_CONTACT_S) is the address's test, said as such."""
    limit = f"{timeout:g} s of the first contact" if first else f"rollout.vllm.timeout_s={timeout:g} s"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:500].decode(errors="replace")
        hint = ""
        if e.code == 404 and path in LORA_ROUTES:
            hint = f"; {LORA_HINT}"
        elif e.code == 404:  # the OpenAI routes are every vLLM server's; the others need its dev mode
            hint = "; is it a vLLM server?" if path.startswith("/v1/") else f"; {DEV_MODE_HINT}"
        raise ServerError(f"vLLM server {url}: {path} ({what}) answered HTTP {e.code}: {detail}{hint}") from None
    except (TimeoutError, socket.timeout) as e:  # connected, then nothing
        why = ("a vLLM server answers it at once: is this address a vLLM server's, and has it finished starting? "
               "(rollout.vllm.server_url)" if first else "is it overloaded or hung?")
        raise ServerError(f"vLLM server {url}: no answer to {path} ({what}) within {limit}: {why}") from e
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        if isinstance(getattr(e, "reason", None), TimeoutError):  # no connection at all: packets dropped
            raise ServerError(f"vLLM server {url}: no connection within {limit}: is rollout.vllm.server_url's host "
                              "and port right, and the host reachable from here? (an address no server holds, or "
                              "a firewall, drops the packets instead of refusing)") from None
        reason = getattr(e, "reason", e)
        raise ServerError(f"vLLM server {url}: {path} ({what}) failed: {reason}. Is the server running?") from None
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        if text:
            return {}
        raise ServerError(f"vLLM server {url}: {path} ({what}) answered with something that is not JSON: "
                          f"{raw[:200]!r}") from None


def completion_body(model: str, prompt: list[int], *, seed: int | None, group_size: int, max_new_tokens: int,
                    temperature: float, top_p: float, top_k: int, stop_ids: list[int]) -> dict:
    """The /v1/completions request for one prompt's group: token ids in and out, the sampled token's
    log-prob at each position (logprobs 0), vLLM's own stop on stop_ids."""
    return {"model": model, "prompt": list(prompt), "n": group_size, "max_tokens": max_new_tokens,
            "temperature": temperature, "top_p": top_p, "top_k": top_k if top_k > 0 else -1, "seed": seed,
            "stop_token_ids": list(stop_ids), "logprobs": 0, "return_token_ids": True,
            "skip_special_tokens": False}


def completion_lists(answer: dict, group_size: int, url: str) -> tuple[list[list[int]], list[list[float]], list]:
    """A /v1/completions answer -> token ids, their log-probs and finish reasons of its choices, in index
    order."""
    choices = sorted(answer.get("choices", []), key=lambda c: c["index"])
    if len(choices) != group_size:
        raise ServerError(f"vLLM server {url}: asked for {group_size} completions, got {len(choices)}")
    tokens, logps, reasons = [], [], []
    for c in choices:
        ids = c.get("token_ids")
        lp = (c.get("logprobs") or {}).get("token_logprobs")
        if ids is None or lp is None:
            raise ServerError(f"vLLM server {url}: a completion came without token_ids or logprobs: is it a vLLM "
                              "server (0.10.2 or later, return_token_ids)?")
        tokens.append(list(ids))
        logps.append([float(x) for x in lp])
        reasons.append(c.get("finish_reason"))
    return tokens, logps, reasons


def write_weights(items: list[tuple[str, torch.Tensor]], target: Path) -> Path:
    """The weights as one safetensors file in directory `target`, which appears whole or not at all
    (rlvr.rollout.weights.write_tensors: a tied head written as a copy)."""
    return write_tensors(target, "model.safetensors", items)


def check_server_config(url: str, config: dict) -> None:
    """Refuse a server whose settings would give wrong log-probs or kill it (config: its vllm_config as
    /server_info?config_format=json shows it)."""
    mode = (config.get("model_config") or {}).get("logprobs_mode")
    if mode != "processed_logprobs":
        raise ServerError(f"vLLM server {url} runs with logprobs_mode {mode!r}: its log-probs are not of the "
                          "distribution it samples from (temperature, top-p); restart it with "
                          "--logprobs-mode processed_logprobs")
    device = (config.get("device_config") or {}).get("device_type")
    if device == "cpu" and (config.get("scheduler_config") or {}).get("enable_chunked_prefill"):
        raise ServerError(f"vLLM server {url} runs on the CPU with chunked prefill, where a seeded request whose "
                          "prompt is split over steps kills its engine (rlvr seeds every request): restart it with "
                          "--no-enable-chunked-prefill --max-num-batched-tokens N (N at least --max-model-len)")


def check_lora_server(url: str, config: dict, rank: int, env: dict | None = None) -> None:
    """Refuse, before anything is pushed, a server that cannot take adapters of `rank` (config: its vllm_config
    as /server_info shows it; env: its VLLM_ variables there, where this vLLM lists them)."""
    lora = config.get("lora_config")
    if not lora:
        raise ServerError(f"vLLM server {url} runs without LoRA, and {LORA_HINT}")
    loading = (env or {}).get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
    if loading is not None and str(loading).lower() not in ("true", "1"):
        raise ServerError(f"vLLM server {url} cannot load adapters while it runs (VLLM_ALLOW_RUNTIME_LORA_UPDATING is "
                          f"not set), and {LORA_HINT}")
    held = int(lora.get("max_lora_rank") or 0)
    if held < rank:
        raise ServerError(f"vLLM server {url} takes LoRA ranks up to {held} (--max-lora-rank), and the trainer's "
                          f"adapters have rank {rank}: restart it with --max-lora-rank {vllm_lora_rank(rank)}")


_EMBEDDING = re.compile(r"\(embed_tokens\): \w+\((?=[^)]*org_vocab_size=(\d+))(?=[^)]*embedding_dim=(\d+))")


def served_embedding(url: str, timeout: float) -> tuple[int, int] | None:
    """(vocabulary, hidden size) of the model a server holds, read from vLLM's printout of its model
    (`get_model_inspection`); None where that route or its format is not this vLLM's."""
    try:
        answer = call(url, "/collective_rpc", {"method": "get_model_inspection"}, timeout=timeout,
                      what="describing its model")
        m = _EMBEDDING.search(str((answer.get("results") or [""])[0]))
    except ServerError:
        return None
    return (int(m[1]), int(m[2])) if m else None


def check_served_model(url: str, served: str, policy: torch.nn.Module, name: str, timeout: float) -> None:
    """Refuse, before anything is pushed, a server whose model has another vocabulary or hidden size than
    the trainer's: its reload would fail half way, and vLLM 0.32 then fails every later reload too (the
    server must be restarted)."""
    shape = served_embedding(url, timeout)
    trainer = tuple(unwrap(policy).get_input_embeddings().weight.shape)
    if shape is not None and shape != trainer:
        raise ServerError(f"vLLM server {url} serves {served} (vocabulary {shape[0]}, hidden size {shape[1]}), "
                          f"and the trainer trains {name} (vocabulary {trainer[0]}, hidden size {trainer[1]}): "
                          f"its weights cannot be pushed there. Start the server with the model the trainer "
                          f"starts from (--model; docs/vllm.md)")


class VllmServerEngine:
    """Rollouts from vLLM servers (module docstring). rank/world: this trainer process's place under
    torchrun (rank 0 pushes; prompts go to the servers round robin, offset by rank). owns_dir: weights_dir
    is this run's alone (the default, inside the locked run directory), so whatever else is in it after a
    push (a killed run's versions, a write cut short) is removed; in a directory of the user's, only this
    engine's own older versions are."""

    def __init__(self, urls: list[str], *, weights_dir: Path, timeout_s: float, push: str = "disk",
                 rank: int = 0, world: int = 1, owns_dir: bool = False, first_contact_s: float = FIRST_CONTACT_S,
                 adapters_rank: int = 0):
        """adapters_rank > 0: each push is the policy's LoRA adapter alone (rollout.vllm.sync resolved to
        adapters; its largest rank), loaded by every server on the base it holds; 0: the merged weights."""
        if not urls:
            raise RlvrError("rollout.vllm.server_url: no server URL given")
        if push not in ("disk", "nccl"):
            raise ValueError(f"push must be disk or nccl, not {push}")
        if adapters_rank and push == "nccl":
            raise ValueError("adapters are pushed as files (push disk)")
        self.urls, self.timeout, self.push, self.first_contact_s = urls, timeout_s, push, first_contact_s
        self.weights_dir, self.rank, self.world, self.owns_dir = Path(weights_dir), rank, world, owns_dir
        self.adapters_rank = adapters_rank
        self.tag = uuid.uuid4().hex[:8]  # this engine's versions: another run's pushes never match
        self.weights_version = 0  # pushes so far
        self.expected: str | None = None  # the version every server must hold; None until the first push
        self.models = {url: self._connect(url) for url in urls}
        self._nccl = None

    def _connect(self, url: str) -> str:
        """The server's model name, once it has shown it runs with what rlvr needs."""
        models = call(url, "/v1/models", timeout=min(self.timeout, self.first_contact_s), what="listing its model",
                      first=True).get("data", [])
        if not models:
            raise ServerError(f"vLLM server {url} serves no model")
        info = call(url, "/server_info?config_format=json", timeout=self.timeout, what="reading its settings")
        check_server_config(url, info.get("vllm_config", {}))
        if self.adapters_rank:
            check_lora_server(url, info.get("vllm_config", {}), self.adapters_rank, info.get("vllm_env"))
            held = self.version_of(url)
            if held != "default" and not held.startswith(ADAPTER_VERSION):
                raise ServerError(f"vLLM server {url} holds pushed weights (version {held!r}), not the model it "
                                  "started with: the adapters would sit on another base than the trainer's. Restart "
                                  "the server (docs/vllm.md)")
        return models[0]["id"]

    # ------------------------------------------------------------ versions

    def version_of(self, url: str) -> str:
        return str(call(url, "/weight_info", timeout=self.timeout, what="its weights version")["weight_version"])

    def check_versions(self, urls: list[str]) -> None:
        """Every server in `urls` holds the weights last pushed (nothing to check before the first push)."""
        if self.expected is None:
            return
        for url in urls:
            held = self.version_of(url)
            if held != self.expected:
                raise ServerError(f"vLLM server {url} holds weights version {held!r}, not {self.expected!r} (the "
                                  "last pushed): it restarted or missed a push, and would sample from stale weights "
                                  "(a resumed run pushes them again)")

    # ------------------------------------------------------------ sampling

    def generate(self, prompts: list[list[int]], *, seeds: list[int] | None = None, group_size: int,
                 max_new_tokens: int, temperature: float, top_p: float = 1.0, top_k: int = 0, stop_ids: list[int],
                 pad_id: int) -> Rollout:
        """group_size completions of each prompt (prompt i on server (rank + i) mod servers; seeds[i] seeds
        its request); the servers' versions checked before and after."""
        targets = [self.urls[(self.rank + i) % len(self.urls)] for i in range(len(prompts))]
        used = list(dict.fromkeys(targets))
        self.check_versions(used)
        bodies = [completion_body(self.expected if self.adapters_rank and self.expected else self.models[url], p, seed=None if seeds is None else seeds[i],
                                  group_size=group_size, max_new_tokens=max_new_tokens, temperature=temperature,
                                  top_p=top_p, top_k=top_k, stop_ids=stop_ids) for i, (p, url) in enumerate(zip(prompts, targets))]
        tokens, logps, reasons = [], [], []
        if prompts:
            with ThreadPoolExecutor(max_workers=min(len(prompts), 64)) as pool:
                answers = list(pool.map(lambda a: call(a[0], "/v1/completions", a[1], timeout=self.timeout,
                                                       what=f"{group_size} completions"), zip(targets, bodies)))
            for answer, url in zip(answers, targets):
                t, lp, r = completion_lists(answer, group_size, url)
                tokens += t
                logps += lp
                reasons += r
        self.check_versions(used)  # a server that restarted mid-rollout answered from its initial weights
        return outputs_to_rollout(prompts, tokens, logps, reasons, group_size=group_size, stop_ids=stop_ids,
                                  pad_id=pad_id)

    def session(self, prompts: list[list[int]], **sampling):
        """Episodes turn by turn: each later turn sends the row's history as a prompt (the server's prefix
        cache keeps the earlier turns' KV)."""
        return RecomputeSession(self.generate, prompts, **sampling)

    def sleep(self) -> None:
        """Nothing to free here: the servers hold their own memory."""

    # ------------------------------------------------------------ pushing weights

    def sync_weights(self, policy: torch.nn.Module) -> int:
        """Push the policy's weights (LoRA merged, the tied head included), or its LoRA adapter alone
        (adapters_rank), to every server and name the new version there; returns the bytes pushed (on rank 0;
        0 on the others). Called on every rank: rank 0 pushes, the others wait for it."""
        # every rank: an FSDP gather is a collective
        items = adapter_items(policy) if self.adapters_rank else policy_weight_items(policy)
        self.weights_version += 1
        version = f"{ADAPTER_VERSION if self.adapters_rank else ''}{self.tag}-{self.weights_version}"
        error, pushed = None, 0
        if self.rank == 0:
            try:
                pushed = self._push(items, version, policy)
            except RlvrError as e:  # raised after the barrier, so the other ranks are not left waiting
                error = e
        self._barrier()
        if error is not None:
            raise error
        self.expected = version
        return pushed

    def _push(self, items, version: str, policy) -> int:
        """One push to every server; the bytes it moved."""
        if self.adapters_rank:
            return self._push_adapter(items, version, policy)
        if self.push == "nccl":
            self._push_nccl(items, policy)
            pushed = sum(t.numel() * t.element_size() for _, t in items)
        else:
            path = write_weights(items, self.weights_dir / version)
            try:
                self._each(lambda url: call(url, "/collective_rpc", {"method": "reload_weights",
                                                                     "kwargs": {"weights_path": str(path)}},
                                            timeout=self.timeout, what=f"reloading the weights from {path}"))
            except ServerError as e:
                shutil.rmtree(path, ignore_errors=True)  # a version no server will hold
                if "HTTP 500" in str(e):  # vLLM's own reason is in the server's log, often not in its answer
                    raise ServerError(f"{e}. The server could not load the trainer's weights: does it serve the "
                                      "model the trainer trains? A failed reload leaves vLLM unable to reload "
                                      "again: restart the server (docs/vllm.md)") from None
                raise
            pushed = dir_bytes(path)
        self._each(lambda url: call(url, "/reset_prefix_cache", {}, timeout=self.timeout,
                                    what="dropping the prompt cache computed with the old weights"))
        self._each(lambda url: call(url, "/update_weight_version", {"new_version": version}, timeout=self.timeout,
                                    what="naming the new weights version"))
        if self.push == "disk":
            self._remove_older(version)
        return pushed

    def _push_adapter(self, items, version: str, policy) -> int:
        """The policy's adapter (items: adapter_items) written under weights_dir/version and loaded by every
        server under that name, which each rollout request then names (the base they hold is never touched); the
        previous version unloaded."""
        path = write_adapter(policy, self.weights_dir / version, items)
        try:
            self._each(lambda url: call(url, "/v1/load_lora_adapter", {"lora_name": version, "lora_path": str(path)},
                                        timeout=self.timeout, what=f"loading the adapter from {path}", text=True))
        except ServerError:
            shutil.rmtree(path, ignore_errors=True)  # a version no server will serve
            raise
        self._each(lambda url: call(url, "/update_weight_version", {"new_version": version}, timeout=self.timeout,
                                    what="naming the new weights version"))
        if self.expected is not None:  # no request names it any more
            previous = self.expected
            self._each(lambda url: call(url, "/v1/unload_lora_adapter", {"lora_name": previous}, timeout=self.timeout,
                                        what=f"unloading the adapter {previous}", text=True))
        self._remove_older(version)
        return dir_bytes(path)

    def _remove_older(self, version: str) -> None:
        """Every server holds `version` now: the files of older ones go (a killed run's too where the directory
        is the run's own)."""
        for old in self.weights_dir.glob("*" if self.owns_dir else f"*{self.tag}-*"):
            if old.name != version:
                shutil.rmtree(old, ignore_errors=True)

    def _each(self, fn) -> None:
        """fn(url) on every server at once; the first failure is raised."""
        with ThreadPoolExecutor(max_workers=len(self.urls)) as pool:
            list(pool.map(fn, self.urls))

    def _barrier(self) -> None:
        if self.world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()

    def _push_nccl(self, items, policy) -> None:
        """vLLM's NCCL weight transfer into GPU servers started with --weight-transfer-config
        '{"backend": "nccl"}': one NCCL group per server (the trainer's rank 0 as sender), set up at the
        first push. NOT tested here (no GPU); docs/vllm.md."""
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.nccl_engine import (NCCLTrainerInitInfo,
                                                                  NCCLTrainerWeightTransferEngine)

        source = _ItemsSource(items)
        if self._nccl is None:
            self._nccl = []
            for url in self.urls:
                workers = int(call(url, "/get_world_size?include_dp=true", timeout=self.timeout,
                                   what="its number of GPU workers")["world_size"])
                info = NCCLTrainerInitInfo(master_address=os.environ.get("RLVR_NCCL_ADDRESS", socket.gethostname()),
                                           master_port=_free_port(), world_size=workers + 1, rank=0)
                client = HTTPVLLMWeightSyncClient(url, timeout=self.timeout)
                self._nccl.append(NCCLTrainerWeightTransferEngine.trainer_init(info, client=client, source=source))
        for engine in self._nccl:
            engine.source.items = items
            engine.send_weights()


class _ItemsSource:
    """policy_weight_items as a vLLM WeightSource (names, dtypes and shapes, then the tensors)."""

    def __init__(self, items: list[tuple[str, torch.Tensor]]):
        self.items = items

    def metadata(self):
        from vllm.distributed.weight_transfer.base import ParamMeta

        return [ParamMeta(name=n, dtype=t.dtype, shape=tuple(t.shape)) for n, t in self.items]

    def __iter__(self):
        return iter(self.items)

    def held_names(self):
        return None

    def iter_groups(self):
        for name, t in self.items:
            yield [name], [t]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def make_server_engine(s, policy: torch.nn.Module, workdir: Path) -> VllmServerEngine:
    """The server engine for `s` (rlvr.rollout.engines.EngineSettings; rollout.vllm.server_url set), the
    policy's weights pushed to every server. Under torchrun every rank connects and samples its share; rank 0
    pushes."""
    v = s.rollout.vllm
    dist = torch.distributed
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    if v.weight_push == "nccl" and next(policy.parameters()).device.type != "cuda":
        raise RlvrError("rollout.vllm.weight_push=nccl broadcasts from the trainer's GPU, and the trainer is on "
                        f"{next(policy.parameters()).device}: use rollout.vllm.weight_push=disk")
    weights_dir = Path(v.weights_dir).expanduser() if v.weights_dir else Path(workdir) / "vllm-weights"
    sync, note = resolve_sync(v.sync, policy, quantized=s.model_quantize == "nf4",
                              whole_tensors=v.weight_push == "nccl")
    if note and rank == 0:
        say(note)
    engine = VllmServerEngine(v.urls(), weights_dir=weights_dir, timeout_s=v.timeout_s, push=v.weight_push,
                              rank=rank, world=world, owns_dir=not v.weights_dir,
                              adapters_rank=adapter_rank(policy) if sync == "adapters" else 0)
    for url, served in engine.models.items():
        check_served_model(url, served, policy, s.model_name, v.timeout_s)
    made = [d for d in (weights_dir, *weights_dir.parents) if not d.exists()]  # deepest first
    try:
        engine.sync_weights(policy)  # the trainer's weights are the truth (LoRA, a resume, tiny random weights)
    except RlvrError:  # a start that fails leaves no directory behind (a fresh run's would refuse the rerun)
        for d in made:
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return engine
