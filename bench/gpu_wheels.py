"""Install carried wheels for bench/gpu.py's processes on a machine with no package registry.

Two sets, each resolved from root requirements over the carried wheels (pip --no-index --no-deps --target):
rlvr's (pyproject.toml's dependencies: on an image whose transformers is not the one rlvr pins, every
process needs the carried one) and TRL's (the carried trl and what it needs beyond rlvr's set; on PYTHONPATH
of the TRL processes alone). A carried wheel is installed only where the running Python lacks the package or
holds a version that the requirements reject; everything else keeps the image's own version.
"""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
NOT_NEEDED = {"gguf"}  # rlvr reads GGUF only to convert SmolLM2's weights; the benchmark builds its own


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_requirements(path: Path) -> list[str]:
    """The wheel's Requires-Dist lines (extras and markers included; the caller filters)."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def _specs(lines: list[str]) -> dict[str, SpecifierSet]:
    out: dict[str, SpecifierSet] = {}
    for line in lines:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        name = canonical(req.name)
        out[name] = out.get(name, SpecifierSet()) & req.specifier
    return out


def needed_wheels(roots: list[str], carried: dict[str, tuple[str, list[str]]],
                  installed: dict[str, str | None]) -> tuple[dict[str, str], dict[str, str]]:
    """roots: requirement lines; carried: name -> (version, its Requires-Dist lines); installed: name -> the
    running Python's version (None: absent). Returns ({carried name: why it is installed}, {name: why it is
    unmet}) where unmet names a requirement that neither the Python nor a carried wheel meets."""
    chosen: dict[str, str] = {}
    while True:  # a chosen wheel's own requirements can call for more wheels; chosen only grows
        before = len(chosen)
        specs = _specs(roots + [line for n in chosen for line in carried[n][1]])
        unmet = {}
        for name, spec in specs.items():
            have = installed.get(name)
            if have is not None and spec.contains(Version(have), prereleases=True):
                continue
            why = "absent" if have is None else f"{have} is not {spec}"
            if name in carried and spec.contains(Version(carried[name][0]), prereleases=True):
                chosen.setdefault(name, why)
            else:
                unmet[name] = why + ("" if name not in carried else f" (carried: {carried[name][0]})")
        if len(chosen) == before:
            return chosen, unmet


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def rlvr_requirements() -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    # the memory rows' extras: lora (peft, the adapters) and quant (torchao: the 4-bit base, 8-bit optimizer state)
    extras = project["optional-dependencies"]
    deps = project["dependencies"] + extras["lora"] + extras["quant"]
    return [d for d in deps if canonical(Requirement(d).name) not in NOT_NEEDED]


def _install(wheels: list[Path], target: Path) -> None:
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--disable-pip-version-check", "--target", str(target), *map(str, wheels)], check=True)


def install_wheels(folder: Path | None, work: Path, trl: bool) -> tuple[list[str], list[str], str]:
    """Install from `folder` into work/site-rlvr and work/site-trl what each set needs; returns (rlvr's
    PYTHONPATH entries, TRL's extra entries, a note). Without a folder only the check is made."""
    wheels = {canonical(w.name.split("-")[0]): w for w in sorted(Path(folder).glob("*.whl"))} if folder else {}
    if folder and not wheels:
        raise SystemExit(f"--wheels {folder}: no .whl files there")
    carried = {n: (w.name.split("-")[1], wheel_requirements(w)) for n, w in wheels.items()}
    names = {canonical(Requirement(r).name) for r in rlvr_requirements()} | set(carried) | {
        canonical(Requirement(r).name) for _, reqs in carried.values() for r in reqs}
    have = {n: installed_version(n) for n in names}
    for_rlvr, unmet = needed_wheels(rlvr_requirements(), carried, have)
    notes = [f"rlvr's processes: installed {_listed(for_rlvr, carried)}"]
    if unmet:
        notes.append("  warning: rlvr needs " + ", ".join(f"{n} ({why})" for n, why in unmet.items())
                     + ("" if folder else ": pass --wheels DIR holding it (see --help)"))
    _install([wheels[n] for n in for_rlvr], work / "site-rlvr")
    paths = [str(work / "site-rlvr")] if for_rlvr else []
    if not trl or "trl" not in carried:
        return paths, [], "\n".join(notes)
    have.update({n: carried[n][0] for n in for_rlvr})  # the TRL processes see rlvr's set too
    for_trl, unmet = needed_wheels([f"trl=={carried['trl'][0]}"], carried, have)
    notes.append(f"TRL's processes: installed {_listed(for_trl, carried)}")
    if unmet:
        notes.append("  warning: TRL needs " + ", ".join(f"{n} ({why})" for n, why in unmet.items()))
    _install([wheels[n] for n in for_trl], work / "site-trl")
    return paths, [str(work / "site-trl")] if for_trl else [], "\n".join(notes)


def _listed(chosen: dict[str, str], carried: dict) -> str:
    return ", ".join(f"{n} {carried[n][0]} (here: {why})" for n, why in chosen.items()) or "nothing"
