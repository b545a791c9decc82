"""`python -m bench.fanout --devices 1000 5000`: see bench/fanout/run.py."""

import sys

from .run import main

sys.exit(main())
