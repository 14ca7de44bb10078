"""The client: `ThreadwardenClient` (`client.py`) with the reads it inherits and its result model
(`reads.py`), the live record feed (`feed.py`, with its live text in `live_text.py` and its
LISTEN hint in `listening.py`), the JSON shapes of its views (`shapes.py`) and its calls to
Temporal (`temporal.py`). It imports the worker's settings and runtime to connect (`client.py`
only); never the CLI, the console or the activities."""
