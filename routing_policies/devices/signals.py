"""What devices announce for the push tier above them (which devices never imports): a token
that no longer opens its device, revoked or replaced by a re-enrolment. Sent inside the
transaction; `push/receivers.py` closes the socket opened with it and forgets it on commit."""

from django.dispatch import Signal

# `fleet_id` (int), `device_pk` (int), `token_hash` (str): the token that stopped working.
device_token_revoked = Signal()
