"""`python -m edge_sdk.simulate --url http://127.0.0.1:8000 --fleet-key … --devices 500 --rate 20`

With `--transport mqtt --mqtt-url mqtt://broker:1883` the devices take their policies from an
MQTT broker (docs/sdk.md, "MQTT"); `--transport mixed --mqtt-share 0.5` splits the fleet.

Runs a simulated fleet against a control plane until `--duration` passes or SIGINT/SIGTERM,
printing a progress line every few seconds; on the way out every device stops cleanly (its
socket closed, its telemetry flushed once more, its state saved under `--state-dir`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Final

from .fleet import SIM_ENCODINGS, FleetConfig, SimulatedFleet
from .scenarios import SCENARIOS

__all__ = ["build_parser", "config_from_args", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    """The command line of the simulator (shared with `manage.py simulate_fleet`)."""
    parser = argparse.ArgumentParser(
        prog="python -m edge_sdk.simulate",
        description="Run a simulated fleet of edge devices against the control plane.",
    )
    add_arguments(parser, url_required=True, fleet_key_required=True)
    return parser


def add_arguments(
    parser: argparse.ArgumentParser, *, url_required: bool, fleet_key_required: bool
) -> None:
    """The simulator's flags, on any parser."""
    parser.add_argument(
        "--url", required=url_required, default="http://127.0.0.1:8000", help="control plane"
    )
    parser.add_argument("--fleet-key", required=fleet_key_required, help="enrolment key")
    parser.add_argument("--devices", type=int, default=500, help="simulated devices (500)")
    parser.add_argument(
        "--rate", type=float, default=20.0, help="tasks per second for the whole fleet (20)"
    )
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), default="steady", help="what happens (steady)"
    )
    parser.add_argument("--duration", type=float, default=None, help="seconds; default: forever")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="keep tokens, policies, unsent telemetry"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument(
        "--device-prefix", default="sim", help="device ids are <prefix>-000000, … (sim)"
    )
    parser.add_argument(
        "--connect-rate", type=float, default=50.0, help="devices started per second (50)"
    )
    parser.add_argument(
        "--buggy-version",
        type=int,
        default=None,
        help="buggy-candidate, degraded-model: exactly this policy version is the candidate",
    )
    parser.add_argument(
        "--stable-version",
        type=int,
        default=None,
        help="buggy-candidate, degraded-model: versions newer than this are the candidate "
        "(default: the lowest version the devices run once the first has a policy)",
    )
    parser.add_argument(
        "--cloud-capacity",
        type=float,
        default=None,
        help="cloud requests/s at which the shared cloud saturates (default 0.7 x rate)",
    )
    parser.add_argument(
        "--progress", type=float, default=5.0, help="seconds between progress lines (5)"
    )
    parser.add_argument(
        "--feedback-share",
        type=float,
        default=0.3,
        help="share of answers the simulated app rates later through feedback (0.3)",
    )
    parser.add_argument(
        "--transport",
        choices=("websocket", "mqtt", "mixed"),
        default="websocket",
        help="the devices' push channel: the control plane's socket, an MQTT broker "
        "(--mqtt-url), or mixed (--mqtt-share of them on MQTT) (websocket)",
    )
    parser.add_argument(
        "--mqtt-url", default="", help="the MQTT broker, e.g. mqtt://127.0.0.1:1883"
    )
    parser.add_argument(
        "--mqtt-share",
        type=float,
        default=0.5,
        help="--transport mixed: the share of devices on MQTT (0.5)",
    )
    parser.add_argument(
        "--encoding",
        choices=SIM_ENCODINGS,
        default="json",
        help="how the devices encode: JSON only, protobuf wherever the control plane offers it "
        "(MQTT telemetry too), or mixed (--protobuf-share of them on protobuf) (json)",
    )
    parser.add_argument(
        "--protobuf-share",
        type=float,
        default=0.5,
        help="--encoding mixed: the share of devices on protobuf (0.5)",
    )
    parser.add_argument(
        "--no-offline-spells",
        dest="offline_spells",
        action="store_false",
        help="links never drop off the network",
    )


# The flags named otherwise than the FleetConfig field they set.
_FIELD_OF_FLAG: Final = {
    "url": "base_url",
    "duration": "duration_s",
    "connect_rate": "connect_per_s",
    "cloud_capacity": "cloud_capacity_rps",
    "progress": "progress_s",
}


def config_from_args(args: argparse.Namespace) -> FleetConfig:
    """A FleetConfig from parsed flags; a field whose flag the namespace lacks (manage.py
    simulate_fleet's, tests') keeps its default. ValueError for values out of range."""
    flags = {_FIELD_OF_FLAG.get(name, name): value for name, value in vars(args).items()}
    return FleetConfig(**{f.name: flags[f.name] for f in fields(FleetConfig) if f.name in flags})


async def run(config: FleetConfig) -> None:
    """Run the fleet until its duration passes or SIGINT / SIGTERM arrives."""
    # One log line per HTTP request of thousands of devices would drown the progress lines.
    for name in ("httpx", "httpcore", "websockets", "edge_sdk.transport.mqtt"):
        logging.getLogger(name).setLevel(logging.WARNING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    fleet = SimulatedFleet(config, output=sys.stdout)
    over = {"websocket": "", "mqtt": " over MQTT"}.get(
        config.transport, f" ({config.mqtt_share:.0%} over MQTT)"
    )
    encoded = {"json": "", "protobuf": ", protobuf"}.get(
        config.encoding, f", {config.protobuf_share:.0%} on protobuf"
    )
    print(
        f"simulating {config.devices} devices at {config.rate:g} tasks/s against"
        f" {config.base_url}{over} (scenario {config.scenario}{encoded}); Ctrl-C stops",
        flush=True,
    )
    try:
        await fleet.run(stop)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and run; 2 for bad flags (as argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    asyncio.run(run(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
