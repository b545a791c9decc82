"""A simulated fleet of edge devices, built on the SDK's public API (`edge_sdk.Device`).

`python -m edge_sdk.simulate --url … --fleet-key … --devices 500 --rate 20`; see
docs/simulator.md. The pure models (devices, links, load, workload, cloud queue, scenarios)
live in `models`, `workload` and `scenarios`; `estimate` routes a sample of the workload
without running a fleet.
"""
