"""`python -m bench.autopilot`: see bench/autopilot/run.py."""

import sys

from .run import main

sys.exit(main())
