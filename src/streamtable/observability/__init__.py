"""Observability: the application's metrics served to Prometheus (:mod:`.prometheus`)."""
