"""The client: `ThreadwardenClient` (`client.py`) with the reads it inherits and its result model
(`reads.py`), the live record feed (`feed.py`, with its live text in `live_text.py` and its
LISTEN hint in `listening.py`) and the JSON shapes of its views (`shapes.py`); it wakes hosts
with `threadwarden.workflows.client_calls`, as the activities do. It imports the worker's
settings and runtime to connect (`client.py` only); never the CLI, the console or the
activities."""
