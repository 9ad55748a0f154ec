"""Models whose posterior is a fixed bank of functions drawn after training (dropout
masks, epistemic indices): the bank can be redrawn at any size, or cut to its first
functions for cheap screening."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from typing_extensions import Self

from botorch_nn_uq.checks import check_integer, check_seed

#: The most memory a resampled bank of functions (masks, epistemic indices) may take.
MAX_FUNCTION_BANK_BYTES = 2**30


class ResizableFunctionBank(ABC):
    r"""Mixin of the models whose posterior is a fixed bank of functions drawn after
    training (dropout masks, epistemic indices), so the bank can be redrawn at any size
    or cut to its first functions.

    Batch Thompson sampling with ``q`` larger than the bank needs more functions than the
    fit drew; :meth:`resample_function_bank` draws a new bank and keeps the trained
    weights and the noise estimate. Acquisition optimisation can screen candidates with
    a model that serves only the bank's first functions
    (:meth:`function_bank_subset`, for
    :func:`botorch_nn_uq.generation.optimize_acqf_screened`), which costs that fraction
    of the full bank's evaluations.

    A subclass stores its bank in fitted buffers whose leading dimension indexes the
    functions and names them in :meth:`_function_bank_buffers`.
    """

    #: The smallest bank a model accepts.
    min_function_bank_size: ClassVar[int] = 1

    @abstractmethod
    def _set_function_bank(self, size: int, generator: torch.Generator) -> None:
        r"""Draw a bank of ``size`` functions from ``generator`` and store it."""

    @abstractmethod
    def _function_bank_buffers(self) -> tuple[str, ...]:
        r"""The names of the fitted buffers that hold the bank, each a
        ``function_bank_size x ...`` tensor whose ``i``-th row defines (with the other
        buffers' ``i``-th rows) the ``i``-th function of the posterior."""

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit() first.")

    @property
    def function_bank_size(self) -> int:
        r"""The number of functions in the posterior's bank (the ``s`` of the
        posterior's ``batch_shape x s x q x m`` function values)."""
        self._check_fitted()
        return getattr(self, self._function_bank_buffers()[0]).shape[0]

    def resample_function_bank(self, size: int, seed: int) -> Self:
        r"""Replace the posterior's bank of functions by ``size`` new draws.

        Args:
            size: The new number of functions, at least ``min_function_bank_size``.
            seed: Seed of the draws (the same seed gives the same bank).

        Returns:
            The model itself.
        """
        self._check_fitted()
        check_integer("size", size, minimum=self.min_function_bank_size)
        check_seed("seed", seed)
        bank = [getattr(self, name) for name in self._function_bank_buffers()]
        size_in_bytes = size * sum(tensor[0].numel() * tensor.element_size() for tensor in bank)
        if size_in_bytes > MAX_FUNCTION_BANK_BYTES:
            raise ValueError(
                f"A bank of {size} functions would take {size_in_bytes / 2**30:.1f} GiB; "
                f"at most {MAX_FUNCTION_BANK_BYTES / 2**30:.0f} GiB "
                f"({MAX_FUNCTION_BANK_BYTES * size // size_in_bytes} functions) are allowed."
            )
        self._set_function_bank(size, torch.Generator().manual_seed(seed))
        return self

    def function_bank_subset(self, size: int) -> Self:
        r"""A copy of the fitted model whose posterior serves only the FIRST ``size``
        functions of this model's bank.

        The copy has the same network weights, noise variance and transforms; its
        posterior's function values are those of this model's functions
        ``0, ..., size - 1`` (equal up to rounding: the network evaluates fewer functions
        per batch). Evaluating it costs ``size / function_bank_size`` of the full
        bank's forward passes, which makes it a cheap screening model for acquisition
        optimisation. This model is left unchanged, and the copy shares no state with
        it; its ``state_dict`` is a checkpoint like any other (with a bank of ``size``
        functions). A refit of the copy draws a bank of the hyperparameters' size again.

        Args:
            size: The number of functions to keep, an integer in
                ``[min_function_bank_size, function_bank_size]``.

        Returns:
            The copy, fitted.

        Example:
            >>> model = NEON(train_X, train_Y, num_epistemic_samples=128).fit(seed=0)
            >>> screening_model = model.function_bank_subset(16)
            >>> model.function_bank_size, screening_model.function_bank_size
            (128, 16)
            >>> screening_model.posterior(torch.rand(5, 1, 2)).values.shape  # b x s x q x m
            torch.Size([5, 16, 1, 1])
        """
        self._check_fitted()
        check_integer("size", size, minimum=self.min_function_bank_size)
        if size > self.function_bank_size:
            raise ValueError(
                f"size must be at most the bank's {self.function_bank_size} functions; got {size}."
            )
        subset = self._independent_copy()
        for name in self._function_bank_buffers():
            # A clone, not a view: a saved view would carry the whole bank's storage.
            subset._register_fitted_buffer(name, getattr(subset, name)[:size].clone())
        return subset
