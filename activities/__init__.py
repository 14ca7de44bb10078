"""Every side effect of a pass: activity classes constructed with their dependencies."""
