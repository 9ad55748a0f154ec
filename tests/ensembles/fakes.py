"""A fake candidate trainer for testing search loops without training networks."""

import math
import zlib
from collections.abc import Callable

import torch

from botorch_nn_uq.ensembles.pool import CandidateSpec, TrainedCandidate

#: Validation points of every crafted candidate.
NUM_POINTS = 6


def architecture_row(spec: CandidateSpec) -> torch.Tensor:
    r"""Log-likelihoods that depend on the architecture alone (a stable hash seeds them)."""
    generator = torch.Generator().manual_seed(zlib.crc32(str(spec.architecture).encode()))
    return -1.0 - 3 * torch.rand(NUM_POINTS, generator=generator, dtype=torch.float64)


def shifted_row(spec: CandidateSpec) -> torch.Tensor:
    r"""Log-likelihoods on a crafted shifted validation set: like :func:`architecture_row`
    but from another hash, so the shifted set ranks the architectures differently."""
    text = f"shifted {spec.architecture}"
    generator = torch.Generator().manual_seed(zlib.crc32(text.encode()))
    return -1.0 - 3 * torch.rand(NUM_POINTS, generator=generator, dtype=torch.float64)


def favouring(candidate_id: int) -> Callable[[CandidateSpec], torch.Tensor]:
    r"""A score under which candidate ``candidate_id`` is by far the best network: its
    :func:`architecture_row` raised by 10, every other candidate's as it is."""

    def score(spec: CandidateSpec) -> torch.Tensor:
        row = architecture_row(spec)
        return row + 10 if spec.candidate_id == candidate_id else row

    return score


def crafted_candidate(spec: CandidateSpec, row: torch.Tensor | None) -> TrainedCandidate:
    r"""A trained candidate with validation log-likelihoods ``row`` (``None``: failed)."""
    if row is None:
        return TrainedCandidate(
            spec=spec,
            validation_log_likelihoods=torch.full((NUM_POINTS,), -math.inf, dtype=torch.float64),
            validation_nll=math.inf,
            state=None,
            seconds=0.0,
            error="diverged",
        )
    return TrainedCandidate(
        spec=spec,
        validation_log_likelihoods=row,
        validation_nll=float(-row.mean()),
        state={"weight": torch.zeros(1)},
        seconds=0.0,
    )


class FakeTrainer:
    r"""A stand-in for ``CandidateTrainer``: trains nothing, records every call and
    returns crafted candidates.

    Args:
        score: Maps a spec to its validation log-likelihood row, or ``None`` for a
            failed candidate.
    """

    def __init__(
        self, score: Callable[[CandidateSpec], torch.Tensor | None] = architecture_row
    ) -> None:
        self.score = score
        self.calls: list[list[CandidateSpec]] = []
        self.candidates: list[TrainedCandidate] = []

    @property
    def next_id(self) -> int:
        return len(self.candidates)

    def train(self, specs: list[CandidateSpec]) -> list[TrainedCandidate]:
        specs = list(specs)
        assert [spec.candidate_id for spec in specs] == list(
            range(self.next_id, self.next_id + len(specs))
        )
        self.calls.append(specs)
        outcomes = [crafted_candidate(spec, self.score(spec)) for spec in specs]
        self.candidates.extend(outcomes)
        return outcomes


class FakeScorer:
    r"""A stand-in validation scorer (``CandidateScorer``) of crafted scores: scores
    nothing by a network and records the ids of every call's candidates.

    Args:
        score: Maps a spec to its log-likelihood row on the scorer's validation set.
    """

    def __init__(self, score: Callable[[CandidateSpec], torch.Tensor] = shifted_row) -> None:
        self.score = score
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, candidates: list[TrainedCandidate]) -> torch.Tensor:
        self.calls.append(tuple(c.spec.candidate_id for c in candidates))
        failed = torch.full((NUM_POINTS,), -math.inf, dtype=torch.float64)
        return torch.stack([failed if c.failed else self.score(c.spec) for c in candidates])
