"""rbctl's one file lock (rbctl.store.lock.DirLock), as the run directory, the sweep directory and
the warm-start cache use it: a second holder is refused naming the first, or waits for it; a lock
left by a dead holder is taken over with a warning; a filesystem without flock falls back on the
recorded pid. (The two-writer and stale-lock behaviour of `rbctl train` itself: tests/system/test_faults.py.)"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from rbctl.errors import UserError
from rbctl.store import lock as lockmod
from rbctl.store.lock import DirLock

HOST = socket.gethostname()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_host(tmp_path):
    with DirLock(tmp_path, "rbctl train"):
        assert json.loads((tmp_path / ".lock").read_text()) == {"pid": os.getpid(), "host": HOST}
        with pytest.raises(UserError, match=f"^{tmp_path} is in use by another rbctl train "
                                            f"\\(pid {os.getpid()} on host {HOST}\\)"):
            with DirLock(tmp_path, "rbctl train"):
                pass
        assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()  # the refused one wrote nothing
    assert (tmp_path / ".lock").read_text() == ""  # released cleanly
    with DirLock(tmp_path, "rbctl train"):  # free again
        pass


def test_a_lock_left_by_a_dead_holder_is_taken_over_with_a_warning(tmp_path):
    pid = _dead_pid()
    (tmp_path / ".ablate.lock").write_text(json.dumps({"pid": pid, "host": HOST}))
    said = []
    with DirLock(tmp_path, "rbctl ablate", log=said.append, name=".ablate.lock"):
        pass
    assert said == [f"warning: taking over the stale lock {tmp_path / '.ablate.lock'} of pid {pid} on host {HOST} "
                    "(no longer running)"]


def test_a_waiting_holder_gets_the_lock_when_the_first_releases_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom rbctl.store.lock import DirLock\n"
                               "with DirLock(sys.argv[1], 'x', name='c.lock'):\n    print('in', flush=True)\n"
                               "    time.sleep(2.0)\n", str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert holder.stdout.readline() == "in\n"
    with pytest.raises(UserError, match=f"pid {holder.pid}"):
        with DirLock(tmp_path, "x", name="c.lock"):
            pass
    t0 = time.monotonic()
    said = []
    with DirLock(tmp_path, "x", name="c.lock", wait=True, log=said.append):
        waited = time.monotonic() - t0
    holder.wait()
    assert waited > 0.5 and said == []  # it waited for the holder (2 s); a clean release leaves no stale record


def test_without_flock_the_recorded_pid_decides(tmp_path, monkeypatch):
    def no_flock(f, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(lockmod.fcntl, "flock", no_flock)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    (tmp_path / ".lock").write_text(json.dumps({"pid": sleeper.pid, "host": HOST}))
    with pytest.raises(UserError, match=f"pid {sleeper.pid} on host {HOST}"):
        with DirLock(tmp_path, "rbctl train"):
            pass
    monkeypatch.setattr(lockmod, "POLL_S", 0.05)
    threading.Thread(target=sleeper.wait).start()  # reap it when it ends: a zombie still answers kill(pid, 0)
    said = []
    with DirLock(tmp_path, "rbctl train", wait=True, log=said.append):  # waits for the sleeper to end
        assert sleeper.returncode is not None
    assert said and "taking over the stale lock" in said[0]  # it died holding the record
    other = {"pid": 1, "host": HOST + "-elsewhere"}  # a pid on another host cannot be checked: taken over
    (tmp_path / ".lock").write_text(json.dumps(other))
    with DirLock(tmp_path, "rbctl train", log=said.append):
        pass
    assert f"of pid 1 on host {HOST}-elsewhere" in said[-1]


@dataclass
class _Spec:
    seed: int = 0
    steps: int = 1


def test_parallel_warm_starts_build_the_cache_once(tmp_path, monkeypatch):
    from rbctl.tasks import tiny

    monkeypatch.setenv("RBCTL_CACHE", str(tmp_path))
    built = []

    class _Saved:
        def save_pretrained(self, d):
            os.makedirs(d, exist_ok=True)
            for name in ("config.json", "model.safetensors"):
                with open(os.path.join(d, name), "w") as f:
                    f.write("{}")

    def train():
        built.append(threading.get_ident())
        time.sleep(0.3)  # long enough for the other thread to reach the lock
        return _Saved(), _Saved()

    paths = []
    threads = [threading.Thread(target=lambda: paths.append(tiny.warm_started("k", _Spec(), _Spec(), train, log=lambda *a: None)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(set(paths)) == 1 and (paths[0] / "config.json").exists()
