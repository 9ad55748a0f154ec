"""The README is a newcomer's five minutes: short, its three examples run exactly as
written, its commands exist, and what it recommends is what the package registers."""

import contextlib
import csv
import io
import re
import shlex
from pathlib import Path

import torch

from botorch_nn_uq.bo import RECOMMENDED_STRATEGIES, Strategy
from botorch_nn_uq.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: The most lines the README may have: about BoTorch's (190) and trieste's (156), with room
#: for its three examples. Details belong in the user guide (docs/guide/).
MAX_LINES = 250

#: Decimal numbers in a printed line, signs included.
NUMBER = r"-?\d+(?:\.\d+)?"


def _section(text: str, heading: str) -> str:
    r"""The text under ``heading`` (a whole heading line) up to the next heading of level
    2 or 3 (a shell comment in a code block is not one)."""
    return re.split(r"\n#{2,3} ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]


def _python_block(text: str, containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    (block,) = [block for block in blocks if containing in block]
    return block


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES})."


def test_every_relative_link_names_a_file_that_exists() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [target for target in targets if not re.match(r"[a-z]+://", target)]
    assert local, "the README links no file of the repository"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_quick_start_runs_and_prints_what_the_readme_shows() -> None:
    text = README.read_text(encoding="utf-8")
    quick_start = _python_block(text, "optimize_acqf")
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


def test_own_objective_example_runs_and_its_state_file_holds_the_told_batch() -> None:
    example = _python_block(README.read_text(encoding="utf-8"), "FunctionProblem")
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(example, str(README), "exec"), namespace)
    optimizer = namespace["BayesianOptimizer"].load(namespace["state"])
    # 8 initial points, 3 batches of 4 by run(), and the batch told after loading.
    assert optimizer.X.shape == (24, 4) and optimizer.step == 5
    assert torch.equal(optimizer.X[-4:], namespace["X"])
    assert optimizer.best().value <= namespace["best"].value


def _write_results(batch: Path, results: Path, objective) -> None:
    r"""What the README asks of the user between ask and tell: ``batch`` with a column
    ``y`` of the objective's values, saved as ``results``."""
    with batch.open(newline="") as source:
        rows = list(csv.DictReader(source))
    with results.open("w", newline="") as target:
        writer = csv.DictWriter(target, fieldnames=[*rows[0], "y"])
        writer.writeheader()
        for row in rows:
            x = torch.tensor([float(value) for key, value in row.items() if key.startswith("x")])
            writer.writerow({**row, "y": objective(x)})


def test_command_line_example_runs_as_written(tmp_path, monkeypatch, capsys) -> None:
    text = _section(README.read_text(encoding="utf-8"), "### The command line")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    commands = [
        shlex.split(line, comments=True)
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
        if line.startswith("botorch-nn-uq ")
    ]
    assert [command[1] for command in commands] == ["list", "optimize", "ask", "tell", "ask"]
    monkeypatch.chdir(tmp_path)
    for command in commands:
        if command[1] == "tell":
            _write_results(
                tmp_path / "batch.csv",
                tmp_path / command[-1],
                lambda x: float(((x - 0.3) ** 2).sum()),
            )
        assert main(command[1:]) == 0, shlex.join(command)
    printed = capsys.readouterr().out
    assert "deep-ensemble:ts+tr+local(4)+continual" in printed  # by list and optimize
    assert "summary | best value" in printed
    with (tmp_path / "batch.csv").open() as batch:
        assert len(list(csv.DictReader(batch))) == 4


def test_readme_names_the_two_commands_and_they_exist() -> None:
    text = README.read_text(encoding="utf-8")
    for script in ("scripts/optimize.sh", "scripts/test.sh"):
        assert f"bash {script}" in text
        assert (ROOT / script).exists()
    assert "torch==2.13.0" in (ROOT / "scripts" / "setup_env.sh").read_text()


def test_readme_names_the_extras_each_command_installs() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    for script in ("scripts/optimize.sh", "scripts/test.sh"):
        (extras,) = re.findall(r'setup_env\.sh" (\S+)', (ROOT / script).read_text())
        sentence = re.search(
            rf"`{re.escape(script)}` installs (.*?)(?:, everything| and passes)", text
        )
        assert sentence is not None, script
        named = set(re.findall(r"`([a-z]+)`", sentence.group(1)))
        assert named == set(extras.split(",")), script


def test_recommended_strategies_are_those_the_package_lists() -> None:
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- recommended strategies:", 1)[1].split("<!-- end of", 1)[0]
    rows = [row.split("|")[1:3] for row in table.strip().splitlines()[3:]]
    shown = [(spelling.strip().strip("`"), regime.strip()) for regime, spelling in rows]
    assert shown == list(RECOMMENDED_STRATEGIES)
    for spelling, _ in shown:
        assert str(Strategy.parse(spelling)) == spelling
