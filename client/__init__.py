"""The client: `ThreadwardenClient` and its result models (`client.py`), the live record feed
(`feed.py`), the JSON shapes of its views (`shapes.py`) and its calls to Temporal (`temporal.py`).
It imports the worker's settings and runtime to connect; never the CLI, the console or the
activities."""
