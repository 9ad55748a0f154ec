"""The benchmark runners of the repository (not part of the installed library).

Run one from the repository's root as ``python -m benchmarks.<runner>``;
``benchmarks/README.md`` indexes the protocols, whose pages in ``benchmarks/docs/`` have the
commands and the results, and :mod:`benchmarks.common` holds what the runners share.
"""
