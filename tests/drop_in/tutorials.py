r"""The fifteen BoTorch tutorials that ``benchmarks/tutorial_swap.py`` runs with the GP
swapped for each neural family, and the drop-in scenarios (keys of
``tests/drop_in/scenarios.py``'s ``SCENARIOS``, each a row of the feature table run on
every family by ``tests/test_features.py``) that test the patterns each tutorial uses.

The tutorials themselves need a BoTorch checkout, which a clone of this repository does
not have; the scenarios are what the test suite runs, on a small problem and with tiny
budgets. A tutorial runs unchanged for a family when every scenario of its patterns
works for it and the tutorial uses nothing else the family lacks (the benchmark's table,
``benchmarks/docs/tutorial-swap.md``, says what failed where).
"""

from __future__ import annotations

#: Tutorial folder name -> the scenarios of the patterns it uses, with the pattern.
TUTORIAL_PATTERNS: dict[str, dict[str, str]] = {
    "closed_loop_botorch_only": {
        "known-noise": "SingleTaskGP(X, Y, Yvar, input_transform=Normalize(d)) per outcome",
        "model-list": "ModelListGP of the objective and the constraint",
        "noisy-ei-pending": "qLogNoisyExpectedImprovement with X_baseline and a constraint",
        "normal-samplers": "SobolQMCNormalSampler passed to the acquisition",
        "state-dict": "each iteration's model loads the previous model's state_dict",
    },
    "turbo_1": {
        "max-posterior-sampling": "MaxPosteriorSampling(replacement=False) on perturbed "
        "candidates in the trust region",
        "mc-acquisitions": "qExpectedImprovement in the trust region",
    },
    "multi_objective_bo": {
        "known-noise": "SingleTaskGP(X, Y, Yvar) per objective",
        "multi-objective": "qLogNEHVI, qLogEHVI and qLogNParEGO on a ModelListGP",
        "normal-samplers": "SobolQMCNormalSampler passed to each acquisition",
    },
    "constrained_multi_objective_bo": {
        "multi-objective": "qLogNEHVI and qLogNParEGO with outcome constraints",
        "model-list": "ModelListGP of objectives and constraint",
        "normal-samplers": "SobolQMCNormalSampler passed to each acquisition",
    },
    "scalable_constrained_bo": {
        "constrained-thompson-sampling": "ConstrainedMaxPosteriorSampling in a trust region",
        "model-list": "ModelListGP of the constraints",
    },
    "batch_mode_cross_validation": {
        "batched-models": "gen_loo_cv_folds and batch_cross_validation: one model on "
        "batched training data, one fold per batch element",
        "known-noise": "train_Yvar folded with the data",
    },
    "compare_mc_analytic_acquisition": {
        "analytic-acquisitions": "ExpectedImprovement optimised by optimize_acqf",
        "mc-acquisitions": "qExpectedImprovement with an explicit sampler",
        "normal-samplers": "SobolQMCNormalSampler and IIDNormalSampler",
    },
    "one_shot_kg": {
        "fantasies": "qKnowledgeGradient optimised one-shot, its candidate moving",
    },
    "max_value_entropy": {
        "max-value-entropy": "qMaxValueEntropy on a candidate set, q = 1",
    },
    "GIBBON_for_efficient_batch_entropy_search": {
        "gibbon-batch": "the tutorial's 5 points: qLowerBoundMaxValueEntropy and "
        "qMaxValueEntropy sequential and qLogNoisyExpectedImprovement joint in batches of "
        "3, each batch of distinct points",
        "max-value-entropy": "qMaxValueEntropy and qLowerBoundMaxValueEntropy on a "
        "candidate set, q = 1 and 2",
    },
    "cost_aware_bayesian_optimization": {
        "gaussian-access": "a cost model of log-costs read as exp(model(X).mean)",
        "analytic-acquisitions": "LogExpectedImprovement divided by the predicted cost",
    },
    "risk_averse_bo_with_environmental_variables": {
        "append-features": "AppendFeatures of the environmental variable, CVaR, and "
        "qMultiFidelityKnowledgeGradient's fantasies",
    },
    "bo_with_warped_gp": {
        "learnable-transforms": "Warp(d, indices) trained with the model",
        "known-noise": "SingleTaskGP(train_X=..., train_Y=..., train_Yvar=...)",
    },
    "custom_acquisition": {
        "gaussian-access": "a custom analytic acquisition reading posterior.mvn",
        "mc-acquisitions": "a custom MC acquisition reading posterior samples",
    },
    "composite_bo_with_hogp": {
        "tensor-outputs": "HigherOrderGP on n x o1 x o2 outputs with FlattenedStandardize, "
        "a sampler and a GenericMCObjective over the grid",
    },
}
