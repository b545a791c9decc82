"""Input of the device pages: the device list's filters."""

from typing import Any

from controlplane.pages import PageForm, WholeNumberField


class _VersionFilterField(WholeNumberField):
    """A version number as the filter takes it: `3` or `v3`."""

    def to_python(self, value: Any) -> Any:
        return super().to_python(str(value or "").strip().lstrip("v"))


class DeviceFilterForm(PageForm):
    """The version filter of the device list (GET): assigned or acked, `3` or `v3`."""

    version = _VersionFilterField(
        label="The version", empty=None, invalid="{text!r} is not a version number."
    )
