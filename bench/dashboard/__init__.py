"""The fleet dashboard's 24-hour payload over 10 million events (see run.py)."""
