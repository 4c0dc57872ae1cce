"""Test hook, imported by every Python started with this folder on ``PYTHONPATH``: inside a
process the guard started (the guard's ``STAGELOAD_GUARD_<token>`` marker is in its
environment: the runner's worker) it runs the Python code in ``$RUNNER_TEST_WORKER_HOOK``.
Lets a test make a real worker do what a backend might (start a helper process, crash)."""
import os

_code = os.environ.get("RUNNER_TEST_WORKER_HOOK")
if _code and any(name.startswith("STAGELOAD_GUARD_") for name in os.environ):
    exec(compile(_code, "RUNNER_TEST_WORKER_HOOK", "exec"))
