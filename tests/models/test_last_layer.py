"""The last layer's precision and the broadcast products of the conditioning
(botorch_nn_uq.models.last_layer)."""

import pytest
import torch
from botorch.models.transforms import Normalize

from botorch_nn_uq.models import DeepEnsemble, MCDropout
from botorch_nn_uq.models.last_layer import PRIOR_ROWS, broadcast_matmul, training_precision

F64 = {"dtype": torch.float64}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((5, 3, 2, 4), (3, 4, 6)),
        ((3, 2, 4), (7, 1, 3, 4, 6)),
        ((7, 1, 2, 4), (1, 5, 4, 6)),
        ((2, 4), (4, 6)),
        ((2, 1, 3, 2, 4), (2, 5, 1, 4, 6)),
    ],
)
def test_broadcast_matmul_is_matmul(left, right) -> None:
    generator = torch.Generator().manual_seed(0)
    A = torch.randn(left, generator=generator, **F64)
    B = torch.randn(right, generator=generator, **F64)
    torch.testing.assert_close(broadcast_matmul(A, B), A @ B)


def _data():
    X = torch.rand(30, 2, generator=torch.Generator().manual_seed(0), **F64)
    return X, X.sin().sum(-1, keepdim=True)


@pytest.mark.parametrize("model_class", [DeepEnsemble, MCDropout])
def test_the_precision_is_the_ridge_gram_of_each_functions_training_features(
    model_class,
) -> None:
    X, Y = _data()
    model = model_class(X, Y, input_transform=Normalize(2), hidden_widths=(8,), epochs=20)
    model.fit(seed=0)
    train_X, _ = model.transformed_training_data()
    model.eval()
    features = model._predict(train_X.unsqueeze(-2), False, return_features=True).features
    features = features.squeeze(-2).squeeze(-2).movedim(0, -2)  # functions x n x H
    gram = features.transpose(-2, -1) @ features
    ridge = PRIOR_ROWS * features.pow(2).mean((-2, -1))
    expected = gram + ridge[:, None, None] * torch.eye(gram.shape[-1], **F64)
    precision = training_precision(model)
    torch.testing.assert_close(precision.precision, expected)
    identity = torch.eye(gram.shape[-1], **F64).expand_as(expected)
    torch.testing.assert_close(precision.precision @ precision.covariance, identity)
