"""rbctl's one file lock: an exclusive `flock` on a lock file that records the holder's pid and host.
It guards a run directory (`rbctl train`, RUN_DIR/.lock), a sweep directory (`rbctl ablate`,
SWEEP/.ablate.lock) and the built-in policy's warm-start cache (parallel sweep workers wait for one
warm start).

The kernel releases the lock when the holder dies (SIGKILL, out of memory, a lost node on NFS with
locking), so a lock file left behind with a pid in it is stale and is taken over with a warning. On
a filesystem without `flock` (Lustre mounted without `-o flock`) the recorded pid decides: alive on
this host means in use.

Not the `filelock` package: its Unix lock opens the file with O_TRUNC (filelock 3.x), so a
contender would erase the holder's record that the refusal message and the stale-lock warning name.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from rbctl.errors import UserError
from rbctl.store.rundir import LOCK

NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL)
POLL_S = 0.5  # how often a waiting holder re-checks a lock on a filesystem without flock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirLock:
    """`with DirLock(dir, what="rbctl train"):` holds `dir/<name>` for the block. A second holder is
    refused with a UserError naming the first one's pid and host, or, with `wait=True`, blocks until
    the first one releases it (or dies)."""

    def __init__(self, directory: Path, what: str, log=print, name: str = LOCK, wait: bool = False):
        self.path = Path(directory) / name
        self.what, self.log, self.wait = what, log, wait
        self.f = None

    def _holder(self) -> dict:
        self.f.seek(0)
        try:
            return json.loads(self.f.read() or "{}")
        except json.JSONDecodeError:
            return {}

    def _refuse(self, holder: dict) -> UserError:
        self.f.close()
        return UserError(f"{self.path.parent} is in use by another {self.what} (pid {holder.get('pid', '?')} on host "
                         f"{holder.get('host', '?')}); wait for it to end or stop it")

    def _flock(self) -> bool:
        """Take the flock (blocking when waiting); False where the filesystem has none."""
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            raise self._refuse(self._holder()) from None
        except OSError as e:
            if e.errno not in NO_FLOCK:
                raise
            return False

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        host = socket.gethostname()
        locked = self._flock()
        old = self._holder()
        while not locked and old.get("pid") and old.get("pid") != os.getpid() and old.get("host") == host \
                and _alive(int(old["pid"])):  # no flock: a live holder on this host has it
            if not self.wait:
                raise self._refuse(old)
            time.sleep(POLL_S)
            old = self._holder()
        if old.get("pid") and old.get("pid") != os.getpid():
            self.log(f"warning: taking over the stale lock {self.path} of pid {old['pid']} on host "
                     f"{old.get('host', '?')} (no longer running)")
        self.f.seek(0)
        self.f.truncate()
        self.f.write(json.dumps({"pid": os.getpid(), "host": host}))
        self.f.flush()
        return self

    def __exit__(self, *exc):
        if self.f is None or self.f.closed:
            return
        try:
            self.f.seek(0)
            self.f.truncate()  # released cleanly: the next holder sees no stale lock
            self.f.flush()
        except OSError:
            pass
        try:
            fcntl.flock(self.f, fcntl.LOCK_UN)
        except OSError:
            pass
        self.f.close()
