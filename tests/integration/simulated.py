"""The simulated fleet the integration tests run: the simulator's buggy-candidate scenario."""

from edge_sdk.simulate.fleet import FleetConfig, SimulatedFleet


def buggy_candidate_fleet(
    *,
    base_url: str,
    fleet_key: str,
    devices: int,
    rate: float,
    buggy_version: int = 2,
    encoding: str = "json",
) -> SimulatedFleet:
    """`devices` SDK devices enrolling with `fleet_key`, `rate` tasks per second in all; those
    running `buggy_version` use the less confident model (their cloud share ~30% → ~70%);
    `encoding`: the simulator's `--encoding` (json, protobuf, mixed)."""
    return SimulatedFleet(
        FleetConfig(
            base_url=base_url,
            fleet_key=fleet_key,
            devices=devices,
            rate=rate,
            scenario="buggy-candidate",
            buggy_version=buggy_version,
            encoding=encoding,
            # About what one server process enrols per second: faster only queues them.
            connect_per_s=25,
            telemetry_flush_s=1.0,
            progress_s=3600,
            # Every device online throughout, so each change reaches it at once.
            offline_spells=False,
        )
    )
