"""The package's classes in Ax's storage, so that Ax experiments using them save and load.

Importing this module (importing ``botorch_nn_uq`` imports it as soon as Ax's JSON
registry is imported) registers every model class of the package with Ax's registry of
model classes, under its class name, and the classes that ``model_options`` may hold (the
searches' ``ArchitectureSpace`` and ``HyperparameterSpace``, which Ax encodes as
dataclasses) with Ax's JSON decoder. ``Client.save_to_json_file`` and
``Client.load_from_json_file`` then save and restore an experiment whose generation
strategy uses the models; Ax gives tuple-valued ``model_options`` back as lists, which the
models accept.

Example:
    >>> import botorch_nn_uq
    >>> from ax.api.client import Client
    >>> client.save_to_json_file("experiment.json")
    >>> client = Client.load_from_json_file("experiment.json")
"""

from __future__ import annotations

import inspect

from ax.storage.botorch_modular_registry import register_model
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY

from botorch_nn_uq.ensembles import ArchitectureSpace, HyperparameterSpace
from botorch_nn_uq.models.base import NeuralSurrogateModel

#: The package's classes that ``model_options`` may hold, which Ax's JSON storage encodes
#: as dataclasses and must know by name to decode.
OPTION_CLASSES = (ArchitectureSpace, HyperparameterSpace)


def neural_model_classes() -> list[type[NeuralSurrogateModel]]:
    r"""Every concrete model class of the package (subclasses included), by name."""
    found, pending = [], list(NeuralSurrogateModel.__subclasses__())
    while pending:
        model_class = pending.pop()
        pending.extend(model_class.__subclasses__())
        if not inspect.isabstract(model_class) and model_class not in found:
            found.append(model_class)
    return sorted(found, key=lambda model_class: model_class.__name__)


def register_with_ax_storage() -> None:
    r"""Register every model class of the package with Ax's storage registry and the
    classes of :data:`OPTION_CLASSES` with Ax's JSON decoder. Called when this module is
    imported; idempotent (call it again for model classes defined later)."""
    # The model modules define the classes: import them before looking for subclasses.
    import botorch_nn_uq.models  # noqa: F401

    for model_class in neural_model_classes():
        register_model(model_class)
    for option_class in OPTION_CLASSES:
        CORE_DECODER_REGISTRY[option_class.__name__] = option_class


register_with_ax_storage()
