"""A property test of the run state file: random sequences of ask, tell, refused tell,
save, load, a writer killed mid-save and a restart never lose a told result, never
duplicate a point, and always leave a loadable state.

The machine keeps a reference of what the run holds in memory and of what its last
successful save holds; a restart (a process that dies and loads the file again) goes
back to the saved reference. Across processes, ``tests/bo/test_state_file.py`` runs
concurrent and killed workers on one file.
"""

import contextlib
import math
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from botorch_nn_uq.bo import BayesianOptimizer, registered_problem
from botorch_nn_uq.bo.state_file import PARTIAL_SUFFIX

PROBLEM = registered_problem("levy", 2)


class Killed(BaseException):
    r"""A process killed at this point (nothing after it runs)."""


class RunStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.path = self.folder / "run.state"
        self.optimizer = BayesianOptimizer.for_problem(PROBLEM, proposer="random", n_initial=3)
        #: The told rows in memory, and in the file's last successful save.
        self.told: list[list[float]] = []
        self.saved: list[list[float]] | None = None
        self.saved_pending: torch.Tensor | None = None

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    @rule(q=st.integers(1, 3))
    def ask(self, q: int) -> None:
        before = self.optimizer.pending
        X = self.optimizer.ask(None if self.optimizer.step == 0 else q)
        # Asking while points are pending adds new points; those asked before stay.
        pending = self.optimizer.pending
        assert torch.equal(pending[pending.shape[0] - X.shape[0] :], X)
        assert before is None or torch.equal(pending[: before.shape[0]], before)

    @precondition(lambda self: self.optimizer.pending is not None)
    @rule(order=st.randoms(use_true_random=False))
    def tell(self, order) -> None:
        r"""Any subset of the pending points, in any order."""
        X = self.optimizer.pending
        rows = list(range(X.shape[0]))
        order.shuffle(rows)
        rows = rows[: order.randint(1, len(rows))]
        self.optimizer.tell(X[rows], PROBLEM.evaluate(X[rows]))
        self.told += X[rows].tolist()

    @precondition(lambda self: self.optimizer.pending is not None)
    @rule(kind=st.sampled_from(["nan", "told", "foreign", "repeated", "complex"]))
    def refused_tell(self, kind: str) -> None:
        X = self.optimizer.pending
        Y = PROBLEM.evaluate(X)
        if kind == "nan":
            Y[0] = math.nan
        elif kind == "told" and self.told:
            # A late duplicate of a told result.
            X, Y = torch.tensor(self.told[-1:], dtype=X.dtype), Y[:1]
        elif kind in ("foreign", "told"):
            # Half the box away from the asked point in every input, wrapping around.
            low, high = PROBLEM.bounds
            X = X.clone()
            X[0] = low + (high - low) * (((X[0] - low) / (high - low) + 0.5) % 1.0)
        elif kind == "repeated":
            X, Y = torch.cat([X, X[:1]]), torch.cat([Y, Y[:1]])
        else:
            Y = Y.to(torch.complex128)
        before = (self.optimizer.X.clone(), self.optimizer.step, self.optimizer.pending)
        with pytest.raises(ValueError):
            self.optimizer.tell(X, Y)
        assert torch.equal(self.optimizer.X, before[0]) and self.optimizer.step == before[1]
        assert torch.equal(self.optimizer.pending, before[2])

    @rule()
    def save(self) -> None:
        self.optimizer.save(self.path)
        self.saved, self.saved_pending = list(self.told), self.optimizer.pending
        # A killed writer's temporary files are gone once a save succeeded.
        assert not list(self.folder.glob(f"*{PARTIAL_SUFFIX}"))

    @rule(at=st.sampled_from(["write", "rename"]))
    def killed_during_save(self, at: str) -> None:
        r"""A save killed while it writes its temporary file, or just before the rename:
        the file keeps the last save, the temporary file stays behind (a SIGKILL runs no
        clean-up), and the process restarts from the file."""
        import botorch_nn_uq.bo.state_file as state_file

        def killed_write(path: Path, content: bytes) -> str:
            partial = path.parent / f".{path.name}.killed{PARTIAL_SUFFIX}"
            partial.write_bytes(content[: len(content) // 2] if at == "write" else content)
            raise Killed

        with (
            mock.patch.object(state_file, "_write_temporary", killed_write),
            contextlib.suppress(Killed),
        ):
            self.optimizer.save(self.path)
        self.restart()

    @rule()
    def restart(self) -> None:
        r"""The process dies and a new one loads the file (or starts over without one)."""
        if self.saved is None:
            self.optimizer = BayesianOptimizer.for_problem(PROBLEM, proposer="random", n_initial=3)
            self.told = []
            return
        self.optimizer = BayesianOptimizer.load(self.path)
        self.told = list(self.saved)
        pending = self.optimizer.pending
        assert (pending is None) == (self.saved_pending is None)
        assert pending is None or torch.equal(pending, self.saved_pending)

    @invariant()
    def no_told_result_is_lost_or_duplicated(self) -> None:
        X = self.optimizer.X
        assert sorted(X.tolist()) == sorted(self.told)
        assert torch.unique(X, dim=0).shape[0] == X.shape[0]
        assert torch.equal(self.optimizer.values, PROBLEM.evaluate(X).squeeze(-1))

    @invariant()
    def the_file_always_loads_and_holds_the_last_save(self) -> None:
        if self.saved is None:
            return
        loaded = BayesianOptimizer.load(self.path)
        assert sorted(loaded.X.tolist()) == sorted(self.saved)


RunStateMachine.TestCase.settings = settings(
    settings.default, max_examples=25, stateful_step_count=25
)
test_the_run_state_never_loses_a_told_result = RunStateMachine.TestCase
