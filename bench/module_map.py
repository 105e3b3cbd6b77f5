"""How the source tree hangs together, in figures: import circles among rlvr modules (from the source,
with `ast`), the rlvr modules `import rlvr.train.grpo` loads (and whether the sandbox is among them),
and the rlvr modules one GRPO step of configs/smoke.yaml enters, with how often the running module
changes. Run from the repository root: `python bench/module_map.py [--no-step]`."""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "rlvr"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def module_imports(path: Path, modules: set[str], in_functions: bool = False) -> set[str]:
    """rlvr modules imported at module level (TYPE_CHECKING blocks included); with `in_functions`, the
    imports inside function bodies too (a lazy import hides a circle from Python, not from a reader)."""
    mod, is_pkg = module_name(path), path.name == "__init__.py"
    found: set[str] = set()

    def target(name: str) -> str | None:  # the module itself, else its nearest package
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not in_functions:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                visit([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)
                       or isinstance(c, ast.ExceptHandler)])
                continue
            for n in names:
                t = target(n)
                if t and t != mod:
                    found.add(t)

    visit(ast.parse(path.read_text()).body)
    return found


def import_graph(in_functions: bool = False) -> dict[str, set[str]]:
    """module -> the rlvr modules it imports (a package's `__init__` counts as the package)."""
    paths = sorted(PKG.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): module_imports(p, modules, in_functions) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def loaded_by(module: str) -> list[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'rlvr')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def step_trace() -> tuple[list[str], int, int]:
    """(rlvr files entered, module switches, of them calls) over one train_step of configs/smoke.yaml, setup excluded.
    A switch is a Python call or return that moves from one rlvr file to another (frames outside rlvr,
    torch's included, are not counted and do not break a run)."""
    import tempfile

    from rlvr.config import build_config
    from rlvr.train.assemble import setup
    from rlvr.train.step import collect, train_step
    from rlvr.train.overlap import Rollouts

    out = tempfile.mkdtemp()
    cfg = build_config(ROOT / "configs/smoke.yaml", [f"--train.out={out}", "--train.threads=1"])
    run = setup(cfg)
    entered: set[str] = set()
    state = {"last": None, "switches": 0, "calls": 0}
    prefix = str(PKG) + "/"

    def prof(frame, event, arg):
        if event not in ("call", "return"):
            return
        f = frame.f_code.co_filename
        if event == "return":
            back = frame.f_back
            f = back.f_code.co_filename if back is not None else f
        if not f.startswith(prefix):
            return
        entered.add(f)
        if state["last"] is not None and f != state["last"]:
            state["switches"] += 1
            state["calls"] += event == "call"
        state["last"] = f

    run.models.policy.train()
    sys.setprofile(prof)
    try:
        with Rollouts(lambda step: collect(run, step), run.engine, run.models.policy, one_step_off=False) as rollouts:
            train_step(run, 1, rollouts)
    finally:
        sys.setprofile(None)
    return sorted(str(Path(f).relative_to(ROOT)) for f in entered), state["switches"], state["calls"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-step", action="store_true", help="skip the traced step (no model is built)")
    ap.add_argument("--list", action="store_true", help="list the modules, not only count them")
    args = ap.parse_args()
    graph = import_graph()
    for lazy in (False, True):
        circles = cycles(import_graph(lazy))
        where = "module level and inside functions" if lazy else "module level"
        print(f"rlvr modules: {len(graph)}; import circles ({where}): {len(circles)}")
        for c in circles:
            print("  circle: " + " <-> ".join(c))
    loaded = loaded_by("rlvr.train.grpo")
    sandbox = [m for m in loaded if any(s in m for s in ("sandbox", "confine", "seccomp", "cgroup", "harness",
                                                          "judge", "program", "pipes", "collect"))]
    print(f"import rlvr.train.grpo: {len(loaded)} rlvr modules loaded; sandbox modules among them: "
          f"{len(sandbox)} {sandbox if sandbox else ''}")
    if args.list:
        print("  " + "\n  ".join(loaded))
    if not args.no_step:
        files, switches, calls = step_trace()
        print(f"one GRPO step of configs/smoke.yaml: {len(files)} rlvr modules entered, {switches} module "
              f"switches ({calls} on a call, the rest on a return)")
        if args.list:
            print("  " + "\n  ".join(files))


if __name__ == "__main__":
    main()
