r"""How a saved run names its components, and how loading rebuilds the run.

A run's state file (:meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.save`) holds
its configuration: the strategy's spelling, or each component by name (a registered
surrogate, an acquisition, a built-in objective, proposer or fit policy) and
``"<custom>"`` for a component given as code. :func:`saved_components` rebuilds them
when the run is loaded, taking components given as code from the caller and checking
that a passed component equals the saved one; :func:`load_optimizer` rebuilds the
whole run (what :meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.load` returns).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from botorch_nn_uq.bo.fitting import FitPolicy, fit_policy_from_config
from botorch_nn_uq.bo.objectives import Objective, objective_from_config
from botorch_nn_uq.bo.proposer_configs import proposer_from_config
from botorch_nn_uq.bo.proposers import Proposer
from botorch_nn_uq.bo.state import RunState, StateFileError
from botorch_nn_uq.bo.strategy import Strategy
from botorch_nn_uq.bo.surrogates import SurrogateSpec, get_surrogate
from botorch_nn_uq.checks import check_device

if TYPE_CHECKING:
    from botorch_nn_uq.bo.optimizer import BayesianOptimizer


def describe_component(component: Any) -> Any:
    r"""What the configuration says of ``component``: a surrogate's name (registered,
    or with hyperparameter overrides), else ``"<custom>"``, or ``to_config()``."""
    if isinstance(component, SurrogateSpec):
        try:
            registered = get_surrogate(component.name) is component
        except ValueError:
            registered = False
        return component.name if registered else "<custom>"
    return component.to_config()


def restored_field(path: str | Path, field: str, restore: Callable[[], Any]) -> Any:
    r"""What ``restore`` rebuilds from the state file's ``field``, or a
    :class:`~botorch_nn_uq.bo.state.StateFileError` that names the file and the field."""
    try:
        return restore()
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError) as e:
        raise StateFileError(
            f"{str(path)!r} holds an unusable {field}: {type(e).__name__}: {e}"
        ) from None


def saved_components(
    path: str | Path,
    config: dict[str, Any],
    *,
    surrogate: str | SurrogateSpec | None,
    proposer: Proposer | None,
    objective: Objective | None,
    fit_policy: FitPolicy | None,
) -> tuple[Objective, dict[str, Any]]:
    r"""The components of the run saved at ``path`` with configuration ``config``.

    Args:
        path: The state file (for the messages).
        config: Its configuration.
        surrogate: The surrogate, if it was given as code (or to check it).
        proposer: The proposer, if it was given as code (or to check it).
        objective: The objective, if it was given as code (or to check it).
        fit_policy: The fit policy, if it was given as code (or to check it).

    Returns:
        The objective, and the keyword arguments that build the rest: the strategy
        (when the file has one and no component was passed) or the surrogate, proposer
        and fit policy.

    Raises:
        ValueError: If a component given as code is missing or a passed one differs
            from the saved one.
        StateFileError: If the file's configuration cannot be rebuilt.
    """

    def component(name: str, given: Any, build: Callable[[Any], Any]) -> Any:
        saved = config[name]
        if given is None:
            if saved is None or saved == "<custom>":
                raise ValueError(
                    f"{str(path)!r} was saved with a {name.replace('_', ' ')} given as "
                    f"code; pass {name}=... to load it."
                )
            return restored_field(path, f"config.{name}", lambda: build(saved))
        described = given if isinstance(given, str) else describe_component(given)
        if saved not in (None, "<custom>") and described != saved:
            raise ValueError(
                f"{str(path)!r} was saved with {name.replace('_', ' ')} {saved!r}; got "
                f"{described!r}."
            )
        return given

    chosen_proposer = component("proposer", proposer, proposer_from_config)
    chosen_surrogate = (
        None
        if config["surrogate"] is None and surrogate is None
        else component("surrogate", surrogate, get_surrogate)
    )
    chosen_objective = component("objective", objective, objective_from_config)
    chosen_fit_policy = component("fit_policy", fit_policy, fit_policy_from_config)
    strategy = config.get("strategy")
    given = (surrogate, proposer, fit_policy) != (None, None, None)
    components = (
        {"strategy": restored_field(path, "config.strategy", lambda: Strategy.parse(strategy))}
        if strategy is not None and not given
        else {
            "surrogate": chosen_surrogate,
            "proposer": chosen_proposer,
            "fit_policy": chosen_fit_policy,
        }
    )
    return chosen_objective, components


def load_optimizer(
    cls: type[BayesianOptimizer],
    path: str | Path,
    *,
    device: str | torch.device | None,
    surrogate: str | SurrogateSpec | None,
    proposer: Proposer | None,
    objective: Objective | None,
    fit_policy: FitPolicy | None,
) -> BayesianOptimizer:
    r"""The run saved at ``path`` as a ``cls``, ready to continue: its state, its
    components (:func:`saved_components`) checked against the file, and the last model
    where the fit policy keeps one. The arguments and errors are those of
    :meth:`~botorch_nn_uq.bo.optimizer.BayesianOptimizer.load`."""
    state, digest = RunState.read(path)
    if device is not None:
        state.to(check_device("device", device))
    config = state.config
    expected = {"bounds", "objective", "surrogate", "proposer", "fit_policy"}
    if not expected | {"n_initial", "design"} <= set(config):
        raise StateFileError(f"{str(path)!r} holds no optimizer configuration (field config).")

    def restored(field: str, restore: Callable[[], Any]) -> Any:
        return restored_field(path, field, restore)

    chosen_objective, components = saved_components(
        path,
        config,
        surrogate=surrogate,
        proposer=proposer,
        objective=objective,
        fit_policy=fit_policy,
    )
    optimizer = restored(
        "config",
        lambda: cls(
            torch.tensor(config["bounds"], dtype=state.bounds.dtype, device=state.bounds.device),
            objective=chosen_objective,
            seed=state.seed,
            n_initial=config["n_initial"],
            design=config["design"],
            **components,
        ),
    )
    # Components given as code describe no strategy; the file's must match the rest.
    rebuilt = optimizer._config()
    if {**rebuilt, "strategy": None} != {**config, "strategy": None}:
        raise StateFileError(
            f"{str(path)!r} holds a strategy that does not match its components "
            "(field config.strategy)."
        )
    if not torch.equal(optimizer.bounds, state.bounds):
        raise StateFileError(f"{str(path)!r} holds inconsistent bounds (field config.bounds).")
    if state.X.shape[0]:
        values = restored("Y", lambda: optimizer.objective.values(state.Y))
        tolerance = 64 * torch.finfo(state.values.dtype).eps
        if not torch.allclose(values, state.values, rtol=tolerance, atol=0.0):
            raise StateFileError(
                f"{str(path)!r} holds objective values inconsistent with its outputs "
                "(fields values and Y)."
            )
    state.config = optimizer.state.config
    optimizer.state = state
    restored("random_state", lambda: optimizer._random.set_state(state.random_state))
    restored("fit_state", lambda: optimizer.fit_policy.load_state_dict(state.fit_state))
    restored("proposer_state", lambda: optimizer.proposer.load_state_dict(state.proposer_state))
    rows = optimizer.proposer.fit_rows(state.model_num_points)
    # A model fitted on rows that a restart has set aside is not continued.
    if state.model_state is not None and rows.start < rows.stop:
        optimizer.model = restored(
            "model_state",
            lambda: optimizer.surrogate.restore(
                state.X[rows],
                optimizer.objective.model_targets(state.Y[rows]),
                state.bounds,
                state.model_state,
            ),
        )
    optimizer._file = (Path(path), digest)
    return optimizer
