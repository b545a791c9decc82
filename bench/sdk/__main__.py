"""`python -m bench.sdk`: see bench/sdk/run.py."""

import sys

from .run import main

sys.exit(main())
