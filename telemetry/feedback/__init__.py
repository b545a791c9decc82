"""Late quality feedback (PROTOCOL.md extensions): `POST /api/v1/telemetry/feedback`.

An app often learns how good an answer was after its event was sent (a user's rating, an
evaluator, a task's own check). The device then sends `{"event_id", "quality"}` items; each is
stored once (`models.Feedback`) and joined to its event in the rollups exactly once:
- `messages`: decoding and validation of the body (every refusal names `feedback[n].field`);
- `services`: storing a batch (`feedback_batch_ingest`), the join of feedback held for events
  the worker is folding (`feedback_join_folding`, called by ingest processing) and the join of
  feedback for events already folded (`feedback_join`, a Celery task and the sweep);
- `apis`, `urls`: the endpoint.
"""
