"""botorch-nn-uq: neural-network surrogates with uncertainty for BoTorch."""

__version__ = "0.1.0"
