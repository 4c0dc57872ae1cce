"""Real programs the guard tests run as commands: ``python procs.py ROLE [ARGS]``.

- ``hog STEP CAP [PAUSE]``: allocate STEP bytes at a time up to CAP, writing one byte in every
  4 KiB page so the memory is really resident, printing the running total; then hold it.
- ``tree PIDFILE TAG``: spawn grandchildren and write their pids, one a line, to PIDFILE:
  a plain child (same process group), a child that ignores SIGTERM (waited for until its
  handler is in place), a child that calls ``setsid`` (leaves the group), and a daemon made by
  double fork + ``setsid`` whose parent exits at once (so no ancestry links it to us any more).
  Then sleep.
- ``sleeper TAG``: sleep for a minute (the same command line as the tree's grandchildren).
- ``stamp FILE``: write ``time.time()`` to FILE and exit 0.
"""
import os
import signal
import subprocess
import sys
import time

PAGE = 4096


def hog(step: int, cap: int, pause: float) -> None:
    blocks = []
    total = 0
    while total < cap:
        block = bytearray(step)
        block[::PAGE] = b"\x01" * len(range(0, step, PAGE))
        blocks.append(block)
        total += step
        print(total, flush=True)
        time.sleep(pause)
    time.sleep(60)


def sleeper_argv(tag: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "sleeper", tag]


def tree(pidfile: str, tag: str) -> None:
    pids = []
    plain = subprocess.Popen(sleeper_argv(tag))
    pids.append(plain.pid)
    ready = pidfile + ".stubborn-ready"
    stubborn = subprocess.Popen(sleeper_argv(tag) + ["ignore-term", ready])
    pids.append(stubborn.pid)
    escaped = subprocess.Popen(sleeper_argv(tag), start_new_session=True)
    pids.append(escaped.pid)
    # Daemon: fork, the child forks again and exits; the grandchild calls setsid and execs.
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read_end)
        second = os.fork()
        if second == 0:
            os.setsid()
            os.write(write_end, f"{os.getpid()}\n".encode())
            os.close(write_end)
            os.execv(sys.executable, sleeper_argv(tag))
        os._exit(0)
    os.close(write_end)
    os.waitpid(first, 0)
    daemon_pid = int(os.read(read_end, 64).decode().strip())
    os.close(read_end)
    pids.append(daemon_pid)
    deadline = time.monotonic() + 30  # the stubborn one must ignore SIGTERM before anyone signals
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.02)
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as handle:
        handle.write("\n".join(str(p) for p in [os.getpid()] + pids) + "\n")
    os.rename(tmp, pidfile)
    time.sleep(60)


def sleeper(args: list[str]) -> None:
    if "ignore-term" in args:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(args[args.index("ignore-term") + 1], "w").close()
    time.sleep(60)


def stamp(path: str) -> None:
    with open(path, "w") as handle:
        handle.write(repr(time.time()))


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "hog":
        hog(int(args[0]), int(args[1]), float(args[2]) if len(args) > 2 else 0.1)
    elif role == "tree":
        tree(args[0], args[1])
    elif role == "sleeper":
        sleeper(args)
    elif role == "stamp":
        stamp(args[0])
    else:
        sys.exit(f"unknown role {role}")
