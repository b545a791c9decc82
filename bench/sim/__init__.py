"""bench/sim: simulated devices per core (see run.py)."""
