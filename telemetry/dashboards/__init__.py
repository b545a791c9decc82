"""Dashboards: the fleet dashboard page and API, its live feed over WebSockets, the metrics API
and the Prometheus scrape, all read from rollups."""
