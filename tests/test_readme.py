"""The README's examples must keep working exactly as written, and what it lists must
match what the code registers and the scripts do."""

import contextlib
import io
import re
from pathlib import Path

import torch

from botorch_nn_uq.bo.surrogates import PACKAGE_SURROGATES, RANDOM_SEARCH
from tests.readme_tables import MODELS_TABLE, render_models_table, replace_block

README = Path(__file__).resolve().parents[1] / "README.md"

#: Decimal numbers in a printed line, signs included.
NUMBER = r"-?\d+(?:\.\d+)?"


def test_quick_start_runs_and_prints_what_the_readme_shows() -> None:
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    quick_start = next(block for block in blocks if "optimize_acqf" in block)
    code_lines = [
        line
        for line in quick_start.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    assert len(code_lines) <= 12
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(quick_start, str(README), "exec"), namespace)
    bounds = namespace["bounds"]
    candidate = namespace["candidate"]
    assert candidate.shape == (1, 2)
    assert ((candidate >= bounds[0]) & (candidate <= bounds[1])).all()
    assert torch.isfinite(namespace["value"]).all()
    # The output shown below the code: the same line, up to the last digits that another
    # platform's floating point may change.
    shown = re.search(r"```text\n(next x = .*?)\n```", text).group(1)
    (line,) = printed.getvalue().splitlines()
    assert re.sub(NUMBER, "#", line) == re.sub(NUMBER, "#", shown)
    expected = torch.tensor([float(number) for number in re.findall(NUMBER, shown)])
    actual = torch.tensor([float(number) for number in re.findall(NUMBER, line)])
    torch.testing.assert_close(actual, expected, rtol=0, atol=0.02)


def test_models_table_is_rendered_from_the_cards_and_lists_every_registered_model() -> None:
    text = README.read_text()
    block = replace_block(text, MODELS_TABLE, render_models_table())
    assert block == text, (
        "The README's models table is stale: run `python -m tests.readme_tables README.md`."
    )
    section = text.split("\n## Models\n", 1)[1].split("\n## ", 1)[0]
    table = section.split(MODELS_TABLE[0], 1)[1].split(MODELS_TABLE[1], 1)[0]
    first_cells = [row.split("|")[1] for row in table.strip().splitlines()[2:]]
    listed = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    # Only the package's own registrations: benchmark runners register peers (VBLL) too.
    assert listed == {*PACKAGE_SURROGATES, RANDOM_SEARCH}


def test_readme_names_the_two_commands_and_they_exist() -> None:
    text = README.read_text()
    root = README.parent
    for script in ("scripts/optimize.sh", "scripts/test.sh"):
        assert f"bash {script}" in text
        assert (root / script).exists()
    assert "torch==2.13.0" in (root / "scripts" / "setup_env.sh").read_text()


def test_readme_names_the_extras_each_command_installs() -> None:
    text = " ".join(README.read_text().split())
    root = README.parent
    for script in ("scripts/optimize.sh", "scripts/test.sh"):
        (extras,) = re.findall(r'setup_env\.sh" (\S+)', (root / script).read_text())
        sentence = re.search(
            rf"`{re.escape(script)}` installs (.*?)(?:, everything| and passes)", text
        )
        assert sentence is not None, script
        named = set(re.findall(r"`([a-z]+)`", sentence.group(1)))
        assert named == set(extras.split(",")), script


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


def test_own_objective_example_runs_and_its_state_file_holds_the_told_batch() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    example = next(block for block in blocks if "FunctionProblem" in block)
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)
    optimizer = namespace["BayesianOptimizer"].load(namespace["state"])
    # 8 initial points, 3 batches of 4 by run(), and the batch told after loading.
    assert optimizer.X.shape == (24, 4) and optimizer.step == 5
    assert torch.equal(optimizer.X[-4:], namespace["X"])
    assert optimizer.best().value <= namespace["best"].value
