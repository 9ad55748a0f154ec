"""Acquisition functions (BoTorch ``AcquisitionFunction`` subclasses)."""
