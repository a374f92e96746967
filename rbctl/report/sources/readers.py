"""One manifest's runs read through its format's adapter (`runs_from`): what each run's name in the
manifest points to, its records by step and its meta (``files``, ``max_steps``, ``ended``: when the
run last wrote, a clock time in seconds, and for trackers ``name``, ``id``, ``finished``). A tracker's
store or index is opened once per manifest."""

from __future__ import annotations

from pathlib import Path

from rbctl.config.manifest import RunEntry, RunsManifest
from rbctl.report.sources import event_files, long_table, trainer_state, verl_log


class Readers:
    """The adapter of one manifest (`records`), its store opened at the first run asked for."""

    def __init__(self, m: RunsManifest):
        self.m = m
        self._table = None
        self._wandb = None
        self._mlflow = None

    @property
    def root(self) -> Path:
        return Path(self.m.root)

    def records(self, entry: RunEntry) -> tuple[Path | str, dict, dict] | None:
        """(the run's path or address, its records by step, its meta); None when the run is not there.
        A run folder without records raises `NoRecords`."""
        m = self.m
        if m.runs_from == "table":
            return self._table_run(entry)
        if m.runs_from == "mlflow":
            return self.mlflow().find(entry.path)
        if m.runs_from == "wandb":
            found = self.wandb().find(entry.path)
            if found is not None and m.preset() == "trl":
                from rbctl.report.sources.wandb_run import renamed

                return found[0], renamed(found[1]), found[2]
            return found
        path = self.root / entry.path
        if not path.exists():
            return None
        if m.runs_from == "trl":
            return (path, *trainer_state.read(path))
        if m.runs_from == "verl":
            return (path, *verl_log.read(path))
        return (path, *event_files.read(path, trl_names=m.preset() == "trl"))

    def _table_run(self, entry: RunEntry):
        source = self.root / self.m.table
        if self._table is None:
            self._table = long_table.read_table(source)
        if entry.path not in self._table:
            return None
        return source / entry.path, self._table[entry.path], {"max_steps": None, "files": [str(source)],
                                                              "ended": source.stat().st_mtime}

    def wandb(self):
        if self._wandb is None:
            from rbctl.report.sources.wandb_run import Index

            self._wandb = Index(self.root)
        return self._wandb

    def mlflow(self):
        if self._mlflow is None:
            from rbctl.report.sources.mlflow_store import Store

            self._mlflow = Store(self.m.root, self.m.experiment)
        return self._mlflow

    def missing_text(self, entry: RunEntry) -> str:
        """Where the run was looked for, in words."""
        m = self.m
        if m.runs_from == "table":
            return f"no run {entry.path!r} in {self.root / m.table}"
        if m.runs_from == "mlflow":
            where = f"experiment {m.experiment!r} of " if m.experiment else ""
            return f"no run named {entry.path!r} in {where}{self.mlflow().uri}"
        if m.runs_from == "wandb":
            return f"no W&B run folder, export or run named {entry.path!r} under {self.root}"
        return f"{self.root / entry.path} does not exist"

    def unnamed(self, named: set[str]) -> tuple[str, str, list[str]]:
        """(where, what it is, the runs of a table or a tracker's store that no arm of the manifest
        names: by name or id)."""
        m = self.m
        if m.runs_from == "table" and self._table:
            return str(self.root / m.table), "the table's runs", sorted(set(self._table) - named)
        if m.runs_from == "mlflow" and self._mlflow is not None:
            have = self._mlflow.names()
            return self._mlflow.uri, "the store's runs", sorted(n for n, ids in have.items() if n not in named and not set(ids) & named)
        if m.runs_from == "wandb" and self._wandb is not None:
            have = self._wandb.names()
            return str(self.root), "the W&B runs", sorted(n for n, ids in have.items() if n not in named and not set(ids) & named)
        return "", "", []
