"""BoTorch's own tutorials with the GP swapped for a neural model: does the user's code run
unchanged?

The drop-in test of the package is whether a BoTorch user can replace ``SingleTaskGP``
in existing code and change nothing else. This runner takes fifteen of BoTorch's
tutorials (:data:`TUTORIALS`, those that fit a ``SingleTaskGP`` on their own data and
drive an acquisition with it), runs each notebook's code top to bottom in a fresh
process with BoTorch's ``SMOKE_TEST=1`` budgets, and, for a neural model, makes the
minimal change a user would make before the tutorial's code imports anything
(:func:`install_swap`):

- ``SingleTaskGP(...)`` and ``HigherOrderGP(...)`` build the model instead, with every
  argument of the tutorial (training data, ``train_Yvar``, input and outcome
  transforms) except those that configure a GP's own modules (:data:`GP_MODULE_ARGUMENTS`:
  ``covar_module``, ``likelihood``, a higher-order GP's ``latent_init``, ...), which a
  network has no use for;
- ``ModelListGP(...)`` is BoTorch's ``ModelList``;
- the marginal-likelihood lines ``mll = ExactMarginalLogLikelihood(model.likelihood,
  model)`` (or ``SumMarginalLogLikelihood``) and ``fit_gpytorch_mll(mll)`` become
  ``model.fit(seed=0)`` (of each model of a list; the swapped model and list answer
  ``model.likelihood`` with ``None``, so that the replaced line's argument resolves).

Nothing else is changed: a tutorial that reads a GP's kernel (``TuRBO``'s
lengthscales) fails, as it would for the user. After a tutorial's code, checks of its
results run on its variables (:data:`SANITY_CHECKS`: results finite, GIBBON's batches of
3 distinct points, cross-validated predictions better than the mean). A tutorial
``ran`` when its process, checks included, exits 0 within ``--timeout`` seconds; the
table gives each run's time and, for a failure, the last line of its error. The GP runs
the same code untouched, as the control.

The tutorials are read from a BoTorch checkout (``--botorch-dir``, the folder that holds
``tutorials/``; the runner does not download anything). Lines that are shell or IPython
commands (``!pip install``, ``%matplotlib inline``) become ``pass`` and figures go to
matplotlib's ``Agg`` backend.

``--out`` receives ``tutorial_swap.md`` (the tables), ``tutorial_swap.csv`` (one row per
tutorial and model) and the ``logs/`` of every run.

Examples:
    python -m benchmarks.tutorial_swap --botorch-dir ../botorch
    python -m benchmarks.tutorial_swap --botorch-dir ../botorch --models deep-ensemble \\
        --tutorials closed_loop_botorch_only GIBBON_for_efficient_batch_entropy_search
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import PrintedTable, runner_parser, summary_header, write_text
from botorch_nn_uq.bo import write_rows_csv

REPO_ROOT = Path(__file__).resolve().parents[1]

#: The tutorials (folder names in BoTorch's ``tutorials/``) whose GP is swapped.
TUTORIALS: tuple[str, ...] = (
    "closed_loop_botorch_only",
    "turbo_1",
    "multi_objective_bo",
    "constrained_multi_objective_bo",
    "scalable_constrained_bo",
    "batch_mode_cross_validation",
    "compare_mc_analytic_acquisition",
    "one_shot_kg",
    "max_value_entropy",
    "GIBBON_for_efficient_batch_entropy_search",
    "cost_aware_bayesian_optimization",
    "risk_averse_bo_with_environmental_variables",
    "bo_with_warped_gp",
    "custom_acquisition",
    "composite_bo_with_hogp",
)

#: The models a run can swap in, by name, as ``module:class``; ``gp`` is the control.
MODELS: dict[str, str | None] = {
    "gp": None,
    "deep-ensemble": "botorch_nn_uq.models:DeepEnsemble",
    "mc-dropout": "botorch_nn_uq.models:MCDropout",
    "nomu": "botorch_nn_uq.models:NOMU",
    "neon": "botorch_nn_uq.models:NEON",
}

#: Constructor arguments that configure a GP's own modules (its kernel, mean and
#: likelihood; a higher-order GP's latent dimensions): dropped by the swap.
GP_MODULE_ARGUMENTS = frozenset(
    {
        "covar_module",
        "covar_modules",
        "mean_module",
        "likelihood",
        "num_latent_dims",
        "learn_latent_pars",
        "latent_init",
    }
)

#: Checks run after a tutorial's code, on its variables, that its results are sane:
#: finite, and what the tutorial's method promises (GIBBON's batches of 3 distinct points,
#: cross-validated predictions better than the mean).
SANITY_CHECKS: dict[str, str] = {
    "closed_loop_botorch_only": (
        "import math\n"
        "assert all(math.isfinite(v) for run in best_observed_all_nei for v in run), "
        "'non-finite best values'\n"
    ),
    "batch_mode_cross_validation": (
        "assert torch.isfinite(cv_error), 'non-finite cross-validation error'\n"
        "assert cv_error < cv_folds.test_Y.var(), "
        "f'cross-validation error {float(cv_error):.3g} is no better than the mean'\n"
    ),
    "GIBBON_for_efficient_batch_entropy_search": (
        "for name, points in candidates.items():\n"
        "    assert points.unique(dim=0).shape[0] == 3, f'{name} repeats a point: {points}'\n"
    ),
    "multi_objective_bo": (
        "import math\n"
        "assert all(math.isfinite(v) for v in hvs_qnehvi + hvs_qehvi + hvs_qparego), "
        "'non-finite hypervolumes'\n"
    ),
}

#: Where the tutorials import the names that the swap replaces, and those names.
REPLACED_NAMES: dict[str, tuple[str, ...]] = {
    "botorch": ("fit_gpytorch_mll",),
    "botorch.fit": ("fit_gpytorch_mll",),
    "botorch.cross_validation": ("fit_gpytorch_mll",),
    "botorch.optim": ("fit_gpytorch_mll_torch", "fit_gpytorch_mll_scipy"),
    "botorch.optim.fit": ("fit_gpytorch_mll_torch", "fit_gpytorch_mll_scipy"),
    "botorch.models": ("SingleTaskGP", "HigherOrderGP", "ModelListGP"),
    "botorch.models.gp_regression": ("SingleTaskGP",),
    "botorch.models.higher_order_gp": ("HigherOrderGP",),
    "botorch.models.model_list_gp_regression": ("ModelListGP",),
    "gpytorch": ("ExactMarginalLogLikelihood",),
    "gpytorch.mlls": ("ExactMarginalLogLikelihood", "SumMarginalLogLikelihood"),
    "gpytorch.mlls.exact_marginal_log_likelihood": ("ExactMarginalLogLikelihood",),
    "gpytorch.mlls.sum_marginal_log_likelihood": (
        "ExactMarginalLogLikelihood",
        "SumMarginalLogLikelihood",
    ),
}

#: Prefixes of notebook lines that are shell or IPython commands, not Python.
NON_PYTHON_PREFIXES = ("!", "%", "get_ipython(")


@dataclass
class SwapRun:
    r"""One tutorial run with one model.

    Attributes:
        tutorial: The tutorial's folder name.
        model: The model's name (a key of :data:`MODELS`).
        ran: Whether the process exited 0 in time.
        seconds: Its wall-clock seconds.
        error: The last line of its standard error when it failed (``"timeout"`` when it
            ran out of time); empty when it ran.
    """

    tutorial: str
    model: str
    ran: bool
    seconds: float
    error: str


def tutorial_code(notebook: Path) -> str:
    r"""The Python code of a notebook's code cells, in order, with its shell and IPython
    command lines replaced by ``pass``.

    Args:
        notebook: The ``.ipynb`` file.

    Returns:
        The code, cells separated by blank lines.
    """
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = cell["source"]
        text = "".join(source) if isinstance(source, list) else source
        for line in text.splitlines():
            command = line.lstrip()
            if command.startswith(NON_PYTHON_PREFIXES):
                # ``pass`` keeps a block whose only statement was a command valid.
                line = line[: len(line) - len(command)] + "pass"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def tutorial_notebook(botorch_dir: Path, tutorial: str) -> Path:
    r"""The notebook of ``tutorial`` in the BoTorch checkout ``botorch_dir``.

    Raises:
        FileNotFoundError: If the folder holds no notebook.
    """
    folder = botorch_dir / "tutorials" / tutorial
    notebooks = sorted(folder.glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(
            f"No notebook in {folder}: --botorch-dir must be a BoTorch checkout with "
            "its tutorials/ folder."
        )
    return notebooks[0]


def _import_class(path: str) -> type:
    module_name, class_name = path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def install_swap(model: str, seed: int = 0) -> None:
    r"""Make the minimal change of the module docstring in this process: BoTorch's and
    GPyTorch's names that a tutorial imports afterwards are replaced by the swap.

    Must run before the tutorial's imports (names already imported keep the GP).

    Args:
        model: A key of :data:`MODELS` other than ``"gp"``.
        seed: The seed of every fit.
    """
    from botorch.models import ModelList

    model_class = _import_class(MODELS[model])

    class SwappedModel(model_class):
        likelihood = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            arguments = {
                name: value for name, value in kwargs.items() if name not in GP_MODULE_ARGUMENTS
            }
            super().__init__(*args, **arguments)

    SwappedModel.__name__ = SwappedModel.__qualname__ = f"Swapped{model_class.__name__}"

    class SwappedModelList(ModelList):
        likelihood = None

    class DeletedMarginalLogLikelihood:
        def __init__(self, likelihood: Any, model: Any) -> None:
            self.model = model

        def to(self, *args: Any, **kwargs: Any) -> DeletedMarginalLogLikelihood:
            return self

    def deleted_fit(mll: DeletedMarginalLogLikelihood, *args: Any, **kwargs: Any) -> Any:
        # The user's swap fits each model where it is built; here the fit waits for the
        # marginal-likelihood lines that always follow, so that classes stay classes
        # (``batch_cross_validation`` checks ``issubclass`` of the model class).
        for fitted in getattr(mll.model, "models", [mll.model]):
            if isinstance(fitted, model_class):
                fitted.fit(seed=seed)
        return mll

    replacements = {
        "SingleTaskGP": SwappedModel,
        "HigherOrderGP": SwappedModel,
        "ModelListGP": SwappedModelList,
        "ExactMarginalLogLikelihood": DeletedMarginalLogLikelihood,
        "SumMarginalLogLikelihood": DeletedMarginalLogLikelihood,
        "fit_gpytorch_mll": deleted_fit,
        "fit_gpytorch_mll_torch": deleted_fit,
        "fit_gpytorch_mll_scipy": deleted_fit,
    }
    # Every module is imported before any name is replaced, so that BoTorch's own
    # modules keep the GP classes they imported.
    modules = {module_name: importlib.import_module(module_name) for module_name in REPLACED_NAMES}
    for module_name, names in REPLACED_NAMES.items():
        for name in names:
            setattr(modules[module_name], name, replacements[name])


def swapped_script(code: str, model: str, sanity_check: str = "") -> str:
    r"""The script a run executes: the swap of ``model`` (none for ``"gp"``), the
    tutorial's ``code``, then its ``sanity_check`` (see :data:`SANITY_CHECKS`)."""
    script = f"{code}\n{sanity_check}"
    if MODELS[model] is None:
        return script
    return f"from benchmarks.tutorial_swap import install_swap\ninstall_swap({model!r})\n{script}"


def run_tutorial(
    botorch_dir: Path, tutorial: str, model: str, timeout: float, log_dir: Path, threads: int = 1
) -> SwapRun:
    r"""Run ``tutorial`` with ``model`` swapped in, in a fresh process in the tutorial's
    folder, with BoTorch's smoke budgets, ``threads`` torch threads and matplotlib's
    ``Agg`` backend; its output goes to ``log_dir``.

    Returns:
        The run's :class:`SwapRun`.
    """
    notebook = tutorial_notebook(botorch_dir, tutorial)
    script = log_dir / f"{tutorial}.{model}.py"
    code = swapped_script(tutorial_code(notebook), model, SANITY_CHECKS.get(tutorial, ""))
    script.write_text(code, encoding="utf-8")
    environment = {
        **os.environ,
        "SMOKE_TEST": "1",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": str(threads),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    log = log_dir / f"{tutorial}.{model}.log"
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as output:
        try:
            completed = subprocess.run(
                [sys.executable, str(script.resolve())],
                cwd=notebook.parent,
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            returncode: int | None = completed.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    seconds = time.monotonic() - start
    if returncode == 0:
        return SwapRun(tutorial, model, True, seconds, "")
    if returncode is None:
        return SwapRun(tutorial, model, False, seconds, "timeout")
    return SwapRun(tutorial, model, False, seconds, error_line(log.read_text(encoding="utf-8")))


def error_line(output: str) -> str:
    r"""The first line of the last exception a run's ``output`` reports (the line after
    its traceback's frames), or its last line when it reports none."""
    lines = [line for line in output.splitlines() if line.strip()]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (")]
    if tracebacks:
        after = lines[tracebacks[-1] + 1 :]
        for line in after:
            if not line.startswith((" ", "\t")):
                return line
    return lines[-1] if lines else "no output"


def summary(runs: Sequence[SwapRun], models: Sequence[str]) -> str:
    r"""The markdown tables: tutorials run per model, and each run's outcome."""
    counts = PrintedTable(["model", "tutorials that ran unchanged"])
    for model in models:
        own = [run for run in runs if run.model == model]
        counts.add_row([model, f"{sum(run.ran for run in own)} of {len(own)}"])
    outcomes = PrintedTable(["tutorial", *models])
    by_key = {(run.tutorial, run.model): run for run in runs}
    for tutorial in dict.fromkeys(run.tutorial for run in runs):
        cells = []
        for model in models:
            run = by_key.get((tutorial, model))
            if run is None:
                cells.append("")
            elif run.ran:
                cells.append(f"ran ({run.seconds:.0f} s)")
            else:
                cells.append(f"failed ({run.seconds:.0f} s): `{run.error[:160]}`")
        outcomes.add_row([tutorial, *cells])
    return counts.markdown() + "\n" + outcomes.markdown()


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = runner_parser(
        __doc__,
        Path("benchmarks/results/tutorial_swap"),
        smoke="one tutorial with the deep ensemble, the budget of the test suite",
    )
    parser.add_argument(
        "--botorch-dir",
        type=Path,
        required=True,
        help="A BoTorch checkout (the folder holding tutorials/).",
    )
    parser.add_argument(
        "--models", nargs="+", choices=sorted(MODELS), default=["gp", "deep-ensemble", "mc-dropout"]
    )
    parser.add_argument("--tutorials", nargs="+", choices=TUTORIALS, default=list(TUTORIALS))
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="Seconds a run may take (default 900)."
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[SwapRun]:
    args = parse_arguments(argv)
    log_dir = args.out / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    tutorials, models = args.tutorials, args.models
    if args.smoke:
        tutorials, models = tutorials[:1], ["deep-ensemble"]
    for tutorial in tutorials:
        for model in models:
            run = run_tutorial(
                args.botorch_dir, tutorial, model, args.timeout, log_dir, args.threads
            )
            print(f"{tutorial} / {model}: {'ran' if run.ran else 'failed: ' + run.error}")
            runs.append(run)
    write_rows_csv([asdict(run) for run in runs], args.out / "tutorial_swap.csv")
    header = summary_header(__file__, argv, args.threads)
    write_text(args.out / "tutorial_swap.md", f"{header}\n\n{summary(runs, models)}")
    return runs


if __name__ == "__main__":
    main()
