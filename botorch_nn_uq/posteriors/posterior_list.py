"""Normal base samples for BoTorch's ``PosteriorList``, so explicit normal samplers work
through ``ModelList``.

BoTorch's ``ModelList`` returns a ``PosteriorList`` of its models' posteriors, and
``PosteriorList`` implements neither ``base_sample_shape`` nor ``batch_shape``: an
acquisition given an explicit ``SobolQMCNormalSampler`` or ``IIDNormalSampler`` (as
BoTorch's documentation and tutorials pass them) fails on a ``ModelList`` with
``NotImplementedError``, whatever the models, GPs included, and so do the hypervolume
acquisitions, which cache their baseline's base samples. Only ``ListSampler`` (one
sampler per model) works there.

:func:`install_posterior_list_base_samples` gives ``PosteriorList`` what a normal sampler
needs. The base samples of a list are ``batch_shape x q x K``: at every point, the
posteriors' base samples for that point side by side (``K`` the sum of their numbers
per point). A sample hands every posterior its own columns, reshaped to its own base
sample shape. The posteriors are independent, so this is what each would get from a
sampler of its own, with one seed for all; and the layout is point-major, as a
multi-output GP's is, so that samplers that keep the base samples of earlier points
when points are added (``_update_base_samples``) keep every posterior's. It is installed
when ``botorch_nn_uq.posteriors`` is imported, and only where BoTorch does not define
these members itself.
"""

from __future__ import annotations

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.posteriors.posterior import Posterior
from botorch.posteriors.posterior_list import PosteriorList
from torch import Tensor


def _batch_shape(self: PosteriorList) -> torch.Size:
    r"""The t-batch shape of the list: its samples are ``batch_shape x q x m``."""
    return self._extended_shape()[:-2]


def _per_point_shapes(posterior_list: PosteriorList) -> list[torch.Size]:
    r"""Each posterior's base sample shape without the list's batch dimensions, checked
    to be ``q`` or ``q x k``, per point."""
    if posterior_list._is_gaussian_mixture:
        raise UnsupportedError(
            "Normal samplers cannot draw from a PosteriorList that holds a fully Bayesian "
            "(GaussianMixturePosterior) posterior; pass a ListSampler instead."
        )
    batch_shape = _batch_shape(posterior_list)
    num_points = posterior_list._extended_shape()[-2]
    shapes = []
    for posterior in posterior_list.posteriors:
        shape = posterior.base_sample_shape
        event = shape[len(batch_shape) :]
        if shape[: len(batch_shape)] != batch_shape or not event or event[0] != num_points:
            raise UnsupportedError(
                f"A {type(posterior).__name__} with base samples of shape {tuple(shape)} has "
                f"no base samples per point of the list's batch {tuple(batch_shape)} x "
                f"{num_points} points; pass a ListSampler instead of a normal sampler."
            )
        shapes.append(event)
    return shapes


def _base_sample_shape(self: PosteriorList) -> torch.Size:
    r"""``batch_shape x q x K``: the posteriors' base samples per point side by side."""
    shapes = _per_point_shapes(self)
    num_points = self._extended_shape()[-2]
    per_point = sum(shape[1:].numel() for shape in shapes)
    return _batch_shape(self) + torch.Size([num_points, per_point])


def _batch_range(self: PosteriorList) -> tuple[int, int]:
    r"""The dimensions before the points and their columns are t-batch ones."""
    return (0, -2)


def _rsample_from_base_samples(
    self: PosteriorList, sample_shape: torch.Size, base_samples: Tensor
) -> Tensor:
    r"""Samples of every posterior from its columns of ``base_samples`` (``sample_shape x
    batch_shape x q x K``), concatenated along the outputs."""
    shapes = _per_point_shapes(self)
    leading = base_samples.shape[:-1]  # sample_shape x batch_shape x q
    columns = base_samples.split([shape[1:].numel() for shape in shapes], dim=-1)
    samples = [
        posterior.rsample_from_base_samples(sample_shape, part.reshape(leading + shape[1:]))
        for posterior, part, shape in zip(self.posteriors, columns, shapes, strict=True)
    ]
    return self._reshape_and_cat(tensors=samples)


def install_posterior_list_base_samples() -> None:
    r"""Give BoTorch's ``PosteriorList`` ``base_sample_shape``, ``batch_range``,
    ``batch_shape`` and ``rsample_from_base_samples`` (see the module docstring), each
    only if BoTorch does not define it for ``PosteriorList`` itself. Idempotent."""
    members = {
        "base_sample_shape": property(_base_sample_shape),
        "batch_range": property(_batch_range),
        "rsample_from_base_samples": _rsample_from_base_samples,
    }
    for name, member in members.items():
        if getattr(PosteriorList, name) is getattr(Posterior, name):
            setattr(PosteriorList, name, member)
    # PosteriorList answers an unknown attribute with an AttributeError of its own.
    if "batch_shape" not in vars(PosteriorList) and not hasattr(Posterior, "batch_shape"):
        PosteriorList.batch_shape = property(_batch_shape)
