"""Always-on monitoring: Prometheus metrics, stall-triggered captures, a live view."""
