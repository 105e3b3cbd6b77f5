"""Dataclasses of more than three fields are keyword-only (beyond the third, at least), so they are built
by keyword: a field added, removed or moved cannot shift values into the wrong field without an error
(UpdateSettings.of once built eight fields from seven positional values and the optimizer section
silently took its defaults)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a data table of templates written in the order of its fields, one row each (rlvr/tasks/pyfunc.py reads it)
POSITIONAL = {("rlvr/tasks/pyfunc_problems.py", "Template")}
# The user types (rlvr/public.py's positional_too: Reply, Problem, Reward) are keyword-only here too, so rlvr
# builds them by keyword; users keep the positional forms they wrote (Reply("text", "user")), later fields
# with a DeprecationWarning: tests/test_public.py holds those forms.


def wide_positional_dataclasses(root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, class) of every dataclass under root/rlvr with more than three fields, not keyword-only."""
    found = []
    for path in sorted((root / "rlvr").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for dec in node.decorator_list:
                if "dataclass" not in ast.unparse(dec):
                    continue
                kw_only = isinstance(dec, ast.Call) and any(
                    k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in dec.keywords)
                # fields a caller could pass by position (a field(kw_only=True) cannot be)
                fields = [s for s in node.body if isinstance(s, ast.AnnAssign)
                          and "ClassVar" not in ast.unparse(s.annotation)
                          and "kw_only=True" not in (ast.unparse(s.value) if s.value is not None else "")]
                if len(fields) > 3 and not kw_only:
                    found.append((str(path.relative_to(root)), node.name))
    return found


def test_dataclasses_of_more_than_three_fields_are_keyword_only():
    assert sorted(set(wide_positional_dataclasses()) - POSITIONAL) == []


def test_the_check_finds_a_positional_one(tmp_path):
    pkg = tmp_path / "rlvr"
    pkg.mkdir()
    (pkg / "m.py").write_text("from dataclasses import dataclass\n@dataclass(frozen=True)\n"
                              "class Wide:\n    a: int\n    b: int\n    c: int\n    d: int = 0\n"
                              "@dataclass(kw_only=True)\nclass Ok:\n    a: int\n    b: int\n    c: int\n    d: int\n")
    assert wide_positional_dataclasses(tmp_path) == [("rlvr/m.py", "Wide")]
