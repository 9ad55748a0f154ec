"""Smoke run of the NOMU paper-loop runner (benchmarks/nomu_paper_variant.py)."""

import torch

from benchmarks import nomu_paper_variant
from botorch_nn_uq.bo import proposers


def test_c_is_set_once_from_the_initial_design_and_kept(tmp_path, monkeypatch) -> None:
    constants = []
    optimize = proposers.optimize_acqf_with_dynamic_calibration

    def recording(model, *args, **kwargs):
        constants.append(model.calibration_constant.clone())
        return optimize(model, *args, **kwargs)

    monkeypatch.setattr(proposers, "optimize_acqf_with_dynamic_calibration", recording)
    text = nomu_paper_variant.main(["--smoke", "--out", str(tmp_path)]).read_text()
    assert "| levy-2d | 0 |" in text and "| levy-2d | 1 |" in text
    (result,) = [torch.load(path, weights_only=False) for path in (tmp_path / "runs").glob("*.pt")]
    assert len(result.regret) == 3 and len(result.doublings) == 2
    assert result.regret[-1] <= result.regret[0]
    # Two steps, two fits: both optimise with the constant MW scaling chose after the first.
    assert len(constants) == 2
    assert torch.equal(constants[0], constants[1])
    assert constants[0][0].item() == result.calibration_constant
