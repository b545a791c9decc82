"""Devices' broker credentials on Mosquitto's dynamic-security plugin (MQTT_ACCESS=dynsec).

Enrolment creates the device's client (username and client id `{fleet}/{device_id}`, password
its new token; the plugin keeps only its own salted hash of it) with its fleet's role and its
own; re-enrolment replaces it, which kicks the session opened with the old token; revocation
deletes it, which kicks it too. The client's text description carries a fingerprint of the
token's hash, so `broker_access_sync` can tell a client whose password is stale.

A broker that cannot be reached never fails an enrolment (the device still has WebSocket and
polling): the failure is logged and counted, and `manage.py mqtt_access sync` brings the
broker in line with the live devices later.
"""

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from django.conf import settings

from ..devices.models import Device
from ..devices.tokens import hash_secret
from ..policies.models import Fleet
from . import access, dynsec
from .access import DeviceName

logger = logging.getLogger(__name__)

# Errors the plugin answers when what we asked for is already so.
_ALREADY: Final = ("already exists", "not found")
# Broker-side failures since the process started, by operation: a grant (enrolment, a device's
# ask), a removal (revocation), a sync.
OPERATIONS: Final = ("grant", "remove", "sync")
FAILURES: Counter[str] = Counter()
_FINGERPRINT_CHARS: Final = 16


def failure_counts() -> dict[str, int]:
    """This process's broker-side failures by operation (each at 0 when none)."""
    return {operation: FAILURES[operation] for operation in OPERATIONS}


class DynsecRefused(Exception):
    """The plugin refused a command for another reason than "already so"."""


def dynsec_enabled() -> bool:
    """MQTT_ACCESS=dynsec and a broker to drive (MQTT_URL)."""
    return settings.MQTT_ACCESS == "dynsec" and bool(getattr(settings, "MQTT_URL", ""))


def token_fingerprint(token_hash: str) -> str:
    """What the broker's client records of the token: a prefix of its stored hash."""
    return f"token:{token_hash[:_FINGERPRINT_CHARS]}"


def _run(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    responses = dynsec.run(
        commands,
        url=str(getattr(settings, "MQTT_URL", "")),
        username=settings.MQTT_DYNSEC_USERNAME or str(getattr(settings, "MQTT_USERNAME", "")),
        password=settings.MQTT_DYNSEC_PASSWORD or str(getattr(settings, "MQTT_PASSWORD", "")),
        timeout=settings.MQTT_DYNSEC_TIMEOUT_S,
        tls=dynsec.TlsFiles(settings.MQTT_CA_FILE, settings.MQTT_CERT_FILE, settings.MQTT_KEY_FILE),
    )
    refused = [
        f"{r.get('command')}: {r['error']}"
        for r in responses
        if r.get("error") and not any(word in str(r["error"]).lower() for word in _ALREADY)
    ]
    if refused:
        raise DynsecRefused("; ".join(refused))
    return responses


def _fleet_role_commands(prefix: str, fleet: str) -> list[dict[str, Any]]:
    """The fleet's role made, or its ACLs put back (a changed topic prefix, say)."""
    role = access.fleet_role(fleet)
    return [
        {"command": "createRole", "rolename": role},
        *(
            {"command": "addRoleACL", "rolename": role, **acl}
            for acl in access.fleet_role_acls(prefix, fleet)
        ),
    ]


def _grant_commands(prefix: str, name: DeviceName, token: str) -> list[dict[str, Any]]:
    """Idempotent: roles made if missing, the client replaced (so an older session is kicked).

    Each role is made with its ACLs in one command: the plugin rewrites its whole file after
    every change, so an enrolment makes as few as it can (docs/mqtt-brokers.md)."""
    role = access.device_role(name)
    fleet_role = access.fleet_role(name.fleet)
    return [
        {
            "command": "createRole",
            "rolename": fleet_role,
            "acls": access.fleet_role_acls(prefix, name.fleet),
        },
        {"command": "createRole", "rolename": role, "acls": access.device_role_acls(prefix, name)},
        {"command": "deleteClient", "username": name.username},
        {
            "command": "createClient",
            "username": name.username,
            "clientid": name.username,
            "password": token,
            "textdescription": token_fingerprint(hash_secret(token)),
            "roles": [{"rolename": fleet_role}, {"rolename": role}],
        },
    ]


def _remove_commands(name: DeviceName) -> list[dict[str, Any]]:
    return [
        {"command": "deleteClient", "username": name.username},
        {"command": "deleteRole", "rolename": access.device_role(name)},
    ]


def _attempt(operation: str, name: DeviceName, commands: list[dict[str, Any]]) -> bool:
    try:
        _run(commands)
    except Exception as exc:  # whatever the broker did, the enrolment or revocation stands
        FAILURES[operation] += 1
        logger.warning(
            "broker_access.%s_failed fleet=%s device=%s error=%s",
            operation,
            name.fleet,
            name.device_id,
            exc,
        )
        return False
    logger.info("broker_access.%s fleet=%s device=%s", operation, name.fleet, name.device_id)
    return True


def broker_device_grant(*, fleet: str, device_id: str, token: str) -> bool:
    """Give the (re-)enrolled device its broker client, with this token as its password; an
    older client of the device, and its session, are gone. False (logged, counted) when the
    broker could not be told."""
    name = DeviceName(fleet, device_id)
    return _attempt("grant", name, _grant_commands(access.topic_prefix(), name, token))


def broker_device_remove(*, fleet: str, device_id: str) -> bool:
    """Delete the revoked device's broker client: the broker disconnects it at once."""
    name = DeviceName(fleet, device_id)
    return _attempt("remove", name, _remove_commands(name))


# --- reconcile --------------------------------------------------------------------------------


@dataclass
class SyncReport:
    """What `broker_access_sync` found and did."""

    live_devices: int = 0
    in_line: int = 0
    removed: list[str] = field(default_factory=list)
    stale_removed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "live_devices": self.live_devices,
            "in_line": self.in_line,
            "removed": len(self.removed),
            "stale_removed": len(self.stale_removed),
            "missing": len(self.missing),
            "missing_devices": self.missing[:100],
        }


def _broker_clients() -> dict[str, str]:
    """The broker's clients that name a device: username → text description."""
    (response,) = _run([{"command": "listClients", "verbose": True, "count": -1}])
    clients = response.get("data", {}).get("clients", [])
    return {
        str(client["username"]): str(client.get("textdescription", ""))
        for client in clients
        if access.parse_device_username(str(client.get("username", ""))) is not None
    }


def _live_devices() -> Iterable[tuple[str, str, str]]:
    """(fleet slug, device id, token hash) of every live device, read in chunks."""
    rows = Device.objects.live().values_list("fleet__slug", "device_id", "token_hash")
    return rows.order_by("pk").iterator(chunk_size=5000)


def broker_access_sync(*, dry_run: bool = False) -> SyncReport:
    """Bring the broker's device clients in line with the live devices.

    A client with no live device (revoked or deleted while the broker was away) is deleted;
    one whose password is an older token (re-enrolled meanwhile) too, since we keep no token
    to set; a live device with no client is reported `missing`: its token exists only on the
    device, so it gets MQTT access when it enrols again (it works over WebSocket meanwhile).
    Every fleet's role and the control plane's role are (re)made. A broker that cannot be
    reached raises (and is counted).
    """
    try:
        report = _sync(dry_run=dry_run)
    except (dynsec.BrokerUnavailable, DynsecRefused):
        FAILURES["sync"] += 1
        raise
    logger.info("broker_access.synced dry_run=%s %s", dry_run, report.as_dict())
    return report


def _sync(*, dry_run: bool) -> SyncReport:
    prefix = access.topic_prefix()
    report = SyncReport()
    clients = _broker_clients()
    seen: set[str] = set()
    for fleet, device_id, token_hash in _live_devices():
        report.live_devices += 1
        name = DeviceName(fleet, device_id)
        seen.add(name.username)
        held = clients.get(name.username)
        if held is None:
            report.missing.append(name.username)
        elif held != token_fingerprint(token_hash):
            report.stale_removed.append(name.username)
        else:
            report.in_line += 1
    report.removed = sorted(set(clients) - seen)
    if dry_run:
        return report
    commands = [c for slug in _fleet_slugs() for c in _fleet_role_commands(prefix, slug)]
    commands += _controlplane_role_commands(prefix)
    for username in [*report.stale_removed, *report.removed]:
        parsed = access.parse_device_username(username)
        assert parsed is not None  # _broker_clients kept device names only
        commands += _remove_commands(parsed)
    _run(commands)
    return report


def _fleet_slugs() -> list[str]:
    return list(Fleet.objects.order_by("slug").values_list("slug", flat=True))


def _controlplane_role_commands(prefix: str) -> list[dict[str, Any]]:
    """The control plane's role, given to its own account (MQTT_USERNAME) when it has one."""
    commands: list[dict[str, Any]] = [
        {"command": "createRole", "rolename": access.CONTROLPLANE_ROLE},
        *(
            {"command": "addRoleACL", "rolename": access.CONTROLPLANE_ROLE, **acl}
            for acl in access.controlplane_role_acls(prefix)
        ),
    ]
    username = access.controlplane_username()
    password = str(getattr(settings, "MQTT_PASSWORD", "") or "")
    if username and password:
        # Made when missing ("already exists" otherwise: its password is left alone).
        commands.append({"command": "createClient", "username": username, "password": password})
    if username:
        commands.append(
            {"command": "addClientRole", "username": username, "rolename": access.CONTROLPLANE_ROLE}
        )
    return commands
