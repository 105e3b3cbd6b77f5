"""Hugging Face Hub names (`org/name`) for models and datasets, as users type them.

Resolved through the Hub cache with huggingface_hub: a cached snapshot is used as it is (no network,
whatever HF_HUB_OFFLINE says); otherwise it is downloaded when the machine may go online, and when it
may not (HF_HUB_OFFLINE=1) the error gives the exact `hf download` command. The cache is the one
huggingface_hub uses: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, read at each call.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from rlvr.errors import RlvrError

_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")  # a .jsonl, .json or .csv may be gzipped (name.jsonl.gz)
DATA_PATTERNS = [f"*{s}" for s in DATA_SUFFIXES] + [f"*{s}.gz" for s in DATA_SUFFIXES if s != ".parquet"]


def data_suffix(name) -> str:
    """The data format a file name says: its suffix, or for a gzipped file the one before '.gz'
    ('train.jsonl.gz' -> '.jsonl'); '' for '.gz' alone or a compressed parquet, which no reader takes."""
    suffixes = Path(name).suffixes
    if suffixes[-1:] == [".gz"]:
        return suffixes[-2] if len(suffixes) > 1 and suffixes[-2] in DATA_SUFFIXES[1:] else ""
    return suffixes[-1] if suffixes else ""


# a model's files that loading needs; a repository's other formats (.onnx, .gguf, .h5, .msgpack) are not fetched
MODEL_FILES = ["*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
# its weights in one format: safetensors where the repository has them, else PyTorch's pickles (older models ship
# only those), never both (many repositories ship both: twice the download). Named pytorch_model*, so a
# repository's other .bin files (training_args.bin, an optimizer's state) stay behind.
WEIGHTS = (["*.safetensors"], ["pytorch_model*.bin"])


def is_hub_name(name: str) -> bool:
    """`org/name` that is not a path on this machine."""
    return bool(_NAME.match(name)) and not Path(name).expanduser().exists()


def offline() -> bool:
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") or constants.HF_HUB_OFFLINE


def hf_cache_dir() -> str:
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return constants.HF_HUB_CACHE


def download_command(repo_id: str, repo_type: str) -> str:
    return f"hf download {repo_id}" + (" --repo-type dataset" if repo_type == "dataset" else "")


def snapshot(repo_id: str, repo_type: str) -> Path:
    """The local snapshot of a Hub repository (repo_type model or dataset): cached, else downloaded."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    cache, command = hf_cache_dir(), download_command(repo_id, repo_type)
    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if offline():
        raise RlvrError(f"{repo_type} '{repo_id}' is not a local path and not in the Hugging Face cache ({cache}), "
                        f"and HF_HUB_OFFLINE is set: download it on a machine that is online with `{command}` "
                        f"(into that cache), or unset HF_HUB_OFFLINE")
    from rlvr.text import say

    say(f"downloading {repo_type} {repo_id} from the Hugging Face Hub into {cache}")
    try:
        patterns = model_patterns(repo_id, list_files(repo_id)) if repo_type == "model" else DATA_PATTERNS + ["*.md"]
        return Path(snapshot_download(repo_id, repo_type=repo_type, cache_dir=cache, allow_patterns=patterns))
    except RlvrError:
        raise
    except (RepositoryNotFoundError, GatedRepoError) as e:
        raise RlvrError(f"{repo_type} '{repo_id}': no such repository on the Hugging Face Hub, or a gated one "
                        f"(log in with `hf auth login`); nor a local path ({type(e).__name__})") from None
    except Exception as e:  # noqa: BLE001 - no network, a proxy, a full disk: the same way out
        # huggingface_hub's message runs to several lines of advice; its first names the cause
        cause = str(e).strip().splitlines()[0].removeprefix("Got: ") if str(e).strip() else type(e).__name__
        if not re.match(r"\w+: ", cause):  # the listing's own error (httpx's) says no kind: name it
            cause = f"{type(e).__name__}: {cause}"
        where = ("a local model directory (config.json, weights and tokenizer, as save_pretrained writes them)"
                 if repo_type == "model" else "a local data file or directory")
        raise RlvrError(f"{repo_type} '{repo_id}' is not a local path nor in the Hugging Face cache ({cache}), and "
                        f"could not be downloaded ({cause}): download it on a machine that is online with "
                        f"`{command}` (into that cache; HF_HUB_CACHE or HF_HOME choose it), or give {where}") from None


def list_files(repo_id: str) -> list[str]:
    """The files of a Hub model repository, as the Hub lists them (one request)."""
    from huggingface_hub import HfApi

    return HfApi().list_repo_files(repo_id)


def model_patterns(repo_id: str, files: list[str]) -> list[str]:
    """What to download of a model repository holding `files`: MODEL_FILES and its weights in the first
    format of WEIGHTS it has; a repository with neither is refused, naming what it has."""
    from huggingface_hub.utils import filter_repo_objects

    for weights in WEIGHTS:
        if any(filter_repo_objects(files, allow_patterns=weights)):
            return MODEL_FILES + weights
    shown = ", ".join(files[:10]) + (", ..." if len(files) > 10 else "")
    raise RlvrError(f"model '{repo_id}' on the Hugging Face Hub has no weights rlvr loads (*.safetensors or "
                    f"pytorch_model*.bin; it has: {shown or 'no files'}): give a model that has, or a local model "
                    "directory")


def cached_config(repo_id: str) -> Path | None:
    """A Hub model's config.json from the cache (no network, no download), or None when it is not there:
    rlvr plan needs a model's config alone."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hf_cache_dir())
    return Path(found) if isinstance(found, str) else None


def _in_split(rel: Path, split: str) -> bool:
    """A data file of `split`: a folder of that name, or a file name that starts with it (train-0000...)."""
    return split in rel.parts[:-1] or re.match(rf"{re.escape(split)}([-_.]|$)", rel.name) is not None


def dataset_files(repo_id: str, config: str, split: str) -> list[Path]:
    """The data files of one config and split of a Hub dataset (Hub layouts: <config>/<split>-*.parquet,
    data/<split>-*.parquet, <split>.jsonl, ...), in name order."""
    return split_files(snapshot(repo_id, "dataset"), repo_id, config, split)


def data_files(root: Path) -> list[Path]:
    """The data files under a folder (relative to it), in name order; hidden folders (.git, .cache) skipped."""
    rels = (p.relative_to(root) for p in root.rglob("*") if data_suffix(p) in DATA_SUFFIXES and p.is_file())
    return sorted(r for r in rels if not any(part.startswith(".") for part in r.parts))


def split_files(root: Path, repo_id: str, config: str, split: str) -> list[Path]:
    """dataset_files of a folder in the Hub's layout: a snapshot, or a local copy (`hf download --local-dir`,
    a git clone of the dataset's repository)."""
    found = data_files(root)
    chosen = [r for r in found if _in_split(r, split) and (not config or config in r.parts[:-1])]
    configs = sorted({r.parts[0] for r in found if len(r.parts) > 1 and r.parts[0] not in ("data", split)})
    listed = ", ".join(map(str, found[:10])) + (", ..." if len(found) > 10 else "")
    if not config and len({r.parts[0] for r in chosen if len(r.parts) > 1} - {"data", split}) > 1:
        raise RlvrError(f"dataset '{repo_id}' has several configs ({', '.join(configs)}): choose one with task.config")
    if not chosen:
        raise RlvrError(f"dataset '{repo_id}': no {', '.join(DATA_SUFFIXES)} file of split '{split}'"
                        + (f" in config '{config}'" if config else "") + f" in {root} (it has: {listed or 'none'}); "
                        "set task.split" + (" and task.config" if configs else ""))
    return [root / r for r in chosen]
