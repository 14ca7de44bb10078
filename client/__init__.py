"""The client: `ThreadwardenClient` (`client.py`) with the reads it inherits and its result model
(`reads.py`), the live record feed (`feed.py`, over `threadwarden.reading`) and the JSON shapes
of its views (`shapes.py`); it wakes hosts with `threadwarden.workflows.client_calls`, as the
activities do. It connects with `threadwarden.config` (`client.py` only); it never imports the
worker, the activities, the agent adapters, the console or the CLI."""
