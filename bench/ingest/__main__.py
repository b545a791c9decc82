"""`python -m bench.ingest`: see bench/ingest/run.py."""

import sys

from .run import main

sys.exit(main())
