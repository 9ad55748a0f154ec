"""The drop-in suite: BoTorch usage, as BoTorch's own tutorials exercise it, on every model
family, each scenario one cell of the user guide's feature table."""
