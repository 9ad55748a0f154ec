"""Running the command line in tests: the error of a refused command, a batch asked, its
results told, and the runs the tests start."""

import csv
import errno
import io
import os
from pathlib import Path

import pytest
import torch

from botorch_nn_uq.bo import registered_problem
from botorch_nn_uq.cli import main
from tests.testing import write_results

#: Skip a test that needs the devices /dev/null, /dev/full and /dev/zero, or FIFOs.
needs_devices = pytest.mark.skipif(
    not all(Path(device).exists() for device in ("/dev/null", "/dev/full", "/dev/zero")),
    reason="needs /dev/null, /dev/full, /dev/zero",
)
needs_fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
#: Run a test once per way a write fails (a read-only folder, a full disk), with the
#: ``error`` raised and the ``reason`` a refused command gives.
each_write_failure = pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "Permission denied"),
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    ],
)
#: A new random-search run of ``ask`` on a 2-D box, its initial design of 4 points.
RANDOM_RUN = ["--bounds", "-10", "10", "--dim", "2", "--model", "random", "--n-initial", "4"]
#: A GP with a small acquisition optimisation and a small initial design.
GP = ["--model", "gp", "--num-restarts", "2", "--raw-samples", "16", "--n-initial", "4"]
#: The Levy function of the GP run of ``ask`` (:data:`GP_RUN`).
LEVY = registered_problem("levy", 2)
#: A new GP run of ``ask`` with qLogEI on Levy's box.
GP_RUN = ["--bounds", "-10", "10", "--dim", "2", *GP, "--acquisition", "qlogei", "--seed", "7"]


def rejected(argv: list[str], capsys) -> str:
    r"""The error of ``main(argv)``, which must exit with code 2 in one line after the
    usage."""
    with pytest.raises(SystemExit) as error:
        main(argv)
    assert error.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("botorch-nn-uq ")
    return err


def ask(state: Path, capsys, *arguments: str) -> list[dict[str, str]]:
    r"""The rows of the batch that ``ask --state state *arguments`` prints."""
    assert main(["ask", "--state", str(state), *arguments]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def tell(state: Path, rows: list[dict[str, str]], results: Path, capsys) -> None:
    r"""Tell the asked ``rows`` with the results ``x0 ** 2``, written to ``results``."""
    write_results(results, rows, [float(row["x0"]) ** 2 for row in rows])
    assert main(["tell", "--state", str(state), str(results)]) == 0
    capsys.readouterr()


def levy_results(path: Path, rows: list[dict[str, str]], values=None) -> Path:
    r"""The asked ``rows`` with their Levy values (or ``values``) as results, in ``path``."""
    if values is None:
        X = [[float(row["x0"]), float(row["x1"])] for row in rows]
        values = LEVY.evaluate(torch.tensor(X, dtype=torch.float64))[:, 0].tolist()
    return write_results(path, rows, values)


def refused_tell(state: Path, results: Path, capsys) -> str:
    r"""The error of ``tell --state state results``, which must leave the state as it was."""
    before = state.read_bytes()
    message = rejected(["tell", "--state", str(state), str(results)], capsys)
    assert state.read_bytes() == before
    return message
