"""`python -m bench.lab`: see bench/lab/run.py."""

import sys

from . import calibration  # noqa: F401  (registers `--what calibration`)
from .run import main

sys.exit(main())
