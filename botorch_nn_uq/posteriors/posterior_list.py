"""Normal base samples for BoTorch's ``PosteriorList``, so explicit normal samplers work
through ``ModelList``.

BoTorch's ``ModelList`` returns a ``PosteriorList`` of its models' posteriors, and
``PosteriorList`` does not implement ``base_sample_shape``: an acquisition given an
explicit ``SobolQMCNormalSampler`` or ``IIDNormalSampler`` (as BoTorch's documentation
and tutorials pass them) fails on a ``ModelList`` with ``NotImplementedError``, whatever
the models, GPs included. Only ``ListSampler`` (one sampler per model) works there.

:func:`install_posterior_list_base_samples` gives ``PosteriorList`` what a normal
sampler needs: the base samples of a list are those of its posteriors side by side
(each posterior's own non-batch base sample shape, flattened and concatenated), and a
sample hands every posterior its own slice. The posteriors are independent, so this is
exactly what each posterior gets from its own sampler, with one seed for all. It is
installed when ``botorch_nn_uq.posteriors`` is imported, and only where BoTorch does
not define these members itself.
"""

from __future__ import annotations

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.posteriors.posterior import Posterior
from botorch.posteriors.posterior_list import PosteriorList
from torch import Tensor


def _list_batch_shape(posterior_list: PosteriorList) -> torch.Size:
    r"""The t-batch shape of the list (its samples are ``batch_shape x q x m``)."""
    return posterior_list._extended_shape()[:-2]


def _event_shapes(posterior_list: PosteriorList) -> list[torch.Size]:
    r"""Each posterior's base sample shape without the list's batch dimensions."""
    if posterior_list._is_gaussian_mixture:
        raise UnsupportedError(
            "Normal samplers cannot draw from a PosteriorList that holds a fully Bayesian "
            "(GaussianMixturePosterior) posterior; pass a ListSampler instead."
        )
    batch_shape = _list_batch_shape(posterior_list)
    shapes = []
    for posterior in posterior_list.posteriors:
        shape = posterior.base_sample_shape
        if shape[: len(batch_shape)] != batch_shape:
            raise UnsupportedError(
                f"A {type(posterior).__name__} with base samples of shape {tuple(shape)} "
                f"does not share the list's batch shape {tuple(batch_shape)}; pass a "
                "ListSampler instead of a normal sampler."
            )
        shapes.append(shape[len(batch_shape) :])
    return shapes


def _base_sample_shape(self: PosteriorList) -> torch.Size:
    r"""``batch_shape x N``: the posteriors' base samples side by side, ``N`` the sum of
    their numbers of non-batch base sample entries."""
    total = sum(shape.numel() for shape in _event_shapes(self))
    return _list_batch_shape(self) + torch.Size([total])


def _batch_range(self: PosteriorList) -> tuple[int, int]:
    r"""Every dimension of :func:`_base_sample_shape` but the last is a t-batch one."""
    return (0, -1)


def _rsample_from_base_samples(
    self: PosteriorList, sample_shape: torch.Size, base_samples: Tensor
) -> Tensor:
    r"""Samples of every posterior from its slice of ``base_samples`` (``sample_shape x
    batch_shape x N``), concatenated along the outputs."""
    shapes = _event_shapes(self)
    leading = base_samples.shape[:-1]
    slices = base_samples.split([shape.numel() for shape in shapes], dim=-1)
    samples = [
        posterior.rsample_from_base_samples(sample_shape, part.reshape(leading + shape))
        for posterior, part, shape in zip(self.posteriors, slices, shapes, strict=True)
    ]
    return self._reshape_and_cat(tensors=samples)


def install_posterior_list_base_samples() -> None:
    r"""Give BoTorch's ``PosteriorList`` ``base_sample_shape``, ``batch_range`` and
    ``rsample_from_base_samples`` (see the module docstring), each only if BoTorch does
    not define it for ``PosteriorList`` itself. Idempotent."""
    members = {
        "base_sample_shape": property(_base_sample_shape),
        "batch_range": property(_batch_range),
        "rsample_from_base_samples": _rsample_from_base_samples,
    }
    for name, member in members.items():
        if getattr(PosteriorList, name) is getattr(Posterior, name):
            setattr(PosteriorList, name, member)
