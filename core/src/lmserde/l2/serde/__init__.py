"""The serde wrapper: stored-object frames, verification and self-repair, metrics, scrubbing and
the Prometheus exporter."""
