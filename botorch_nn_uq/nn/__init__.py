"""Torch building blocks for the neural surrogates."""
