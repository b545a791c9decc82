"""`python -m bench.guards`."""

from .run import main

main()
