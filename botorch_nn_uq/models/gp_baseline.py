r"""BoTorch's ``SingleTaskGP`` as the baseline of the catalogue: its model card (the
registry's ``"gp"``, the feature table's first column)."""

from __future__ import annotations

from botorch.models import SingleTaskGP

from botorch_nn_uq.models.card import FEATURES, WORKS, Family, ModelCard, Status, Support

#: The GP baseline's column of the feature table: what BoTorch's own GP does.
GP_FAMILY = Family(
    "gp",
    "GP baseline (`SingleTaskGP`)",
    {
        **{feature.key: WORKS for feature in FEATURES},
        "normal-samplers": Support(
            Status.WORKS, "through `ModelList` with the package imported (BoTorch alone refuses)"
        ),
        "batch-thompson-sampling": Support(Status.WORKS, "joint samples at the candidates"),
        "tensor-outputs": Support(
            Status.WORKS, "`HigherOrderGP`, BoTorch's GP of them (`SingleTaskGP` takes `n x m`)"
        ),
        "output-subsets": Support(
            Status.APPROXIMATE,
            "multi-output: `output_indices` of one output raises and a reordering is "
            "untransformed in the wrong order (BoTorch 0.18); `subset_output` works",
        ),
        "shift-adaptation": Support(
            Status.UNSUPPORTED,
            "one model, no members to select",
            error=TypeError,
            error_match="validation_shift_severity",
        ),
    },
)

#: BoTorch's ``SingleTaskGP`` with ``Normalize`` and ``Standardize``, fitted by its
#: marginal likelihood (:func:`~botorch_nn_uq.fit.fit_model`).
GP_CARD = ModelCard(
    name="gp",
    description="BoTorch SingleTaskGP (Normalize + Standardize, MLL fit)",
    model_class=SingleTaskGP,
    family=GP_FAMILY,
    summary="BoTorch's exact GP, the baseline",
    posterior="Gaussian",
)
