"""Loading the runners of ``benchmarks/`` (scripts, not package modules) in tests."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, module_name: str | None = None) -> ModuleType:
    r"""Import ``benchmarks/<name>.py`` as the module ``module_name`` (default ``name``).

    ``benchmarks/`` goes on ``sys.path`` first, as ``python benchmarks/<name>.py`` puts it
    there, so the runner imports its shared module (``common``) and its peers. The module
    is registered in ``sys.modules`` before it runs, since dataclasses look their module
    up there.
    """
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    module_name = module_name or name
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
