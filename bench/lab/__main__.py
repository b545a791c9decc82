"""`python -m bench.lab`: see bench/lab/run.py."""

import sys

from .run import main

sys.exit(main())
