"""Writing the files of run and sweep directories that are not logs or checkpoints: the run's header
(provenance.json), run.json, an evaluation's protocol.json, the resolved sweep (sweep.yaml), the sweep's state (state.json), the
ceiling file and a failed run's traceback. Every write is atomic (`rbctl.store.atomic`); the headers
carry the layout's `format_version` (`rbctl.store.rundir.FORMAT_VERSION`).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rbctl.store.atomic import write_atomic
from rbctl.store.rundir import (CEILING, ERROR_LOG, FORMAT_VERSION, PROTOCOL_FILE, PROVENANCE, RUN_META, SWEEP_FILE,
                                SWEEP_STATE)


def versioned(data: dict) -> dict:
    """`data` headed by the layout's format version."""
    return {"format_version": FORMAT_VERSION, **{k: v for k, v in data.items() if k != "format_version"}}


def write_provenance(run_dir: Path, provenance: dict) -> None:
    """The run's header, written when it starts: versions, git commit, device, seed."""
    write_atomic(Path(run_dir) / PROVENANCE, json.dumps(versioned(provenance), indent=2))


def write_run_meta(run_dir: Path, meta: dict) -> None:
    """run.json of a sweep's run: arm, seed, sweep, baseline, variant (warm start)."""
    write_atomic(Path(run_dir) / RUN_META, json.dumps(versioned(meta), indent=2))


def write_protocol(folder: Path, record: dict) -> None:
    """protocol.json of an evaluation's protocol folder (read back by `rbctl.store.read.read_protocol`)."""
    write_atomic(Path(folder) / PROTOCOL_FILE, json.dumps(versioned(record), indent=2, ensure_ascii=False) + "\n")


def write_error(run_dir: Path, traceback: str) -> None:
    """A failed sweep run's traceback, beside its logs."""
    write_atomic(Path(run_dir) / ERROR_LOG, traceback)


def write_sweep_file(sweep_dir: Path, resolved: dict) -> None:
    """sweep.yaml: the resolved sweep, ``{"format_version", "sweep": the sweep file, "configs": arm -> config}``."""
    write_atomic(Path(sweep_dir) / SWEEP_FILE, yaml.safe_dump(versioned(resolved), sort_keys=False))


def write_sweep_state(sweep_dir: Path, state: dict) -> None:
    """state.json: ``{"runs": {key: {"status", "error"}}}`` (read back by `rbctl.store.read.read_sweep_state`),
    with a sequential design's ``design`` and ``looks`` (`rbctl.store.read.read_sweep_looks`)."""
    write_atomic(Path(sweep_dir) / SWEEP_STATE, json.dumps(state, indent=2), kind="sweep_state")


def write_ceiling(sweep_dir: Path, ceiling: dict) -> None:
    """ceiling.json: ``{"value", "source"}``, what the report's plateau test reads."""
    write_atomic(Path(sweep_dir) / CEILING, json.dumps(ceiling, indent=2))
