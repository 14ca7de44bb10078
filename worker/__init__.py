"""The composition root: settings, the worker, the CLI, the embedded stack and the client."""
