"""Checkpoints of fitted neural surrogates: ``state_dict`` and ``load_state_dict``.

A fitted model's ``state_dict`` is the trained function: the network's weights, the
state its posterior needs (member weights, dropout masks, epistemic indices, noise
variance, calibration constant) and the fitted input and outcome transforms. It loads
into a freshly constructed model of the same class and configuration, on the same or on
other training data, which then serves the same predictions bit for bit. The training
data are not part of it (as for BoTorch's GPs, they belong to the model's construction).

Besides the weights, the ``state_dict`` holds a header under ``"_extra_state"`` (JSON
text in a tensor, see :func:`encode_header`): the model's class, its dimensions, the
hyperparameters that shape the fitted network (``checkpoint_hyperparameters``), the
architectures of ensemble members (a search chooses them, so no hyperparameter does),
and the names of the buffers the fit registered.

Loading is all or nothing, and safe for files from elsewhere:
:meth:`~botorch_nn_uq.models.base.NeuralSurrogateModel.load_state_dict` loads into a
private copy of the model and puts it in place only if everything succeeds. Before
anything is built, the header is checked for its layout (keys and types), against the
model (class, configuration) and against the shapes of the tensors it comes with (an
ensemble's member architectures), so that a crafted header cannot make loading allocate
more than the tensors it describes; only the buffers the model's class declares are
accepted; and every tensor must be real and finite. After loading, the model must predict
finite values of the right shapes.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from botorch_nn_uq.models.known_noise import transformed_noise_variance
from botorch_nn_uq.nn.batched_mlp import BatchedMLP, EnsembleNetwork

if TYPE_CHECKING:
    from botorch_nn_uq.models.base import NeuralSurrogateModel

#: Version of the header layout; a header of another version is refused.
CHECKPOINT_FORMAT = 1
#: The ``state_dict`` key (after the model's prefix) of the header.
HEADER_KEY = "_extra_state"


def encode_header(header: dict[str, Any]) -> Tensor:
    r"""The header as a 1-D ``uint8`` tensor of its JSON text.

    A tensor, not a dict: every value of the ``state_dict`` stays a tensor, so it can be
    saved with safetensors, compared tensor by tensor, passed where a ``Mapping[str,
    Tensor]`` is expected (Ax's surrogates), and read with ``torch.load(...,
    weights_only=True)``.
    """
    text = json.dumps(header, sort_keys=True).encode()
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).clone()


#: The keys of a fitted model's header and the JSON types of their values.
HEADER_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (int,),
    "model_class": (str,),
    "fitted": (bool,),
    "input_dim": (int,),
    "network_input_dim": (int,),
    "num_outputs": (int,),
    "output_selection": (list, type(None)),
    "input_transform": (str, type(None)),
    "outcome_transform": (str, type(None)),
    "hyperparameters": (dict,),
    "network": (list, type(None)),
    "fitted_buffers": (list,),
    "fit_seed": (int,),
}
#: The header key that marks a model with known observation noise (``train_Yvar``):
#: written only for such a model, so that the checkpoints of the others stay as they
#: were, and compared as ``False`` where it is absent.
KNOWN_NOISE_KEY = "known_noise"
#: The header's key for the batch shape of batched training data, present only for a
#: model trained on them (so that checkpoints of unbatched models keep their header).
BATCH_SHAPE_KEY = "batch_shape"
#: The keys of an ensemble member group's description and the JSON types of their values.
GROUP_FIELDS: dict[str, tuple[type, ...]] = {
    "input_dim": (int,),
    "output_dim": (int,),
    "hidden_widths": (list,),
    "member_seeds": (list,),
    "activation": (list,),
    "gaussian_head": (bool,),
    "dropout": (list,),
    "min_std": (int, float),
    "skip_connections": (list,),
}


class CheckpointError(RuntimeError):
    r"""A ``state_dict`` that cannot be loaded into a model, with the reason."""


def decode_header(state: Any) -> dict[str, Any]:
    r"""The header dict of a tensor written by :func:`encode_header`.

    Raises:
        CheckpointError: If ``state`` is not such a tensor, its text is not JSON, or the
            JSON is not an object.
    """
    if not isinstance(state, Tensor) or state.dtype != torch.uint8 or state.ndim != 1:
        raise CheckpointError(
            f"Cannot load the state_dict: its {HEADER_KEY!r} entry is not the header of a "
            "checkpoint of this package (a 1-D uint8 tensor)."
        )
    try:
        header = json.loads(bytes(state.tolist()).decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(
            f"Cannot load the state_dict: its header is not valid JSON ({error})."
        ) from error
    if not isinstance(header, dict):
        raise CheckpointError(
            f"Cannot load the state_dict: its header is a JSON {type(header).__name__}, "
            "not an object."
        )
    return header


def model_header(model: NeuralSurrogateModel) -> dict[str, Any]:
    r"""What a checkpoint of ``model`` needs besides its tensors (plain JSON data)."""
    header = {
        "format": CHECKPOINT_FORMAT,
        "model_class": _qualified_name(type(model)),
        "fitted": model.is_fitted,
    }
    if not model.is_fitted:
        return header
    # Ensembles are described member group by member group (a search may have chosen
    # them); other networks are rebuilt from the hyperparameters.
    network = model.network
    spec = _ensemble_spec(network) if isinstance(network, EnsembleNetwork) else None
    return {
        **header,
        **_configuration(model),
        "network": spec,
        "fitted_buffers": sorted(model._fitted_buffers),
        "fit_seed": model.fit_seed,
    }


def prepare_to_load(model: NeuralSurrogateModel, state_dict: dict[str, Any], prefix: str) -> None:
    r"""Check a checkpoint's header against ``model`` and give ``model`` the network
    skeleton and the fitted buffers that ``Module._load_from_state_dict`` then fills.

    Nothing is changed unless every check passes. A ``state_dict`` without a header (a
    partial one, loaded with ``strict=False``) is left to PyTorch.

    Args:
        model: The model being loaded.
        state_dict: The (full) ``state_dict`` being loaded.
        prefix: The model's prefix in ``state_dict`` (``""`` unless it is a submodule).

    Raises:
        RuntimeError: If the checkpoint is of another class, of an unfitted model, of
            another configuration, or lacks tensors the fitted model needs.
    """
    if prefix + HEADER_KEY not in state_dict:
        return
    header = decode_header(state_dict[prefix + HEADER_KEY])
    _check_layout(model, header)
    _check_header(model, header)
    _check_tensors(model, state_dict, prefix)
    unknown = [name for name in header["fitted_buffers"] if not model.is_fitted_buffer_name(name)]
    if unknown:
        raise _mismatch(
            model, f"the checkpoint names buffers that a fit of this model never has: {unknown}."
        )
    if header["network"] is not None:
        _check_ensemble(model, header["network"], state_dict, prefix + "network.")
    try:
        network = _network_skeleton(model, header).to(model.train_X)
    except (ValueError, TypeError) as error:
        raise _mismatch(model, f"its network cannot be built ({error}).") from error
    _check_network_state(model, network, state_dict, prefix + "network.")
    missing = [name for name in header["fitted_buffers"] if prefix + name not in state_dict]
    if missing:
        raise _mismatch(model, f"the state_dict lacks the fitted buffer(s) {missing}.")
    # Placeholders of the checkpoint's shapes: bank sizes may differ from the
    # hyperparameters (`resample_function_bank`), and searches choose the member count.
    buffers = {
        name: _placeholder(state_dict[prefix + name], model.train_X)
        for name in header["fitted_buffers"]
    }
    retransformed = _retransformed_targets(model, state_dict, prefix + "outcome_transform.")
    for name in model._fitted_buffers:
        delattr(model, name)
    model._fitted_buffers = set()
    for name, value in buffers.items():
        model._register_fitted_buffer(name, value)
    model.network = network
    if retransformed is not None:
        model.transformed_train_Y, model.transformed_train_Yvar = retransformed


def restore_fit_attributes(model: NeuralSurrogateModel, state: Tensor) -> None:
    r"""Set the attributes of a fit that are not tensors: the fit's seed; the records
    of how the fit went (``training_result``, search histories) are not part of a
    checkpoint, so those of an earlier fit of ``model`` are cleared."""
    header = decode_header(state)
    model.fit_seed = header["fit_seed"]
    model.training_result = None
    model.warm_started = False
    for name in model.fit_records:
        model.__dict__.pop(name, None)


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _mismatch(model: NeuralSurrogateModel, reason: str) -> CheckpointError:
    return CheckpointError(f"Cannot load the state_dict into this {type(model).__name__}: {reason}")


def _check_layout(model: NeuralSurrogateModel, header: dict[str, Any]) -> None:
    r"""Refuse a header without the keys of its format, or with values of other types."""
    fields = (
        HEADER_FIELDS
        if header.get("fitted") is True
        else {name: HEADER_FIELDS[name] for name in ("format", "model_class", "fitted")}
    )
    problems = [
        f"{name} is missing" if name not in header else f"{name} is a {type(header[name]).__name__}"
        for name, types in fields.items()
        if name not in header
        or not isinstance(header[name], types)
        or (isinstance(header[name], bool) and bool not in types)
    ]
    if not isinstance(header.get(KNOWN_NOISE_KEY, False), bool):
        problems.append(f"{KNOWN_NOISE_KEY} is a {type(header[KNOWN_NOISE_KEY]).__name__}")
    batch_shape = header.get(BATCH_SHAPE_KEY, [])
    if not isinstance(batch_shape, list) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in batch_shape
    ):
        problems.append(f"{BATCH_SHAPE_KEY} is not a list of integers")
    if not problems and fields is HEADER_FIELDS:
        buffers = header["fitted_buffers"]
        if not all(isinstance(name, str) for name in buffers):
            problems.append("fitted_buffers holds names that are not strings")
        if header["fit_seed"] < 0:
            problems.append("fit_seed is negative")
    if problems:
        raise _mismatch(model, "its header is malformed: " + "; ".join(problems) + ".")


def _check_tensors(model: NeuralSurrogateModel, state_dict: dict[str, Any], prefix: str) -> None:
    r"""Refuse complex, non-finite or non-tensor entries (the header aside); an infinite
    entry equal to the model's own (a constant such as the open upper bound of a learnable
    ``Warp``'s GPyTorch constraints) is no learned state and passes."""
    problems = []
    own = {prefix + name: tensor for name, tensor in model.named_buffers()}
    for name, value in state_dict.items():
        if not name.startswith(prefix) or name == prefix + HEADER_KEY:
            continue
        if not isinstance(value, Tensor):
            problems.append(f"{name} is a {type(value).__name__}, not a tensor")
        elif value.is_complex():
            problems.append(f"{name} is complex")
        elif value.is_floating_point() and not value.isfinite().all():
            constant = own.get(name)
            if not (
                constant is not None
                and constant.shape == value.shape
                and torch.equal(constant.to(value), value)
            ):
                problems.append(f"{name} holds NaN or infinite values")
    if problems:
        raise _mismatch(model, "; ".join(problems) + ".")


def _check_ensemble(
    model: NeuralSurrogateModel, groups: list[Any], state_dict: dict[str, Any], prefix: str
) -> None:
    r"""Check the header's member groups for their layout and against the shapes of the
    checkpoint's network tensors, before any network is built: a group is built with
    exactly the parameters the checkpoint holds."""
    problems = []
    if not groups:
        problems.append("the header describes an ensemble without member groups")
    for index, group in enumerate(groups):
        where = f"member group {index}"
        if not isinstance(group, dict):
            problems.append(f"{where} is a {type(group).__name__}")
            continue
        wrong = [
            name
            for name, types in GROUP_FIELDS.items()
            if not isinstance(group.get(name), types)
            or isinstance(group.get(name), bool)
            and bool not in types
        ]
        if wrong:
            problems.append(f"{where} lacks or mistypes {wrong}")
            continue
        integers = [*group["hidden_widths"], *group["member_seeds"]]
        if not all(isinstance(value, int) and not isinstance(value, bool) for value in integers):
            problems.append(f"{where} has widths or seeds that are not integers")
            continue
        expected = _group_parameter_shapes(group)
        if expected is None:
            problems.append(f"{where} has an invalid architecture")
            continue
        for name, shape in expected.items():
            saved = state_dict.get(f"{prefix}groups.{index}.{name}")
            if not isinstance(saved, Tensor) or tuple(saved.shape) != shape:
                found = "missing" if saved is None else f"of shape {tuple(saved.shape)}"
                problems.append(
                    f"{prefix}groups.{index}.{name} is {found}, the header says {shape}"
                )
        if group["input_dim"] != _network_inputs(model).shape[-1]:
            problems.append(f"{where} takes {group['input_dim']} inputs")
        if group["output_dim"] != model._num_outputs:
            problems.append(f"{where} has {group['output_dim']} outputs")
    if problems:
        raise _mismatch(
            model, "its ensemble does not match its tensors: " + "; ".join(problems) + "."
        )


def _group_parameter_shapes(group: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    r"""The parameter shapes of the member group ``group`` describes (``BatchedMLP``'s
    layout), or ``None`` if the description is not a valid architecture."""
    hidden, members = group["hidden_widths"], len(group["member_seeds"])
    skips = group["skip_connections"]
    if members < 1 or any(width < 1 for width in hidden) or group["output_dim"] < 1:
        return None
    if group["input_dim"] < 1 or len(skips) != len(hidden):
        return None
    head = group["output_dim"] * (2 if group["gaussian_head"] else 1)
    widths = [group["input_dim"], *hidden, head]
    shapes = {}
    for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        shapes[f"weights.{layer}"] = (members, fan_in, fan_out)
        shapes[f"biases.{layer}"] = (members, 1, fan_out)
    position = 0
    for layer, sources in enumerate(skips):
        if not isinstance(sources, list):
            return None
        for source in sources:
            if not isinstance(source, int) or not -1 <= source < layer:
                return None
            shapes[f"projections.{position}"] = (members, widths[source + 1], widths[layer + 1])
            position += 1
    return shapes


def check_loaded_predictions(model: NeuralSurrogateModel) -> None:
    r"""Refuse a loaded model that does not predict finite values of the right shapes at
    its first training input (with and without observation noise): the sign of fitted
    buffers of the wrong sizes."""
    # `1 x batch_shape x 1 x d`: one point per batch element of a batched model.
    X = model.train_X[..., :1, :].unsqueeze(0)
    outputs = (model.num_outputs,) if model.output_shape is None else tuple(model.output_shape)
    expected = (1, *model.batch_shape, 1, *outputs)
    try:
        with torch.no_grad():
            for observation_noise in (False, True):
                posterior = model.posterior(X, observation_noise=observation_noise)
                moments = (posterior.mean, posterior.variance)
                if any(tuple(m.shape) != expected or not m.isfinite().all() for m in moments):
                    raise ValueError("non-finite values or values of the wrong shape")
    except (RuntimeError, ValueError, IndexError) as error:
        raise _mismatch(
            model, f"the loaded model does not predict ({error}); its tensors do not fit together."
        ) from error


def _configuration(model: NeuralSurrogateModel) -> dict[str, Any]:
    r"""What a checkpoint and the model it loads into must agree on, as JSON data (so a
    tuple compares equal to the list the header gives back)."""
    hp = model.hyperparameters
    configuration = {
        "input_dim": model.train_X.shape[-1],
        "network_input_dim": _network_inputs(model).shape[-1],
        # The network's outputs, and those a `subset_output` copy serves.
        "num_outputs": model._num_outputs,
        "output_selection": getattr(model, "_output_selection", None),
        "input_transform": _type_name(getattr(model, "input_transform", None)),
        "outcome_transform": _type_name(getattr(model, "outcome_transform", None)),
        "hyperparameters": {name: getattr(hp, name) for name in model.checkpoint_hyperparameters},
    }
    if model.has_known_noise:
        configuration[KNOWN_NOISE_KEY] = True
    if model.batch_shape:
        configuration[BATCH_SHAPE_KEY] = list(model.batch_shape)
    return json.loads(json.dumps(configuration))


def _check_header(model: NeuralSurrogateModel, header: dict[str, Any]) -> None:
    if header.get("format") != CHECKPOINT_FORMAT:
        raise _mismatch(
            model,
            f"the checkpoint has format {header.get('format')!r}; this version reads "
            f"format {CHECKPOINT_FORMAT}.",
        )
    if header["model_class"] != _qualified_name(type(model)):
        raise _mismatch(
            model,
            f"the checkpoint is of a {header['model_class']}, this model is a "
            f"{_qualified_name(type(model))}.",
        )
    if not header["fitted"]:
        raise _mismatch(
            model,
            "the checkpoint is of an unfitted model, which holds no trained network; save "
            "the state_dict after fit().",
        )
    expected = _configuration(model)
    differences = [
        f"{name} ({header.get(name)!r} in the checkpoint, {expected[name]!r} in this model)"
        for name in expected
        if name not in ("hyperparameters", KNOWN_NOISE_KEY, BATCH_SHAPE_KEY)
        and header.get(name) != expected[name]
    ]
    saved_batch, expected_batch = (
        configuration.get(BATCH_SHAPE_KEY, []) for configuration in (header, expected)
    )
    if saved_batch != expected_batch:
        differences.append(
            f"the batch shape of the training data ({tuple(saved_batch)} in the checkpoint, "
            f"{tuple(expected_batch)} in this model: a checkpoint of a model trained on "
            "batched data loads into a model on training data of the same batch shape)"
        )
    saved_known, expected_known = (
        configuration.get(KNOWN_NOISE_KEY, False) for configuration in (header, expected)
    )
    if saved_known != expected_known:
        differences.append(
            f"known observation noise, train_Yvar ({'given' if saved_known else 'none'} to "
            f"the checkpoint's model, {'given' if expected_known else 'none'} to this model)"
        )
    saved = header.get("hyperparameters", {})
    differences += [
        f"hyperparameter {name} ({saved.get(name)!r} in the checkpoint, {value!r} in this model)"
        for name, value in expected["hyperparameters"].items()
        if saved.get(name) != value
    ]
    if differences:
        raise _mismatch(
            model,
            "the checkpoint's model has another configuration: " + "; ".join(differences) + ".",
        )


def _network_skeleton(model: NeuralSurrogateModel, header: dict[str, Any]) -> nn.Module:
    r"""A network of the checkpoint's architecture, with weights to be overwritten."""
    if header["network"] is not None:
        return EnsembleNetwork([BatchedMLP(**group) for group in header["network"]])
    # The initial weights are overwritten; a generator of its own keeps the global one
    # untouched.
    return model._build_network(
        header["network_input_dim"], model._num_outputs, torch.Generator().manual_seed(0)
    )


def _ensemble_spec(network: EnsembleNetwork) -> list[dict[str, Any]]:
    r"""The arguments of :class:`BatchedMLP` that rebuild each member group."""
    return [
        {
            "input_dim": group.weights[0].shape[1],
            "output_dim": group.output_dim,
            "hidden_widths": group.hidden_widths,
            "member_seeds": group.member_seeds,
            "activation": list(group.activation_names),
            "gaussian_head": group.gaussian_head,
            "dropout": group.dropout_rates.tolist(),
            "min_std": group.min_std,
            "skip_connections": [list(sources) for sources in group.skip_connections],
        }
        for group in network.groups
    ]


def _check_network_state(
    model: NeuralSurrogateModel, network: nn.Module, state_dict: dict[str, Any], prefix: str
) -> None:
    r"""Refuse a checkpoint whose network tensors are missing or of other shapes: the
    model would otherwise serve a partly untrained network as fitted."""
    problems = []
    for name, value in network.state_dict().items():
        saved = state_dict.get(prefix + name)
        if saved is None:
            problems.append(f"{prefix}{name} is missing")
        elif saved.shape != value.shape:
            problems.append(
                f"{prefix}{name} has shape {tuple(saved.shape)} in the checkpoint and "
                f"{tuple(value.shape)} in this model"
            )
    if problems:
        raise _mismatch(model, "its network differs: " + "; ".join(problems) + ".")


def _placeholder(value: Tensor, reference: Tensor) -> Tensor:
    dtype = reference.dtype if value.is_floating_point() else value.dtype
    return torch.empty(value.shape, dtype=dtype, device=reference.device)


def _network_inputs(model: NeuralSurrogateModel) -> Tensor:
    r"""The ``n x d'`` training inputs as the fitted network sees them: the input
    transform applied in ``eval`` mode, which leaves a learned transform as it is."""
    transform = getattr(model, "input_transform", None)
    if transform is None:
        return model.train_X
    was_training = transform.training
    transform.eval()
    try:
        with torch.no_grad():
            return transform(model.train_X)
    finally:
        transform.train(was_training)


def _retransformed_targets(
    model: NeuralSurrogateModel, state_dict: dict[str, Any], prefix: str
) -> tuple[Tensor, Tensor | None] | None:
    r"""The model's training targets and known noise variances (``None`` without known
    noise) under the checkpoint's outcome transform; ``None`` without an outcome
    transform.

    The checkpoint's transform replaces the one fitted to the model's own targets, and
    a later fit must train on targets (and known noise) in the units the posterior maps
    back from. A ``subset_output`` copy's transform covers its served outputs only; the
    others stay in the units of the model's construction.
    """
    transform = getattr(model, "outcome_transform", None)
    if transform is None:
        return None
    loaded = copy.deepcopy(transform)
    loaded.load_state_dict(
        {
            name[len(prefix) :]: value
            for name, value in state_dict.items()
            if name.startswith(prefix)
        }
    )
    loaded.eval()
    selection = getattr(model, "_output_selection", None)
    served = slice(None) if selection is None else selection
    X = _network_inputs(model)
    targets = model.transformed_train_Y.clone()
    noise = None if model.train_Yvar is None else model.transformed_train_Yvar.clone()
    with torch.no_grad():
        train_Y, _ = transform.untransform(targets[..., served], X=X)
        if noise is None:
            targets[..., served] = loaded(train_Y, X=X)[0]
        else:
            targets[..., served], served_noise = loaded(
                train_Y, Yvar=model.train_Yvar[..., served], X=X
            )
            noise[..., served] = transformed_noise_variance(served_noise, loaded)
    return targets, noise


def _type_name(transform: nn.Module | None) -> str | None:
    return None if transform is None else type(transform).__name__
