"""Thompson sampling with BoTorch's MaxPosteriorSampling on the package's models."""

import pytest
import torch
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.models.transforms import Normalize, Standardize
from botorch.utils.sampling import draw_sobol_samples

from botorch_nn_uq.models import NEON, DeepEnsemble, MCDropout

# Every test fits a model: float64 only (the fits are the expensive part of the suite).
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
BANK_SIZE = 4
NUM_SAMPLES = 32


def _fitted(model_class, **hyperparameters):
    X = torch.rand(16, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Y = -((X - 0.5) ** 2).sum(-1, keepdim=True)
    transforms = {
        "input_transform": Normalize(2, bounds=BOUNDS),
        "outcome_transform": Standardize(1),
    }
    return model_class(X, Y, **transforms, **hyperparameters).fit(seed=0)


def _candidates():
    return draw_sobol_samples(BOUNDS, n=256, q=1, seed=0).squeeze(-2)


def _num_distinct(points):
    return points.unique(dim=0).shape[0]


@pytest.mark.parametrize(
    ("model_class", "hyperparameters"),
    [
        (MCDropout, {"hidden_widths": (32, 32), "epochs": 100, "dropout": 0.2}),
        (
            NEON,
            {"encoder_widths": (16,), "latent_dim": 8, "epinet_widths": (8,), "epochs": 50},
        ),
    ],
    ids=["mc-dropout", "neon"],
)
@pytest.mark.parametrize("joint_samples", ["continuous", "functions"])
def test_a_bank_drawn_from_a_distribution_gives_more_distinct_points_than_its_size(
    model_class, hyperparameters, joint_samples
):
    # Continuous samples are new functions; the finite set draws fresh ones beyond its size.
    size = {"num_masks" if model_class is MCDropout else "num_epistemic_samples": BANK_SIZE}
    model = _fitted(model_class, **hyperparameters, **size, joint_samples=joint_samples)
    torch.manual_seed(0)
    points = MaxPosteriorSampling(model)(_candidates(), num_samples=NUM_SAMPLES)
    assert points.shape == (NUM_SAMPLES, 2)
    assert _num_distinct(points) > BANK_SIZE


def test_an_ensembles_continuous_samples_give_more_points_than_members():
    model = _fitted(
        DeepEnsemble,
        hidden_widths=(16,),
        epochs=50,
        ensemble_size=BANK_SIZE,
        joint_samples="continuous",
    )
    torch.manual_seed(0)
    points = MaxPosteriorSampling(model)(_candidates(), num_samples=NUM_SAMPLES)
    assert _num_distinct(points) > BANK_SIZE


def test_an_ensemble_of_functions_gives_at_most_one_point_per_member_unless_deduplicated():
    model = _fitted(
        DeepEnsemble,
        hidden_widths=(16,),
        epochs=50,
        ensemble_size=BANK_SIZE,
        joint_samples="functions",
    )
    candidates = _candidates()
    torch.manual_seed(0)
    with_replacement = MaxPosteriorSampling(model)(candidates, num_samples=NUM_SAMPLES)
    assert _num_distinct(with_replacement) <= BANK_SIZE
    without_replacement = MaxPosteriorSampling(model, replacement=False)(
        candidates, num_samples=NUM_SAMPLES
    )
    assert _num_distinct(without_replacement) == NUM_SAMPLES
    # Noisy observations: a member plus Gaussian noise per candidate.
    noisy = MaxPosteriorSampling(model)(candidates, num_samples=NUM_SAMPLES, observation_noise=True)
    assert _num_distinct(noisy) > BANK_SIZE
