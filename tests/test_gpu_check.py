"""The GPU check (scripts/gpu_check.sh) is valid bash and refuses cleanly without CUDA."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"


def test_the_gpu_check_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_the_gpu_check_refuses_a_machine_without_cuda(tmp_path) -> None:
    # No visible GPU, whatever this machine has.
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "sees no CUDA device; this check needs a GPU" in done.stderr
    assert not (tmp_path / "out").exists()
