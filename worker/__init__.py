"""The composition root: the Temporal plugin and runtime, slots, telemetry, metrics and health,
binding loading and the embedded stack (its settings and connections are
`threadwarden.config`'s)."""
