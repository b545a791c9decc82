"""The link's own Prometheus metrics (text exposition format 0.0.4), served by
`manage.py mqtt_link --metrics-port`: messages taken, and those dropped by reason; and the
protobuf or compressed telemetry this process refused, by reason
(`controlplane_wire_refused_total{channel="mqtt"}`: a truncated or not-protobuf batch is
`malformed_protobuf`, one past the event or inflated-size limit `too_large`)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from controlplane.wire import refused_metrics

from .link import MqttLink

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DROP_REASONS = (
    "wrong_topic",
    "unknown_device",
    "too_large",
    "malformed",
    "not_assigned",
    "stale",
    "invalid",
    "rate_limited",
    "no_telemetry",
    "error",
)


def metrics_text(link: MqttLink) -> str:
    """The link's counters since it started (every known reason, at 0 when none)."""
    counts = link.drops.counts
    lines = [
        "# HELP edge_routing_mqtt_messages_total Device messages the link took from the broker.",
        "# TYPE edge_routing_mqtt_messages_total counter",
        f"edge_routing_mqtt_messages_total {link.taken}",
        "# HELP edge_routing_mqtt_dropped_total Device messages dropped, by reason.",
        "# TYPE edge_routing_mqtt_dropped_total counter",
    ]
    for reason in sorted({*DROP_REASONS, *counts}):
        lines.append(f'edge_routing_mqtt_dropped_total{{reason="{reason}"}} {counts[reason]}')
    return "\n".join(lines) + "\n" + refused_metrics()


def metrics_serve(link: MqttLink, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `GET /metrics` on a daemon thread; the server (its `server_port`, `shutdown`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = metrics_text(link).encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes are not news

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="mqtt-metrics", daemon=True).start()
    return server
