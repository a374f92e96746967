"""One writer per directory: an exclusive `flock` on a lock file that records the holder's pid and host.

The kernel releases the lock when the holder dies (SIGKILL, out of memory, a lost node on NFS with
locking), so a lock file left behind with a pid in it is stale and is taken over with a warning. On
a filesystem without `flock` (Lustre mounted without `-o flock`) the recorded pid decides: alive on
this host means in use.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from rbctl.errors import UserError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirLock:
    """`with DirLock(dir, what="rbctl train"):` holds `dir/.lock` for the block; a second holder is
    refused with a UserError naming the first one's pid and host."""

    def __init__(self, directory: Path, what: str, log=print, name: str = ".lock"):
        self.path = Path(directory) / name
        self.what, self.log = what, log
        self.f = None

    def _holder(self) -> dict:
        self.f.seek(0)
        try:
            return json.loads(self.f.read() or "{}")
        except json.JSONDecodeError:
            return {}

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        host = socket.gethostname()
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except BlockingIOError:
            h = self._holder()
            self.f.close()
            raise UserError(f"{self.path.parent} is in use by another {self.what} (pid {h.get('pid', '?')} on host "
                            f"{h.get('host', '?')}); wait for it to end or stop it") from None
        except OSError as e:  # no flock on this filesystem: fall back on the recorded pid
            if e.errno not in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL):
                raise
            locked = False
        old = self._holder()
        if old.get("pid") and old.get("pid") != os.getpid():
            if not locked and old.get("host") == host and _alive(int(old["pid"])):
                self.f.close()
                raise UserError(f"{self.path.parent} is in use by another {self.what} (pid {old['pid']} on host "
                                f"{host})")
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
