"""``python -m botorch_nn_uq``: the command line (see :mod:`botorch_nn_uq.cli`)."""

import sys

from botorch_nn_uq.cli import main

# Only when run: tools that import every module (the API reference) must not start the CLI.
if __name__ == "__main__":
    sys.exit(main())
