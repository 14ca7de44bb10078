"""The composition root: settings, telemetry, the worker, the CLI, the embedded stack, the client."""
