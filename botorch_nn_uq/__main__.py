"""``python -m botorch_nn_uq``: the command line (see :mod:`botorch_nn_uq.cli`)."""

import sys

from botorch_nn_uq.cli import main

sys.exit(main())
