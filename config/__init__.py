"""Configuration, below the client, the console, the CLI and the worker: what every entry point
needs before it does anything, and nothing of what a worker runs.

- `threadwarden.config.settings`: `Settings` (every ``THREADWARDEN_*`` variable, bounded) and
  the ``OTEL_*`` variables threadwarden acts on itself.
- `threadwarden.config.envconfig`: settings completed from Temporal's own ``TEMPORAL_*``
  variables and ``temporal.toml`` profiles.
- `threadwarden.config.endpoints`: the stack file, where a running ``threadwarden dev`` listens.
- `threadwarden.config.connect`: where the ledger and Temporal are (`Connections`, `resolve`)
  and the Temporal client the settings describe (TLS, mutual TLS, API key).
- `threadwarden.config.tracing`: the tracing interceptor every Temporal client carries.

It imports the public API and the protocol only: never a room that runs work (the ledger, the
reading room, the workflows, the activities, the worker) or an entry point.
"""
