"""Live-push fan-out benchmark of the control plane against a bare websockets server."""
