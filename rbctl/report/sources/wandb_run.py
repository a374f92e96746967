"""Weights & Biases: a run folder the wandb SDK wrote (``wandb/run-<date>-<id>/`` online,
``wandb/offline-run-<date>-<id>/`` offline), or a history export from W&B's API.

A run folder's records are in its transaction log ``run-<id>.wandb`` (LevelDB-framed protocol
buffers). It is read by the SDK's own reader, the ``wandb-core`` binary of the installed wandb
package (``wandb leet inspect --json``: one JSON object per record), with no login and no network:
its ``run`` record gives the run's name, id, group and config, each ``history`` record a step
(``_step``) and the values logged at it (the SDK flattens nested dicts as ``a.b``; NaN and the
infinities arrive as text; a value logged as None is null: undefined at that step), the ``exit``
record says the run ended. Folders of one run id (a resumed run) are read oldest first, a later
value of a step replacing an earlier one.

A history export is a file of one run written from the API: ``run.history()`` saved as CSV (a
``_step`` column and one column per key, empty where a key was not logged at that step) or as JSON
(``orient="records"``: a list of objects; or JSON lines, e.g. ``run.scan_history()``'s rows, where
null means not logged at that step).

transformers' `WandbCallback` renames what TRL logs as its `TensorBoardCallback` does
(``train/x``, ``eval/x``): with TRL's names (`trl_names`) that renaming is undone.
"""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.event_files import trl_name
from rbctl.report.sources.safe_read import (NoRecords, as_step, numbers, read_csv_rows, read_json_file,
                                            read_json_lines, refuse_pickle)

EXTRA = "pip install 'rbctl[wandb]'"
LOG = "*.wandb"
EXPORTS = (".csv", ".json", ".jsonl")
STEP = "_step"
TIMESTAMP = "_timestamp"


def is_run_folder(path: Path) -> bool:
    return Path(path).is_dir() and any(Path(path).glob(LOG))


def run_folders(root: Path) -> list[Path]:
    """The W&B run folders at or below ``root`` (a run folder, a ``wandb/`` folder or any folder above)."""
    root = Path(root)
    if is_run_folder(root):
        return [root]
    return sorted({f.parent for f in root.rglob(LOG) if f.is_file()})


def _core() -> str:
    try:
        import wandb  # noqa: F401  (the package first: its submodules may be cached without it)
        from wandb.util import get_core_path
    except ImportError:
        raise UserError(f"reading W&B run folders needs the wandb package: {EXTRA}") from None
    try:
        return get_core_path()
    except Exception as e:  # the SDK's own error when its wandb-core binary is absent
        raise UserError(f"the wandb package has no wandb-core binary to read run folders with ({e}); {EXTRA}") from None


def transaction_log(path: Path) -> list[dict]:
    """Every record of a ``.wandb`` file as the SDK's reader prints it (one JSON object per record);
    read once per version of the file (a report asks for a run's records more than once)."""
    path = refuse_pickle(Path(path))
    st = path.stat()
    return _read_log(str(path.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _read_log(path: str, mtime_ns: int, size: int) -> list[dict]:
    path = Path(path)
    cmd = [_core(), "leet", "inspect", "--no-observability", "--json", "--run-file", str(path.resolve()),
           str(path.resolve().parent)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("Error: ")
        if "not defined" in why or "unknown command" in why.lower():  # an SDK without `leet inspect --json`
            raise UserError(f"the installed wandb cannot print a run's records (`wandb leet inspect --json`: {why}); "
                            f"{EXTRA.replace('pip install', 'pip install -U')}")
        raise UserError(f"{path}: not a readable W&B transaction log ({why})")
    out = []
    for i, line in enumerate(proc.stdout.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise UserError(f"{path}: record {i} from wandb's reader is not JSON ({e.msg})") from None
    return out


def read_folder(folder: Path) -> tuple[dict[int, dict[str, float]], dict]:
    """One run folder: ``{step: {name: value}}`` and its meta (``name``, ``id``, ``group``,
    ``config``, ``finished``, ``ended``, ``files``)."""
    logs = sorted(Path(folder).glob(LOG))
    if not logs:
        raise NoRecords(f"{folder}: no W&B transaction log ({LOG})")
    records: dict[int, dict[str, float]] = {}
    meta = {"name": None, "id": None, "group": None, "config": {}, "finished": False, "ended": None,
            "files": [str(f) for f in logs], "max_steps": None}
    for f in logs:
        for rec in transaction_log(f):
            kind = rec.get("type")
            if kind == "run":
                _run_meta(rec.get("run") or {}, meta)
            elif kind == "history":
                _history(rec.get("history") or {}, records, meta, f)
            elif kind == "exit":
                meta["finished"] = True
    return records, meta


def _run_meta(run: dict, meta: dict) -> None:
    meta["name"] = run.get("display_name") or meta["name"]
    meta["id"] = run.get("run_id") or meta["id"]
    meta["group"] = run.get("run_group") or meta["group"]
    update = (run.get("config") or {}).get("update") or {}
    meta["config"].update({k: v for k, v in update.items() if not k.startswith("_")})


def _history(h: dict, records: dict, meta: dict, f: Path) -> None:
    item = h.get("item") or {}
    step = item.get(STEP, (h.get("step") or {}).get("num"))
    if step is None:
        raise UserError(f"{f}: a history record without a step")
    t = item.get(TIMESTAMP)
    if isinstance(t, (int, float)):
        meta["ended"] = max(meta["ended"] or 0.0, float(t))
    values = {k: v for k, v in numbers(item, null=True).items() if not k.startswith("_")}
    records.setdefault(as_step(step, f, 0), {}).update(values)


def read_export(path: Path) -> tuple[dict[int, dict[str, float]], dict]:
    """A history export of one run (module docstring): ``{step: {name: value}}`` and its meta."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        rows = read_csv_rows(path)
    elif path.suffix.lower() == ".jsonl":
        rows = read_json_lines(path)
    else:
        data = read_json_file(path)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise UserError(f"{path}: expected a JSON list of history rows (pandas' orient=\"records\")")
        rows = list(enumerate(data, 1))
    records: dict[int, dict[str, float]] = {}
    ended = None
    for line, row in rows:
        if row.get(STEP) in (None, ""):
            raise UserError(f"{path} line {line}: no {STEP} (a W&B history export has one per row)")
        values = _floats({k: v for k, v in row.items() if v not in (None, "")})
        if isinstance(values.get(TIMESTAMP), (int, float)):
            ended = max(ended or 0.0, float(values[TIMESTAMP]))
        records.setdefault(as_step(row[STEP], path, line), {}).update(
            {k: v for k, v in numbers(values).items() if k and not k.startswith("_")})
    return records, {"files": [str(path)], "max_steps": None, "ended": ended or path.stat().st_mtime,
                     "name": path.stem, "finished": True}


def _floats(row: dict) -> dict:
    """A CSV row's cells as numbers where they are numbers (text columns of an export are skipped)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                continue
        out[k] = v
    return out


def renamed(records: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """The records under the names TRL logged (`trl_name`: transformers' WandbCallback renamed them)."""
    return {s: {trl_name(k): v for k, v in vals.items()} for s, vals in records.items()}


class Index:
    """The W&B runs below a root, found by the name the manifest gives: the run's display name, its
    run id, or its folder's path relative to the root; read once each."""

    def __init__(self, root: Path):
        _core()  # the reader first: without the wandb package, one line naming its extra
        self.root = Path(root)
        self._read: dict[str, tuple[dict, dict]] = {}
        self.by_id: dict[str, list[Path]] = {}
        for folder in run_folders(self.root):
            rid = folder.name.rsplit("-", 1)[-1]
            self.by_id.setdefault(rid, []).append(folder)

    def run(self, rid: str) -> tuple[dict, dict]:
        """The records and meta of run ``rid``, its folders merged oldest first (a resumed run)."""
        if rid not in self._read:
            records, meta = {}, None
            for folder in sorted(self.by_id[rid]):
                r, m = read_folder(folder)
                for step, vals in r.items():
                    records.setdefault(step, {}).update(vals)
                if meta is None:
                    meta = m
                else:
                    meta.update(finished=m["finished"], ended=m["ended"] or meta["ended"], files=meta["files"] + m["files"])
            self._read[rid] = (records, meta)
        return self._read[rid]

    def names(self) -> dict[str, list[str]]:
        """{display name: [run ids]} of every run."""
        out: dict[str, list[str]] = {}
        for rid in sorted(self.by_id):
            out.setdefault(self.run(rid)[1]["name"] or rid, []).append(rid)
        return out

    def find(self, name: str) -> tuple[Path, dict, dict] | None:
        """(the run's path, records, meta) of the run the manifest names ``name``; None when absent."""
        path = self.root / name
        if path.is_file() and path.suffix.lower() in EXPORTS:
            return (path, *read_export(path))
        if is_run_folder(path):
            rid = path.name.rsplit("-", 1)[-1]
            return (path, *self.run(rid)) if rid in self.by_id else (path, *read_folder(path))
        if name in self.by_id:
            return (self.by_id[name][0], *self.run(name))
        ids = self.names().get(name, [])
        if len(ids) > 1:
            raise UserError(f"{self.root}: {len(ids)} W&B runs are named {name!r} (ids {', '.join(ids)}); name each "
                            "by its run id in the manifest's runs:")
        return (self.by_id[ids[0]][0], *self.run(ids[0])) if ids else None
