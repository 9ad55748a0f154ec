"""Smoke run of the NEON profile at PDE scale (benchmarks/neon_profile.py)."""

from benchmarks import neon_profile


def test_smoke_profile_reports_every_stage(tmp_path) -> None:
    text = neon_profile.main(["--smoke", "--out", str(tmp_path)]).read_text()
    # The network does not depend on the grid: the smoke grid has the paper's count.
    assert "38,820 trainable parameters (the paper: 38,820)" in text
    for stage in neon_profile.STAGES:
        assert f"## {stage} (" in text
    assert text.count("| float32 |") == 2 and text.count("| float64 |") == 2
    assert "Compiling the network (`torch.compile`, float32" in text
    assert "authors: full batch" in text and "warm start from the cold fit" in text
    for optimiser in ("BoTorch optimize_acqf", "L-BFGS on 128 indices", "L-BFGS on 4 indices"):
        assert text.count(optimiser) == 2  # at both data sizes
    assert text.count("float32 against float64") == 2
    # The runner's last two smoke iterations (5 + 2 and 5 + 3 evaluations).
    assert "| 2 | 7 | cold | 23 |" in text and "| 3 | 8 | warm start | 5 |" in text
    assert (tmp_path / "data.pt").exists()
