"""`python -m bench.dashboard`: see bench/dashboard/run.py."""

import sys

from .run import main

sys.exit(main())
