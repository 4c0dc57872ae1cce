"""The guards' registry and reservations live in a private folder (0700, this
user's, checked on every use; by default under $XDG_RUNTIME_DIR or the user's cache folder, not
a guessable /tmp name), and a guard with --need refuses when reservations cannot be used instead
of admitting without them."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stageload.guard import private
from stageload.guard.config import GuardConfig
from stageload.guard.reservations import Admission, Reservations

REPO = Path(__file__).resolve().parents[2]


def _guard(args, env, timeout=60):
    return subprocess.run([sys.executable, "-m", "stageload", "guard", *args, "--", sys.executable,
                           "-c", "print('ran')"], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env}, cwd=REPO)


@pytest.mark.parametrize("make, why", [
    (lambda p: p.write_text("not a folder"), "is not a folder"),
    (lambda p: (p.mkdir(), p.chmod(0o755)), "can be used by other users (mode 0755"),
    (lambda p: (p.mkdir(mode=0o700), p.joinpath("reservations").symlink_to(p.parent)),
     "reservations is not a folder"),
])
def test_a_need_is_refused_when_the_reservations_cannot_be_used(tmp_path, make, why):
    folder = tmp_path / "registry"
    make(folder)
    proc = _guard(["--need", "1M"], {"STAGELOAD_GUARD_DIR": str(folder)})
    assert proc.returncode == 2, proc.stderr
    assert "ran" not in proc.stdout
    assert "reservations cannot be used" in proc.stderr and why in proc.stderr
    assert str(folder) in proc.stderr
    # without a need nothing is reserved, so the same folder does not stop the command
    plain = _guard([], {"STAGELOAD_GUARD_DIR": str(folder)})
    assert plain.returncode == 0 and "ran" in plain.stdout


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder of another user needs root")
def test_a_folder_another_user_made_first_is_refused(tmp_path):
    folder = tmp_path / "registry"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)  # nobody: the other local user who took the name first
    tmp_path.chmod(0o755)
    proc = _guard(["--need", "1M"], {"STAGELOAD_GUARD_DIR": str(folder)})
    assert proc.returncode == 2 and "belongs to another user (uid 65534" in proc.stderr


def test_the_default_folder_is_private_and_not_a_tmp_name(tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.delenv("STAGELOAD_GUARD_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert private.default_dir() == runtime / "stageload-guards"
    runtime.chmod(0o755)  # a runtime folder others can enter is not used
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert private.default_dir() == tmp_path / "cache" / "stageload-guards"
    made = private.ensure(private.default_dir())
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and made.stat().st_uid == os.getuid()
    proc = _guard(["--need", "1M"], {"XDG_CACHE_HOME": str(tmp_path / "cache"),
                                      "XDG_RUNTIME_DIR": str(runtime), "STAGELOAD_GUARD_DIR": ""})
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr
    assert (made / "reservations").is_dir()
    assert stat.S_IMODE((made / "reservations").stat().st_mode) == 0o700


def test_every_admission_checks_the_folder_again(tmp_path):
    """A folder that became unusable after the guard started: the admission is refused with the
    reason (not granted without a reservation)."""
    folder = tmp_path / "registry" / "reservations"
    reservations = Reservations(folder)
    reservations.check()
    admission = Admission(reservations)
    config = GuardConfig(need=1)
    readings = {"available": 10 ** 12, "total": 10 ** 12, "swap": 0}
    from stageload.guard.waiting import decide

    assert admission.admit(config, lambda held: decide(config, readings, held=held)).verdict.ok
    reservations.release()
    folder.parent.chmod(0o777)
    verdict = admission.admit(config, lambda held: decide(config, readings, held=held)).verdict
    assert not verdict.ok and "reservations cannot be used" in verdict.reason
    assert "mode 0777" in verdict.reason and reservations.mine is None
