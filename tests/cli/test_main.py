"""The entry points of the command line: ``python -m botorch_nn_uq`` runs ``main``."""

import subprocess
import sys


def test_module_entry_point_runs() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "botorch_nn_uq", "list"], capture_output=True, text=True, check=True
    )
    assert "models:" in completed.stdout
