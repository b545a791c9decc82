"""How reviews plugs into policies (which never imports it): a fleet that reviews publishes
refuses one without an approval of that very revision. Connected in
`RoutingPoliciesConfig.ready()`."""

from typing import Any

from ..policies import signals
from ..policies.audit import Actor
from ..policies.models import Fleet, PolicyVersion
from .gate import approval_consume
from .models import ChangeRequest


def _on_version_publishing(
    sender: type, *, actor: Actor, fleet: Fleet, version: PolicyVersion, **_: Any
) -> None:
    # Raises (refusing the publish, in its transaction) when an approval is needed and missing.
    approval_consume(actor=actor, fleet=fleet, kind=ChangeRequest.Kind.PUBLISH, version=version)


def connect() -> None:
    """Plug the approval gate into publishing."""
    signals.version_publishing.connect(
        _on_version_publishing, sender=PolicyVersion, dispatch_uid="reviews.publish_gate"
    )
