"""The composition root: settings, the Temporal plugin and runtime, slots, telemetry, metrics
and health, binding loading and the embedded stack."""
