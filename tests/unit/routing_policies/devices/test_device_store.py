"""DeviceStore: the per-process batching of the device sockets' database writes.

A push makes every reached device ack within milliseconds, while the push is still reaching
the rest of the fleet; the acks are held for company and written together.
"""

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.roles import Role
from routing_policies.models import Device
from routing_policies.push import store as device_store
from routing_policies.push.store import DeviceStore
from routing_policies.services import device_enroll, fleet_enrollment_key_rotate
from tests.factories import UserFactory, make_fleet

DEVICES = 30


def _enrolled() -> list[Any]:
    publisher = UserFactory(role=Role.PUBLISHER, username="pia")
    fleet = make_fleet(slug="store", actor=publisher)
    key = fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)
    devices = [device_enroll(fleet_key=key, device_id=f"phone-{i}")[0] for i in range(DEVICES)]
    return devices


def _acks() -> list[tuple[int | None, Any]]:
    return list(Device.objects.order_by("pk").values_list("acked_version", "acked_at"))


async def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await database_sync_to_async(check)():
        assert asyncio.get_running_loop().time() < deadline, "not written in time"
        await asyncio.sleep(0.02)


@pytest.mark.django_db(transaction=True)
async def test_device_store__acks_arriving_one_by_one__one_batch_each_with_its_own_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given enrolled devices and a store whose acks wait 1 s for company (the 0.1 s of
    # production could pass while a loaded machine paused this test between two acks)
    monkeypatch.setattr(device_store, "LAZY_WRITE_DELAY_S", 1.0)
    devices = await database_sync_to_async(_enrolled)()
    store = DeviceStore()

    # When their acks arrive one at a time, the event loop running between them (as the
    # frames of a push's acks do)
    for device in devices:
        store.ack(device.pk, 1)
        await asyncio.sleep(0)

    # Then every ack is recorded in one batch (without the wait for company the first ack is
    # written alone and the others in a second batch), each device with the moment its own
    # ack arrived (the rollout page's propagation times come from it), in arrival order
    await _until(lambda: all(version == 1 for version, _ in _acks()))
    assert store.batches_written == 1
    acked_at = [at for _, at in await database_sync_to_async(_acks)()]
    assert acked_at == sorted(acked_at)
    assert len(set(acked_at)) == len(acked_at)


@pytest.mark.django_db(transaction=True)
async def test_device_store__connect_while_acks_wait__written_at_once_with_the_acks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given acks waiting for company, for longer than this test may take
    monkeypatch.setattr(device_store, "LAZY_WRITE_DELAY_S", 600.0)
    devices = await database_sync_to_async(_enrolled)()
    store = DeviceStore()
    for device in devices[1:]:
        store.ack(device.pk, 1)

    # When a request someone waits on arrives (a socket's connect, here with a bad token)
    state = await asyncio.wait_for(store.connect("not-a-token"), timeout=60)

    # Then it is answered (not held for the acks' window), and the waiting acks went with it
    assert state is None
    acks = await database_sync_to_async(_acks)()
    assert [version for version, _ in acks] == [None] + [1] * (DEVICES - 1)
