"""docs/DESIGN.md's layout has a line for every file under rlvr/ (an empty __init__.py needs none), and
names no file that is gone."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout_paths() -> set[str]:
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    block = re.search(r"## Layout \(a line per file\)\n.*?```\n(.*?)```", text, re.S).group(1)
    return {line.split()[0] for line in block.splitlines() if line.startswith("rlvr/")}


def test_every_rlvr_file_has_a_line_and_every_line_a_file():
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "rlvr").rglob("*.py") if p.stat().st_size}
    listed = layout_paths()
    assert sorted(files - listed) == [], "add a line for each to docs/DESIGN.md's layout"
    assert sorted(listed - files) == [], "docs/DESIGN.md's layout names files that do not exist"


def test_every_path_the_docs_name_exists():
    """A reader follows README.md's and docs/*.md's paths (rlvr/..., tests/..., bench/..., configs/...) to
    the file: one that moved or went is a dead end. A path may leave off `.py`."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for m in re.finditer(r"(?<![\w/.\-])((?:rlvr|tests|bench|configs|docs)/[\w./\-]*\w)", line):
                if not (ROOT / m.group(1)).exists() and not (ROOT / (m.group(1) + ".py")).exists():
                    missing.append(f"{doc.name}:{number}: {m.group(1)}")
    assert missing == []


def test_every_benchmark_script_answers_help():
    """docs/performance.md sends a reader to each bench script's `--help` for its flags: every script run as a
    program parses its arguments with argparse (a script reading sys.argv by hand ran the benchmark, or
    failed on int('--help')), and --help prints the usage and exits without measuring anything."""
    import subprocess
    import sys

    children = {"gpu_children.py"}  # bench/gpu.py's own child processes, given a job's JSON: not run by hand
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py"))
               if '__name__ == "__main__"' in p.read_text() and p.name not in children]
    assert [p.name for p in scripts if "ArgumentParser(" not in p.read_text()] == []
    for name in ("memory", "sandbox_overhead", "train_forward", "math_checks"):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), "--help"], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: {name}.py"), (name, done.stderr[-500:])
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "memory.py"), "1", "tiny-random", "full,lora"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)  # lora8 is the name
    assert done.returncode == 2 and "unknown configs lora: of full, full+ckpt" in done.stderr


def test_every_link_between_the_docs_lands():
    """README.md's and docs/*.md's links to each other reach a file, and a #fragment a heading of it (as
    GitHub makes a heading's anchor: lower case, punctuation but - and _ dropped, spaces as -)."""
    def anchor(heading: str) -> str:
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    dead = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, fragment = target.partition("#")
            linked = (doc.parent / path) if path else doc
            if not linked.exists():
                dead.append(f"{doc.name}: {target}")
            elif fragment and linked.suffix == ".md" and fragment not in {
                    anchor(h) for h in re.findall(r"^#+ (.*)$", linked.read_text(), re.M)}:
                dead.append(f"{doc.name}: {target}")
    assert dead == []


def test_every_test_the_docs_point_at_exists():
    """docs/DESIGN.md points each claim a test holds at that test (`tests/x.py::test_name`): a test renamed or
    gone leaves the claim unheld, so the name must be a test function of that file."""
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", doc.read_text()):
            source = (ROOT / path).read_text() if (ROOT / path).exists() else ""
            if not re.search(rf"^def {name}\(", source, re.M):
                missing.append(f"{doc.name}: {path}::{name}")
    assert missing == []
    assert "tests/algo/test_objectives.py::test_an_objective_added" in (ROOT / "docs" / "DESIGN.md").read_text()


def test_the_files_past_the_size_guide_are_the_ones_named():
    """docs/DESIGN.md's frictions name every rlvr file past the 400-line guide ("Keep files under about 400
    lines"), and only those: one that grows past it, or is split below it, changes the line."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    line = re.search(r"^- Past the 400-line guide: (.*?)\(`tests/", text, re.M | re.S).group(1)
    named = set(re.findall(r"rlvr/[\w/]+\.py", line))
    past = {str(p.relative_to(ROOT)) for p in (ROOT / "rlvr").rglob("*.py") if len(p.read_text().splitlines()) > 400}
    assert sorted(past - named) == [] and sorted(named - past) == []
