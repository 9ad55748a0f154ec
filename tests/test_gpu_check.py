"""The GPU scripts (scripts/gpu_check.sh, scripts/gpu_benchmarks.sh) are valid bash and
refuse cleanly without CUDA."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
REFUSALS = {
    "gpu_check.sh": "sees no CUDA device; this check needs a GPU",
    "gpu_benchmarks.sh": "sees no CUDA device; these benchmarks need a GPU",
}


@pytest.mark.parametrize("script", sorted(REFUSALS))
def test_the_gpu_script_is_valid_bash(script) -> None:
    subprocess.run(["bash", "-n", str(SCRIPTS / script)], check=True)


@pytest.mark.parametrize("script", sorted(REFUSALS))
def test_the_gpu_script_refuses_a_machine_without_cuda(script, tmp_path) -> None:
    # No visible GPU, whatever this machine has.
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPTS / script), str(tmp_path / "out")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert REFUSALS[script] in done.stderr
    assert not (tmp_path / "out").exists()
