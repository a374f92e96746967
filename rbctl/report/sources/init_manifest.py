"""From a folder of runs to a manifest: `rbctl report --init-manifest FOLDER` writes the manifest
`rbctl.report.sources.detect` made for the folder as a YAML file for the user to edit (arms, seeds,
what each arm is, the roles, the comparisons); `folder_note` is the one line a report of the folder
says it with."""

from __future__ import annotations

from pathlib import Path

import yaml

from rbctl.config.manifest import RunsManifest
from rbctl.errors import UserError
from rbctl.report.sources.detect import detect, guess_arm, guess_units, logged_keys, run_names
from rbctl.report.sources.roles import ROLE_NAMES

ROLE_HINTS = {"heldout": "a held-out score in [0, 1] per evaluation (not a training metric)",
              "benchmark": "its benchmark's name when heldout holds no {benchmark}"}


def folder_note(path: Path, m: RunsManifest) -> str:
    """The report's line on a folder read without a manifest: what was found, how arms and seeds
    were told, and how to write the manifest the calls need."""
    entries = m.entries()
    found = detect(path)
    guessed = found is not None and guess_units(run_names(found, path)) is not None
    how = ("arms and seeds guessed from their names: " + "; ".join(
        f"{a}: seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}"
        for a, s in _seeds(m).items()) if guessed else "one arm per run, none paired (the names follow no seed pattern)")
    roles = {k: v for k, v in m.roles.model_dump().items() if k in m.roles.model_fields_set and v is not None}
    named = (f"; roles guessed from the logged names: {', '.join(f'{k} `{v}`' for k, v in roles.items())}" if roles
             else "")
    return (f"no runs manifest: {len(entries)} {m.runs_from} run{'s' if len(entries) > 1 else ''} found under {path}, "
            f"{how}{named}; for calls, `rbctl report --init-manifest {path}` writes a manifest to edit (arms, seeds, "
            "comparisons), then `rbctl report MANIFEST`")


def _seeds(m: RunsManifest) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for e in sorted(m.entries(), key=lambda e: (e.arm, e.seed)):
        out.setdefault(e.arm, []).append(e.seed)
    return out


def manifest_text(path: Path, m: RunsManifest, out: Path) -> str:
    """The manifest of the folder ``path`` as YAML with comments saying what to edit."""
    head = [f"# rbctl report {out}",
            f"# Written by `rbctl report --init-manifest {path}` from the {m.runs_from} runs found there: name each",
            "# run's arm and seed (runs of one seed are paired across arms), say what each arm is",
            "# (baseline: grpo, rloo, …; variant: base, budget, …), then state the comparisons (docs/your_runs.md)."]
    data = {"runs_from": m.runs_from, "name": m.name, "root": m.root}
    if m.names is not None:
        data["names"] = m.names
    if m.experiment is not None:
        data["experiment"] = m.experiment
    body = yaml.safe_dump(data, sort_keys=False)
    runs = "runs:\n" + "".join(f"  - {{arm: {e.arm}, seed: {e.seed}, path: {yaml.safe_dump(e.path).splitlines()[0]}}}\n"
                               for e in m.entries())
    arms = "arms:\n" + "".join(f"  {a}: {{baseline: {i['baseline']}, variant: {i['variant']}}}\n"
                               for a, i in ((a, {"baseline": "grpo", "variant": "base", **guess_arm(a)}) for a in m.arms))
    return "\n".join(head) + "\n" + body + runs + arms + _roles_text(m) + _comparisons_text(m)


def _roles_text(m: RunsManifest) -> str:
    if m.preset() != "none":
        return (f"# roles: {m.preset()}'s metric names (docs/your_runs.md, the roles and the presets); a key here "
                "replaces the preset's\n")
    try:
        keys = sorted(logged_keys(m))
    except UserError:
        keys = []
    lines = ["# roles: the metric names these runs logged for rbctl's roles (guessed where one name fitted: check",
             "# them); the first run logged:", *(f"#   {', '.join(keys[i:i + 6])}" for i in range(0, len(keys), 6)), "roles:"]
    given = m.roles.model_dump()
    for role in ("heldout", "benchmark", *ROLE_NAMES):
        value = yaml.safe_dump(given[role]).splitlines()[0] if given[role] is not None else "null"
        lines.append(f"  {role}: {value}" + (f"  # {ROLE_HINTS[role]}" if role in ROLE_HINTS else ""))
    return "\n".join(lines) + "\n"


def _comparisons_text(m: RunsManifest) -> str:
    arms = list(m.arms)
    pair = f"[[{arms[1] if len(arms) > 1 else 'ARM'}, {arms[0]}]]"
    return ("# comparisons:          # stated before the results: the report calls each pair\n"
            f"#   principal: {pair}\n"
            "#   mde: 5.0            # points of the held-out score the design must detect\n"
            "#   planning_sd: 4.0    # per-seed SD of Δ (points) the seeds were chosen for\n")


def write_init_manifest(path: Path, out: Path | None = None) -> Path:
    """Write the manifest of the folder ``path`` to ``out`` (default ``runs_<folder name>.yaml`` here);
    an existing file is refused (it may be the user's edited one)."""
    from rbctl.report.sources.detect import folder_manifest

    path = Path(path)
    if not path.is_dir():
        raise UserError(f"--init-manifest {path}: not a folder of runs")
    m = folder_manifest(path)
    out = Path(out) if out is not None else Path(f"runs_{m.name}.yaml")
    if out.exists():
        raise UserError(f"--init-manifest: {out} exists (it may hold your edits); pass -o NEW.yaml or remove it")
    out.write_text(manifest_text(path, m, out))
    return out
