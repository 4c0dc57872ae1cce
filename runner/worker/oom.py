"""Make the worker the Linux OOM killer's first choice among a job's processes.

When memory runs out before the guard can act (a spike between two samples, another program's
growth), the kernel's OOM killer — and user-space killers that follow its scores, earlyoom and
systemd-oomd — pick the process with the highest ``/proc/PID/oom_score``: mostly its resident
memory, shifted by ``oom_score_adj`` (-1000..1000; proc(5), "oom_score_adj"). The worker is the
process that grows, but Blender or the supervisor may be the larger when it starts, and losing
either loses the user's scene or the job's report. So the worker (and through it the export
process and every step child, which inherit the value across ``fork``/``exec``) raises its own
``oom_score_adj``: an unprivileged process may raise its own value, never lower it below its
starting point without ``CAP_SYS_RESOURCE`` — which is why nothing here lowers anyone's, the
supervisor's included.

macOS has no equivalent an unprivileged process can set (docs/guard.md): Jetsam's priority
bands are set through the private ``memorystatus_control`` call, which needs the entitlement or
root. Elsewhere this does nothing.
"""
from __future__ import annotations

#: The worker's ``oom_score_adj``: half the range above a default process (0). Enough that a
#: worker of a few hundred MB outranks a Blender of several GB (each point is 0.1 % of memory),
#: short of 1000, which would make it the victim even while it is tiny and something else runs
#: away.
WORKER_OOM_SCORE_ADJ = 500

_PROC_SELF = "/proc/self/oom_score_adj"


def volunteer_for_oom_killer(adj: int = WORKER_OOM_SCORE_ADJ, path: str = _PROC_SELF) -> int | None:
    """Raise this process's ``oom_score_adj`` to ``adj`` (-1000..1000) when it is lower; never
    lower it. Returns the value in effect afterwards, or None where there is no such file (not
    Linux) or it cannot be read or written (a sandbox): the job runs the same either way, so
    this is never an error. Raises ``ValueError`` for an ``adj`` outside -1000..1000."""
    if not -1000 <= adj <= 1000:
        raise ValueError(f"oom_score_adj must be within -1000..1000, not {adj}")
    try:
        with open(path, "r+", encoding="ascii") as f:
            current = int(f.read().strip())
            if current >= adj:
                return current
            f.seek(0)
            f.write(f"{adj}\n")
    except (OSError, ValueError):
        return None
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None

