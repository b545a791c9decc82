"""`python -m bench.mqtt`: see bench/mqtt/run.py."""

import sys

from .run import main

sys.exit(main())
