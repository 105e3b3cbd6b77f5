"""The README's Python API example runs as written (its run directory moved to a temporary one)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_api_example_runs(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(code.replace("runs/api", str(tmp_path / "api")), namespace)
    assert namespace["summary"]["steps"] == 2 and (tmp_path / "api" / "summary.json").is_file()
    assert namespace["adv"].shape == (1, 4) and float(namespace["adv"][0, 0]) > 0
