"""The worker process: runs a backend (and imports torch when the backend needs it); started by
the supervisor as ``python -m runner.worker.run``."""
