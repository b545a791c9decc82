"""`python -m bench.wire`: see bench/wire/run.py."""

import sys

from .run import main

sys.exit(main())
