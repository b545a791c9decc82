"""What devices announce for the parts above them (which devices never imports): a token
that no longer opens its device, revoked or replaced by a re-enrolment, and a device enrolled
with a new token. Sent inside the transaction; `push/receivers.py` closes the socket opened
with a revoked token and forgets it on commit; `broker_access/receivers.py` gives the broker
the new token (or deletes the revoked device's client) on commit."""

from django.dispatch import Signal

# `fleet_id` (int), `device_pk` (int), `token_hash` (str): the token that stopped working.
device_token_revoked = Signal()

# `fleet` (str, the slug), `device_id` (str), `token` (str, the new plaintext token, shown
# once): a device enrolled or re-enrolled (after `device_token_revoked` for its old token).
# The token is never stored; a receiver hands it to whatever must check it (the broker).
device_enrolled = Signal()
