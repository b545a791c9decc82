"""What the device batch endpoints share (ingest's `POST /api/v1/telemetry` and late
feedback's `POST /api/v1/telemetry/feedback`): the device token, and a body read raw for msgspec."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from routing_policies.apis import DeviceTokenAuthentication, IsDevice
from routing_policies.models import Device

from .ratelimit import Outcome


class DeviceBatchApi(APIView):
    """A device's batch: its raw body (None when over the size limit) answered by `outcome`."""

    authentication_classes = [DeviceTokenAuthentication]
    permission_classes = [IsDevice]
    parser_classes: list[Any] = []  # the body is read raw and decoded by msgspec

    def outcome(self, device: Device, body: bytes | None) -> Outcome:
        """(status, JSON body, headers) of this device's batch."""
        raise NotImplementedError

    def post(self, request: Request) -> Response:
        device = request.auth
        assert isinstance(device, Device)
        try:
            body: bytes | None = request.body
        except RequestDataTooBig:
            body = None
        status_code, data, headers = self.outcome(device, body)
        return Response(data, status=status_code, headers=headers)
