#!/usr/bin/env bash
# Regenerate edge_sdk/wire/*_pb2.py from edge_sdk/wire/*.proto with protoc from the
# grpcio-tools dev dependency (`make proto`). The generated files are checked in; the test
# tests/unit/edge_sdk/test_wire_generated.py fails when they differ from what this writes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-.}"
PYTHON="${PYTHON:-.venv/bin/python}"
"$PYTHON" -m grpc_tools.protoc -I . --python_out="$OUT" edge_sdk/wire/*.proto
