"""Test hook, imported by every Python started with this folder on ``PYTHONPATH``: inside a
process the guard started (the guard's ``STAGELOAD_GUARD_<token>`` marker is in its
environment: the runner's worker) it runs the Python code in ``$RUNNER_TEST_WORKER_HOOK``;
in any other (the runner's supervisor) the code in ``$RUNNER_TEST_SUPERVISOR_HOOK``. Lets a
test make a real worker do what a backend might (start a helper process, crash), or hold a
real supervisor at a chosen point as heavy load would."""
import os

# the marker is STAGELOAD_GUARD_<token>; STAGELOAD_GUARD_DIR (the reservations' folder) is not one
_guarded = any(name.startswith("STAGELOAD_GUARD_") and name != "STAGELOAD_GUARD_DIR"
               for name in os.environ)
_code = os.environ.get("RUNNER_TEST_WORKER_HOOK" if _guarded else "RUNNER_TEST_SUPERVISOR_HOOK")
if _code:
    exec(compile(_code, "runner test hook", "exec"))
