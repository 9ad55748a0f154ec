r"""The record of an ensemble search, with caching that makes searches resumable.

Every search of this package draws all its random decisions from one seeded generator
and decides only from earlier results, so running it again with the same seed retraces
the same candidates. :class:`SearchHistory` caches every trained candidate by its id:
a search started with a saved history reuses the candidates it finds there (after
checking that they are the ones it would propose) and trains only the rest.
:class:`CandidateTrainer` checkpoints the history after every trained group of
candidates, so an interrupted search loses at most the groups still training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from botorch_nn_uq.ensembles.pool import (
    CandidateSpec,
    PoolData,
    PoolExecutor,
    PoolSettings,
    TrainedCandidate,
    train_pool,
)
from botorch_nn_uq.ensembles.selection import SelectionResult, ensemble_nll
from botorch_nn_uq.training.config import NonFiniteLossError


@dataclass(frozen=True)
class EnsembleDiagnostics:
    r"""Validation diagnostics of a selected ensemble (transformed units).

    Attributes:
        ensemble_nll: The mixture's validation negative log-likelihood.
        average_member_nll: The weighted mean of the members' own validation NLL.
        oracle_nll: ``mean_n min_k -log p_k(y_n | x_n)``: the NLL if the best member
            for each point were known; the gap to ``average_member_nll`` measures the
            members' diversity.
    """

    ensemble_nll: float
    average_member_nll: float
    oracle_nll: float


def ensemble_diagnostics(log_likelihoods: Tensor, weights: Tensor) -> EnsembleDiagnostics:
    r"""Diagnostics of members with ``num_members x v`` validation log-likelihoods and
    mixture ``weights``."""
    weights = weights.to(log_likelihoods) / weights.sum()
    member_nll = -log_likelihoods.mean(-1)
    return EnsembleDiagnostics(
        ensemble_nll=float(ensemble_nll(log_likelihoods, weights)),
        average_member_nll=float((weights * member_nll).sum()),
        oracle_nll=float(-log_likelihoods.max(0).values.mean()),
    )


#: The first line of a saved history; the next holds the SHA-256 digest of the payload.
_HEADER = b"botorch-nn-uq search history 1\n"
_DIGEST_LENGTH = 64


@dataclass
class SearchHistory:
    r"""Every candidate of a search, in the order proposed, and the final selection.

    Attributes:
        method: The search's name (``"nes-rs"``, ``"nes-re"``, ``"autodeuq"``).
        fingerprint: A digest of the search's data and pool settings (see
            :func:`pool_fingerprint`); a resumed search must match it.
        candidates: The trained candidates in the order of their ids,
            ``candidates[i].spec.candidate_id == i``; only a checkpoint written while a
            batch of candidates was training may miss the batch's unfinished ones.
        selected_ids: The candidate ids of the final ensemble.
        selected_weights: Their mixture weights.
        diagnostics: Validation diagnostics of the final ensemble.
    """

    method: str
    fingerprint: str = ""
    candidates: list[TrainedCandidate] = field(default_factory=list)
    selected_ids: list[int] = field(default_factory=list)
    selected_weights: list[float] = field(default_factory=list)
    diagnostics: EnsembleDiagnostics | None = None

    def records(self) -> list[dict[str, Any]]:
        r"""One plain dict per candidate (architecture as text and as a dict,
        hyperparameters, seed, validation NLL, seconds, error, selection weight)."""
        weights = dict(zip(self.selected_ids, self.selected_weights, strict=True))
        return [
            {
                "candidate_id": candidate.spec.candidate_id,
                "architecture": str(candidate.spec.architecture),
                **candidate.spec.hyperparameters.to_dict(),
                "seed": candidate.spec.seed,
                "validation_nll": candidate.validation_nll,
                "seconds": candidate.seconds,
                "steps": candidate.steps,
                "error": candidate.error,
                "selection_weight": weights.get(candidate.spec.candidate_id, 0.0),
                "architecture_dict": candidate.spec.architecture.to_dict(),
            }
            for candidate in self.candidates
        ]

    def save(self, path: str | Path) -> None:
        r"""Save the whole history, trained weights included.

        The file holds a header line, the SHA-256 digest of the payload and the payload
        (a ``torch.save`` of tensors, strings, numbers, ``None``, lists and dicts only).
        It is written to a temporary file in the same folder, synced to disk and renamed
        over ``path``, so a process killed while saving leaves the previous file intact.

        Args:
            path: The file to write.
        """
        buffer = io.BytesIO()
        torch.save(self._payload(), buffer)
        payload = buffer.getvalue()
        digest = hashlib.sha256(payload).hexdigest().encode()
        _replace_atomically(Path(path), _HEADER + digest + b"\n" + payload)

    @classmethod
    def load(cls, path: str | Path) -> SearchHistory:
        r"""Load a history written by :meth:`save`.

        The payload is unpickled with ``weights_only=True`` (no code runs) and only
        after its checksum matched. Its tensors load onto the CPU, where the pool keeps
        candidates' weights, whatever device wrote them: a history saved on a GPU
        resumes on a machine without one.

        Args:
            path: The file to read.

        Raises:
            ValueError: If the file is not a history written by :meth:`save`, or is
                corrupt or truncated.
        """
        path = Path(path)
        content = path.read_bytes()
        start = len(_HEADER) + _DIGEST_LENGTH + 1
        if not content.startswith(_HEADER) or content[start - 1 : start] != b"\n":
            raise ValueError(f"{path} is not a search history written by SearchHistory.save.")
        digest, payload = content[len(_HEADER) : start - 1], content[start:]
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise ValueError(
                f"The search history {path} is corrupt or truncated: its checksum does not "
                "match its content."
            )
        try:
            return cls._from_payload(
                torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
            )
        # A payload with a valid checksum that does not parse was crafted or written by
        # other code; whatever fails, it is not a history.
        except Exception as error:
            raise ValueError(f"{path} is not a valid search history: {error}") from error

    def _payload(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "fingerprint": self.fingerprint,
            "candidates": [
                {
                    "spec": candidate.spec.to_dict(),
                    "validation_log_likelihoods": candidate.validation_log_likelihoods,
                    "validation_nll": float(candidate.validation_nll),
                    "state": candidate.state,
                    "seconds": float(candidate.seconds),
                    "steps": int(candidate.steps),
                    "error": candidate.error,
                }
                for candidate in self.candidates
            ],
            "selected_ids": [int(i) for i in self.selected_ids],
            "selected_weights": [float(w) for w in self.selected_weights],
            "diagnostics": None if self.diagnostics is None else vars(self.diagnostics),
        }

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> SearchHistory:
        for item in data["candidates"]:
            if item["error"] is None:
                _check_finite_state(item["spec"], item["state"])
        candidates = [
            TrainedCandidate(
                spec=CandidateSpec.from_dict(item["spec"]),
                validation_log_likelihoods=item["validation_log_likelihoods"],
                validation_nll=item["validation_nll"],
                state=item["state"],
                seconds=item["seconds"],
                error=item["error"],
                steps=item["steps"],
            )
            for item in data["candidates"]
        ]
        diagnostics = data["diagnostics"]
        return cls(
            method=data["method"],
            fingerprint=data["fingerprint"],
            candidates=candidates,
            selected_ids=list(data["selected_ids"]),
            selected_weights=list(data["selected_weights"]),
            diagnostics=None if diagnostics is None else EnsembleDiagnostics(**diagnostics),
        )


def _check_finite_state(spec: dict[str, Any], state: Any) -> None:
    r"""Refuse a trained candidate whose weights are not all finite: a resumed search
    would serve them."""
    tensors = state.values() if isinstance(state, dict) else ()
    if not isinstance(state, dict) or not all(isinstance(value, Tensor) for value in tensors):
        raise ValueError(f"candidate {spec.get('candidate_id')} has no state of tensors")
    bad = [
        name
        for name, value in state.items()
        if value.is_complex() or (value.is_floating_point() and not value.isfinite().all())
    ]
    if bad:
        raise ValueError(
            f"candidate {spec.get('candidate_id')} has non-finite or complex weights {bad}"
        )


def _remove_stale_temporaries(path: Path) -> None:
    r"""Delete temporary files that an earlier save of ``path`` left behind when its
    process was killed (their process no longer runs)."""
    for temporary in path.parent.glob(f".{path.name}.*.tmp"):
        pid_text = temporary.name[len(path.name) + 2 :].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            temporary.unlink(missing_ok=True)
        except PermissionError:
            continue


def _replace_atomically(path: Path, content: bytes) -> None:
    r"""Write ``content`` to ``path`` through a synced temporary file in its folder and
    a rename, so ``path`` always holds either its old or its new content. Temporary
    files of earlier saves killed midway are removed first."""
    _remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    # os.open with mode 0o666 gives the file the permissions the umask allows, as a
    # plain open would.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):
        # Syncing the folder makes the rename itself survive a power loss.
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def pool_fingerprint(data: PoolData, settings: PoolSettings) -> str:
    r"""A digest of the data (values, shapes, dtypes; the known noise variances where
    given) and the pool settings."""
    digest = hashlib.sha256(repr(settings).encode())
    known_noise = [data.train_Yvar, data.validation_Yvar] if data.train_Yvar is not None else []
    for tensor in (data.train_X, data.train_Y, data.validation_X, data.validation_Y, *known_noise):
        values = tensor.detach().cpu().contiguous()
        digest.update(f"{tuple(values.shape)}{values.dtype}".encode())
        digest.update(values.numpy().tobytes())
    return digest.hexdigest()


class CandidateTrainer:
    r"""Trains a search's candidates, reusing those of a saved history.

    Args:
        method: The search's name (checked against ``resume_from``).
        data: The pool's data.
        settings: The pool's settings.
        executor: Where candidate groups train (in-process by default).
        resume_from: A history of an earlier run of the same search (same seed, data
            and settings) whose candidates are reused.
        progress_total: Show a progress bar over this many candidates; ``None`` shows
            none.
        checkpoint_path: Save the history here after every trained group of candidates
            (see :func:`~botorch_nn_uq.ensembles.pool.train_pool`), so an interrupted
            search can be resumed with ``SearchHistory.load(path)``.
    """

    def __init__(
        self,
        method: str,
        data: PoolData,
        settings: PoolSettings,
        executor: PoolExecutor | None = None,
        resume_from: SearchHistory | None = None,
        progress_total: int | None = None,
        checkpoint_path: str | Path | None = None,
    ) -> None:
        if resume_from is not None and resume_from.method != method:
            raise ValueError(
                f"Cannot resume a {method} search from a {resume_from.method} history."
            )
        fingerprint = pool_fingerprint(data, settings)
        if resume_from is not None and resume_from.fingerprint != fingerprint:
            raise ValueError(
                "The saved history was made with other data or pool settings; resume only "
                "with the same data, settings and seed."
            )
        self.data, self.settings, self.executor = data, settings, executor
        self.checkpoint_path = checkpoint_path
        self.history = SearchHistory(method, fingerprint=fingerprint)
        self._progress = None
        if progress_total is not None:
            from tqdm.auto import tqdm

            self._progress = tqdm(total=progress_total, desc=method, leave=False)
        self._cache = {} if resume_from is None else {
            c.spec.candidate_id: c for c in resume_from.candidates
        }  # fmt: skip

    @property
    def next_id(self) -> int:
        r"""The id of the next candidate."""
        return len(self.history.candidates)

    def train(self, specs: Sequence[CandidateSpec]) -> list[TrainedCandidate]:
        r"""Train ``specs`` (ids ``next_id, next_id + 1, ...``), append them to the
        history and return them."""
        for offset, spec in enumerate(specs):
            if spec.candidate_id != self.next_id + offset:
                raise ValueError("Candidates must be numbered consecutively from next_id.")
            cached = self._cache.get(spec.candidate_id)
            if cached is not None and cached.spec != spec:
                raise ValueError(
                    f"The saved history's candidate {spec.candidate_id} differs from the one "
                    "this search proposes; resume only with the same seed, data and settings."
                )
        finished = {
            spec.candidate_id: self._cache[spec.candidate_id]
            for spec in specs
            if spec.candidate_id in self._cache
        }
        self._advance_progress(len(finished))
        missing = [spec for spec in specs if spec.candidate_id not in self._cache]

        def group_done(group: list[TrainedCandidate]) -> None:
            finished.update((candidate.spec.candidate_id, candidate) for candidate in group)
            self._checkpoint(finished.values())
            self._advance_progress(len(group))

        if missing:
            train_pool(missing, self.data, self.settings, self.executor, on_group_done=group_done)
        else:
            # Nothing trained, so no group wrote the checkpoint, which may be another
            # file than the history resumed from.
            self._checkpoint(finished.values())
        outcomes = [finished[spec.candidate_id] for spec in specs]
        self.history.candidates.extend(outcomes)
        return outcomes

    def _checkpoint(self, batch: Iterable[TrainedCandidate]) -> None:
        r"""Save the history with the finished candidates of the batch in progress."""
        if self.checkpoint_path is None:
            return
        finished = sorted(batch, key=lambda candidate: candidate.spec.candidate_id)
        checkpoint = dataclasses.replace(
            self.history, candidates=self.history.candidates + finished
        )
        checkpoint.save(self.checkpoint_path)

    def _advance_progress(self, count: int) -> None:
        if self._progress is not None and count:
            self._progress.update(count)

    def finish(
        self, candidates: Sequence[TrainedCandidate], selection: SelectionResult
    ) -> SearchHistory:
        r"""Record the final selection (indices into ``candidates``) and its diagnostics."""
        if self._progress is not None:
            self._progress.close()
        chosen = [candidates[i] for i in selection.indices.tolist()]
        self.history.selected_ids = [c.spec.candidate_id for c in chosen]
        self.history.selected_weights = selection.weights.tolist()
        log_likelihoods = torch.stack([c.validation_log_likelihoods for c in chosen])
        self.history.diagnostics = ensemble_diagnostics(log_likelihoods, selection.weights)
        if self.checkpoint_path is not None:
            self.history.save(self.checkpoint_path)
        return self.history


def stack_log_likelihoods(candidates: Sequence[TrainedCandidate]) -> Tensor:
    r"""The ``num_candidates x v`` validation log-likelihood matrix of ``candidates``
    (``-inf`` rows for failed ones, which selection never picks)."""
    rows = [c.validation_log_likelihoods.to(torch.float64) for c in candidates]
    matrix = torch.stack(rows)
    return torch.where(torch.isnan(matrix), -math.inf, matrix)


def usable_candidates(candidates: Sequence[TrainedCandidate]) -> list[TrainedCandidate]:
    r"""The candidates whose training succeeded, in their order: those a search selects
    its ensemble from.

    Args:
        candidates: Every trained candidate of a search, failed ones included.

    Returns:
        The candidates that did not fail.

    Raises:
        NonFiniteLossError: If every candidate failed (no ensemble can be selected).
    """
    usable = [candidate for candidate in candidates if not candidate.failed]
    if not usable:
        raise NonFiniteLossError(
            "The training loss became non-finite for every candidate; no ensemble can be "
            "selected. Check the data scaling (use Normalize/Standardize transforms) or "
            "narrow the learning-rate range."
        )
    return usable
