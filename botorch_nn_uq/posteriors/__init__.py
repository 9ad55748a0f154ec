"""Posterior families of the neural surrogates and their registered samplers."""
