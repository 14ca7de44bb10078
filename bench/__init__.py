"""Throughput benchmark: threadwarden against a bare-Temporal baseline on one embedded stack."""
