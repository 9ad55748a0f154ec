"""The README's quick start must keep working exactly as written."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    quick_start = next(block for block in blocks if "optimize_acqf" in block)
    code_lines = [
        line
        for line in quick_start.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    assert len(code_lines) <= 10
    namespace: dict = {}
    exec(compile(quick_start, str(README), "exec"), namespace)
    bounds = namespace["bounds"]
    candidate = namespace["candidate"]
    assert candidate.shape == (1, 2)
    assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()
    assert torch.isfinite(namespace["value"]).all()


def test_readme_names_the_two_commands_and_they_exist() -> None:
    text = README.read_text()
    root = README.parent
    for script in ("scripts/optimize.sh", "scripts/test.sh"):
        assert f"bash {script}" in text
        assert (root / script).exists()
    assert "torch==2.13.0" in (root / "scripts" / "setup_env.sh").read_text()


def test_large_batch_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    example = next(block for block in blocks if "batch_thompson_sampling" in block)
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)
    proposals, bounds = namespace["X_next"], namespace["bounds"]
    assert proposals.shape == (100, 20)
    assert ((proposals >= bounds[0]) & (proposals <= bounds[1])).all()
    assert torch.cdist(proposals, proposals).fill_diagonal_(1.0).min() > 0
    assert namespace["warm"].training_result.steps_run == 100
