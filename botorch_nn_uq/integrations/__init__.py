"""Integrations with other libraries, registered when those libraries are imported.

Importing ``botorch_nn_uq`` calls :func:`register_integrations`, which registers the
package's models with Ax (:mod:`botorch_nn_uq.integrations.ax`) as soon as Ax's modular
BoTorch generator is imported, and with Ax's storage
(:mod:`botorch_nn_uq.integrations.ax_storage`) as soon as Ax's JSON registry is imported,
or at once where they already are. Each waits for its own Ax module: importing Ax's
storage while Ax's generator is still being imported would be circular. Ax stays an
optional dependency, and importing ``botorch_nn_uq`` does not import it (which takes
seconds).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["register_integrations"]

#: The Ax module whose import registers the package's models with Ax: it defines both
#: dispatchers that :mod:`botorch_nn_uq.integrations.ax` extends.
AX_TRIGGER_MODULE = "ax.generators.torch.botorch_modular.surrogate"
AX_INTEGRATION_MODULE = "botorch_nn_uq.integrations.ax"
#: The Ax module whose import registers the package's classes with Ax's storage: it
#: holds the JSON decoder's registry (and imports the registry of model classes).
AX_STORAGE_TRIGGER_MODULE = "ax.storage.json_store.registry"
AX_STORAGE_INTEGRATION_MODULE = "botorch_nn_uq.integrations.ax_storage"
#: ``(trigger, integration)``: import ``integration`` once ``trigger`` is imported.
INTEGRATIONS = (
    (AX_TRIGGER_MODULE, AX_INTEGRATION_MODULE),
    (AX_STORAGE_TRIGGER_MODULE, AX_STORAGE_INTEGRATION_MODULE),
)


def register_integrations() -> None:
    r"""Register the package with Ax if Ax is installed (see the module docstring): each
    integration now, if its Ax module is already imported, else right after it is."""
    if importlib.util.find_spec("ax") is None:
        return
    waiting = {finder.trigger for finder in sys.meta_path if isinstance(finder, _ImportTrigger)}
    for trigger, integration in INTEGRATIONS:
        if trigger in sys.modules:
            _import_integration(integration)
        elif trigger not in waiting:
            sys.meta_path.insert(0, _ImportTrigger(trigger, integration))


def _import_integration(name: str) -> None:
    # A failed registration (e.g. an Ax release that renamed a dispatcher) must not break
    # the user's own import of Ax: the models then just lack the integration.
    try:
        importlib.import_module(name)
    except Exception as error:
        warnings.warn(
            f"botorch_nn_uq could not register its models with Ax ({type(error).__name__}: "
            f"{error}); `ModelConfig(botorch_model_class=...)` with them will not work.",
            RuntimeWarning,
            stacklevel=2,
        )


class _ImportTrigger(importlib.abc.MetaPathFinder):
    r"""A one-shot import hook: once ``trigger`` has been executed, import
    ``integration``."""

    def __init__(self, trigger: str, integration: str) -> None:
        self.trigger = trigger
        self.integration = integration

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.trigger:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None and (spec := find_spec(fullname, path, target)) is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RunAfterExecution(spec.loader, self.integration)
        return spec


class _RunAfterExecution(importlib.abc.Loader):
    r"""Executes a module with its own loader, puts that loader back on the module (for
    tools that read sources through ``__loader__``) and imports ``integration``."""

    def __init__(self, loader: importlib.abc.Loader, integration: str) -> None:
        self.loader = loader
        self.integration = integration

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _import_integration(self.integration)
