"""Reading a data source into rows: .jsonl, .json, .csv (each may be gzipped: .jsonl.gz), .parquet, a directory
written by Hugging Face datasets' save_to_disk (or `hf download --local-dir`), or rows given in memory to
rlvr.fit. A .json file is a JSON array of row objects or JSON lines (what `datasets`' to_json writes), as
`load_dataset("json", ...)` reads either. Each row comes with where it is (the 1-based line for JSONL and CSV,
the 1-based row for parquet and arrow), so that errors name it; what a row means is rlvr.tasks.files's.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from pathlib import Path
from typing import Iterator

from rlvr.errors import RlvrError, decode_utf8
from rlvr.hub import data_suffix

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
Row = tuple[str, dict]  # (where in the file, e.g. "line 3", the row's columns)


def is_file_source(name: str) -> bool:
    return data_suffix(name) in SUFFIXES or Path(name).expanduser().is_dir()


def read_text(path: Path) -> str:
    """A data file's text: UTF-8, gunzipped first when its name ends in .gz."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise RlvrError(f"{path}: not a readable gzip file ({e})") from None
    return decode_utf8(data, path)


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise RlvrError("parquet and save_to_disk datasets need pyarrow: pip install 'rlvr[data]'") from None
    return pyarrow


def parse_jsonl(lines, path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-empty line of a JSONL file, in order; errors name the file
    and line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RlvrError(f"{path} line {n}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise RlvrError(f"{path} line {n}: expected a JSON object, got {type(row).__name__}")
        yield n, row


def read_jsonl(path: Path) -> list[Row]:
    text = read_text(path)
    try:
        return [(f"line {n}", row) for n, row in parse_jsonl(text.split("\n"), path)]  # only "\n" ends a line
    except RlvrError as e:
        if text.lstrip().startswith("[") and str(e).startswith(f"{path} line 1:"):  # json.dump(rows) saved as .jsonl
            raise RlvrError(f"{e}; the file is one JSON array, not JSON lines: name it .json, or write one "
                            "object per line") from None
        raise


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _array_rows(text: str, path) -> list[Row]:
    """The objects of a JSON array, each named by the line it starts on. The text is valid JSON (checked
    by the caller), so the walk only has to find where each element starts."""
    decoder, rows = json.JSONDecoder(), []
    i, line, counted = _SPACE.match(text, text.index("[") + 1).end(), 1, 0
    while text[i] != "]":
        line, counted = line + text.count("\n", counted, i), i
        row, end = decoder.raw_decode(text, i)
        if not isinstance(row, dict):
            raise RlvrError(f"{path} line {line}: element {len(rows) + 1} of the array: expected a JSON object, "
                            f"got {type(row).__name__}")
        rows.append((f"line {line}", row))
        i = _SPACE.match(text, end).end()
        i = _SPACE.match(text, i + 1).end() if text[i] == "," else i
    return rows


def read_json(path: Path) -> list[Row]:
    """A .json file: a JSON array of row objects, or one object per line (JSON lines)."""
    text = read_text(path)
    if text.lstrip().startswith("["):
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            raise RlvrError(f"{path} line {e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        return _array_rows(text, path)
    try:
        return [(f"line {n}", row) for n, row in parse_jsonl(text.split("\n"), path)]
    except RlvrError as not_lines:
        try:
            whole = json.loads(text)  # one object written over several lines?
        except json.JSONDecodeError:
            whole = None
        if not isinstance(whole, dict):
            raise not_lines from None
        lists = [k for k, v in whole.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)]
        held = f"; its '{lists[0]}' holds a list of {len(whole[lists[0]])} objects" if lists else ""
        raise RlvrError(f"{path}: one JSON object{held}, not rows: give a JSON array of row objects, or one "
                        "object per line (JSON lines)") from None


def read_csv(path: Path) -> list[Row]:
    rows = []
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.DictReader(f)
        start = 2  # the header is line 1; a quoted field may span lines, so track where each row starts
        try:
            for row in reader:
                rows.append((f"line {start}", {k: v for k, v in row.items() if k is not None}))
                start = reader.line_num + 1
        except csv.Error as e:
            raise RlvrError(f"{path} line {reader.line_num}: not valid CSV ({e})") from None
    return rows


def _table_rows(table, offset: int = 0) -> list[Row]:
    return [(f"row {offset + i + 1}", row) for i, row in enumerate(table.to_pylist())]


def read_parquet(path: Path) -> list[Row]:
    pa = _pyarrow()
    try:
        return _table_rows(pa.parquet.read_table(path))
    except pa.ArrowException as e:
        raise RlvrError(f"{path}: not a readable parquet file ({e})") from None


def _read_arrow(path: Path):
    pa = _pyarrow()
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all()  # save_to_disk writes the streaming format
    except pa.ArrowInvalid:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()


def read_saved_dataset(path: Path) -> list[Row]:
    """A `Dataset.save_to_disk` directory (state.json lists its arrow files), or a `DatasetDict` one,
    whose train split is read (point task.heldout_file at its other split's folder)."""
    if (path / "dataset_dict.json").exists():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        if "train" not in splits:
            raise RlvrError(f"{path}: a DatasetDict without a train split (it has {', '.join(splits)}); "
                            f"name one split's folder, e.g. {path / splits[0]}" if splits else f"{path}: no splits")
        path = path / "train"
    state = path / "state.json"
    if not state.exists():
        raise RlvrError(f"{path}: a directory, but not one written by datasets' save_to_disk (no state.json), nor "
                        f"one holding data files ({', '.join(SUFFIXES)}) as a Hub dataset's folder does")
    try:
        files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise RlvrError(f"{state}: cannot read its list of data files ({e})") from None
    rows: list[Row] = []
    for name in files:
        rows += _table_rows(_read_arrow(path / name), len(rows))
    return rows


# Rows handed to rlvr.fit in memory, by the absolute path of the JSONL file they are saved to once the
# run has loaded (save_rows): read from here until then, so a failed start writes nothing.
_GIVEN: dict[str, tuple[str, list[dict]]] = {}


def give_rows(path: Path, label: str, rows: list[dict]) -> None:
    """Register in-memory rows (`label` names them in errors, e.g. 'train_dataset') as the file `path`."""
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise RlvrError(f"{label} row {i}: expected a dict of columns, got {type(row).__name__}")
        try:
            json.dumps(row)
        except (TypeError, ValueError) as e:
            raise RlvrError(f"{label} row {i}: a value is not plain data (text, numbers, lists, dicts): {e}") from None
    if not rows:
        raise RlvrError(f"{label}: no rows")
    _GIVEN[str(Path(path).resolve())] = (label, list(rows))


def save_rows(run_dir: Path) -> None:
    """Write the registered rows that belong under `run_dir` to their files (atomically) and forget them."""
    from rlvr.io import atomic_write_text

    root = Path(run_dir).resolve()
    for path in [p for p in _GIVEN if Path(p).is_relative_to(root)]:
        _, rows = _GIVEN.pop(path)
        atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


def source_label(name: str) -> str:
    """How errors name a source: its path, or the label of rows given in memory."""
    given = _GIVEN.get(str(Path(name).resolve()))
    return given[0] if given else name


def read_rows(name: str) -> list[Row]:
    given = _GIVEN.get(str(Path(name).resolve()))
    if given is not None:
        return [(f"row {i}", dict(row)) for i, row in enumerate(given[1], 1)]
    path = Path(name).expanduser()  # ~/data/gsm8k/train.parquet, as verl's configs write it
    if not path.exists():  # a relative path is read from the working directory, not the config's folder
        where = "" if path.is_absolute() else f" (in the working directory, {Path.cwd()})"
        raise RlvrError(f"no such dataset file or directory: {name}{where}")
    if path.is_dir():
        rows = read_saved_dataset(path)
    else:
        reader = {".jsonl": read_jsonl, ".json": read_json, ".csv": read_csv,
                  ".parquet": read_parquet}.get(data_suffix(path))
        if reader is None:
            raise RlvrError(f"{name}: unsupported file type '{''.join(path.suffixes[-2:])}'; use "
                            f"{', '.join(SUFFIXES)} (the first three may be gzipped: .jsonl.gz) or a save_to_disk directory")
        rows = reader(path)
    if not rows:
        raise RlvrError(f"{name}: no rows")
    return rows


def read_files(paths: list[Path]) -> list[Row]:
    """The rows of several files (a Hub dataset's shards), each named by its file: 'train-0000.parquet row 3'."""
    return [(f"{path.name} {where}", row) for path in paths for where, row in read_rows(str(path))]
