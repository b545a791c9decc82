"""`python -m bench.alerts`."""

from .run import main

main()
