"""botorch-nn-uq: neural-network surrogates with uncertainty for BoTorch.

The top level is small, as BoTorch's is: the subpackages and modules users import from
(the models in :mod:`botorch_nn_uq.models`, their posteriors in
:mod:`botorch_nn_uq.posteriors`, the acquisition functions in
:mod:`botorch_nn_uq.acquisition`, the BO loop in :mod:`botorch_nn_uq.bo`, ...) and the
two entry points :func:`fit_model` and :func:`run_bo`. Each part lists its public names
in its ``__all__``.

Importing the package registers its posterior samplers with BoTorch, so every MC
acquisition function works with its models, and registers the models with Ax's modular
BoTorch generator once that is imported (see :mod:`botorch_nn_uq.integrations`). The
parts it does not need for that are imported on first use (``botorch_nn_uq.bo``, or
``import botorch_nn_uq.bo``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from botorch_nn_uq import integrations, models, posteriors
from botorch_nn_uq.fit import fit_model

if TYPE_CHECKING:
    from botorch_nn_uq import (
        acquisition,
        bo,
        calibration,
        ensembles,
        generation,
        metrics,
        nn,
        problems,
        training,
    )
    from botorch_nn_uq.bo import run_bo

integrations.register_integrations()

# The one place of the version: pyproject.toml reads it (a literal, read without importing).
__version__ = "0.1.0"

#: What the top level imports on first access: ``name -> (module, attribute)``, the
#: attribute ``None`` for a module itself.
_LAZY_IMPORTS: dict[str, tuple[str, str | None]] = {
    "acquisition": ("botorch_nn_uq.acquisition", None),
    "bo": ("botorch_nn_uq.bo", None),
    "calibration": ("botorch_nn_uq.calibration", None),
    "ensembles": ("botorch_nn_uq.ensembles", None),
    "generation": ("botorch_nn_uq.generation", None),
    "metrics": ("botorch_nn_uq.metrics", None),
    "nn": ("botorch_nn_uq.nn", None),
    "problems": ("botorch_nn_uq.problems", None),
    "training": ("botorch_nn_uq.training", None),
    "run_bo": ("botorch_nn_uq.bo", "run_bo"),
}

__all__ = [
    "acquisition",
    "bo",
    "calibration",
    "ensembles",
    "fit_model",
    "generation",
    "integrations",
    "metrics",
    "models",
    "nn",
    "posteriors",
    "problems",
    "run_bo",
    "training",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY_IMPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY_IMPORTS[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
