"""Bayesian-optimisation loops and the registries of surrogates and acquisitions."""
