"""A machine and a BO run whose costs and values the tests choose: the clock, the load
and the cores that ``optimize`` measures, and a surrogate that costs nothing."""

import dataclasses
import itertools

import torch

from botorch_nn_uq.bo import acquisitions, surrogates
from botorch_nn_uq.cli import optimize

#: A quick run of ``optimize`` on the fake BO of :func:`fake_bo`.
FAKE_RUN = ["optimize", "--problem", "levy", "--dim", "2", "--model", "mc-dropout",
            "--acquisition", "ts", "--n-initial", "4", "--iterations", "3", "--quiet"]  # fmt: skip


def fake_machine(monkeypatch, *, seconds: float, load: float, cores: int = 2) -> None:
    r"""A run that takes ``seconds`` on ``cores`` cores under a load average ``load``."""
    ticks = itertools.count(0.0, seconds)  # the start, then the end, of each run
    monkeypatch.setattr(optimize, "_clock", lambda: next(ticks))
    monkeypatch.setattr(optimize, "_load_average", lambda: load)
    monkeypatch.setattr(optimize, "_cpu_count", lambda: cores)


def fake_bo(monkeypatch, proposal) -> None:
    r"""A surrogate that costs nothing and a proposing strategy ``ts`` that proposes
    ``proposal(context)`` (a ``d``-vector), so a run's values are known in advance."""
    spec = surrogates.SURROGATES["mc-dropout"]
    monkeypatch.setitem(
        surrogates.SURROGATES, "mc-dropout", dataclasses.replace(spec, build=lambda *a, **k: None)
    )
    monkeypatch.setitem(
        acquisitions.ACQUISITIONS,
        "ts",
        dataclasses.replace(
            acquisitions.ACQUISITIONS["ts"],
            propose=lambda model, context, q: proposal(context).expand(q, -1).clone(),
        ),
    )


def worst_point(context):
    r"""The worst point evaluated so far: a proposal that never improves."""
    # train_Y is -f: its smallest entry is the worst point evaluated so far.
    return context.train_X[context.train_Y.squeeze(-1).argmin()]


def levy_minimiser(context):
    r"""Levy's minimiser, where ``f = 0``."""
    return torch.ones(context.bounds.shape[-1], dtype=context.bounds.dtype)
