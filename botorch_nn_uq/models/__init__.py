"""BoTorch ``Model`` subclasses that serve predictions from trained neural networks."""
