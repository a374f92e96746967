"""MLflow: the runs of a tracking store, read with mlflow's own client (`mlflow.MlflowClient`): a
file store (an ``mlruns/`` folder, ``mlflow`` before 3.7's default), a database (``sqlite:///mlflow.db``,
a ``.db`` file) or a tracking server (``http://host:port``, e.g. ``mlflow server``).

Each run's metrics come from its metric history (``get_metric_history``: every logged (step, value,
timestamp)); a run is found by its run name (``mlflow.runName``) or its run id, in the manifest's
``experiment`` (by name or id) or any experiment. The file store is in maintenance mode in MLflow 3: it is
read with ``MLFLOW_ALLOW_FILE_STORE=true`` set for the read only (nothing is migrated; mlflow makes
the store's empty ``.trash/`` folder where it lacks one).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from rbctl.errors import UserError

EXTRA = "pip install 'rbctl[mlflow]'"
SCHEMES = ("http://", "https://", "file:", "sqlite:", "postgresql", "mysql", "mssql", "databricks")
DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def is_uri(root: str) -> bool:
    return str(root).startswith(SCHEMES)


def tracking_uri(root: str) -> str:
    """The tracking URI of a manifest's ``root``: a URI as given; a ``.db`` file as sqlite; a folder
    as a file store."""
    if is_uri(root):
        return str(root)
    path = Path(root).expanduser()
    if path.is_file() and path.suffix.lower() in DB_SUFFIXES:
        return f"sqlite:///{path.resolve()}"
    if path.is_dir():
        return path.resolve().as_uri()
    raise UserError(f"{root}: no MLflow tracking store (an mlruns/ folder, a .db file, or a server's http:// address)")


@contextmanager
def _file_store_allowed():
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            del os.environ["MLFLOW_ALLOW_FILE_STORE"]
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


class Store:
    """The runs of one tracking store (and experiment), found by name, each read once."""

    def __init__(self, root: str, experiment: str | None = None):
        try:
            from mlflow import MlflowClient
        except ImportError:
            raise UserError(f"reading MLflow runs needs the mlflow package: {EXTRA}") from None
        self.uri = tracking_uri(root)
        with _file_store_allowed():
            self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment = experiment
        self._runs = None
        self._read: dict[str, tuple[dict, dict]] = {}

    def _call(self, fn, *args, **kwargs):
        """A client call; the client's own errors (an unreachable server, a store it cannot read) as one line."""
        try:
            with _file_store_allowed():
                return fn(*args, **kwargs)
        except Exception as e:  # mlflow's exceptions differ by store and version
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"MLflow store {self.uri}: {first[:300]}") from None

    def experiment_ids(self) -> list[str]:
        exps = self._call(self.client.search_experiments)
        if self.experiment is None:
            return [e.experiment_id for e in exps]
        ids = [e.experiment_id for e in exps if self.experiment in (e.name, e.experiment_id)]
        if not ids:
            raise UserError(f"MLflow store {self.uri}: no experiment named {self.experiment!r} "
                            f"(experiments: {', '.join(e.name for e in exps) or 'none'})")
        return ids

    def runs(self) -> list:
        """Every run of the store's experiment(s) (MLflow's `Run` objects, all pages)."""
        if self._runs is None:
            ids, out, token = self.experiment_ids(), [], None
            while True:
                page = self._call(self.client.search_runs, ids, max_results=1000, page_token=token)
                out += list(page)
                token = page.token
                if not token:
                    break
            self._runs = out
        return self._runs

    def names(self) -> dict[str, list[str]]:
        """{run name: [run ids]}."""
        out: dict[str, list[str]] = {}
        for r in self.runs():
            out.setdefault(r.info.run_name or r.info.run_id, []).append(r.info.run_id)
        return out

    def read(self, run) -> tuple[dict[int, dict[str, float]], dict]:
        """``{step: {key: value}}`` of a run's metric histories, and its meta."""
        rid = run.info.run_id
        if rid not in self._read:
            records: dict[int, dict[str, float]] = {}
            for key in sorted(run.data.metrics):
                for m in self._call(self.client.get_metric_history, rid, key):
                    records.setdefault(int(m.step), {})[key] = float(m.value)
            end = run.info.end_time
            meta = {"name": run.info.run_name, "id": rid, "files": [f"{self.uri}#{rid}"], "max_steps": None,
                    "finished": run.info.status == "FINISHED", "status": run.info.status,
                    "ended": end / 1000 if end else None, "config": dict(run.data.params)}
            self._read[rid] = (records, meta)
        return self._read[rid]

    def find(self, name: str) -> tuple[str, dict, dict] | None:
        """(the run's address, records, meta) of the run named (or with the id) ``name``; None when absent."""
        by_id = {r.info.run_id: r for r in self.runs()}
        ids = [name] if name in by_id else self.names().get(name, [])
        if len(ids) > 1:
            raise UserError(f"MLflow store {self.uri}: {len(ids)} runs are named {name!r} (ids {', '.join(ids)}); "
                            "name each by its run id in the manifest's runs:, or set `experiment:`")
        if not ids:
            return None
        return (f"{self.uri}#{ids[0]}", *self.read(by_id[ids[0]]))
