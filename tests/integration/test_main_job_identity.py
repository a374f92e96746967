"""A run of each main-job arm writes the files it wrote when the fingerprint was recorded: every
number of its logs, samples, evaluations and checkpoints (times and provenance aside), by
`scripts/main_job_fingerprint.py`. A refactor of the loop, the trainer or the sweep that changes
any of them fails here; a change meant to change the runs records a new fingerprint with
`python -m scripts.main_job_fingerprint --write` (and says why in its commit). The file holds one
fingerprint per kind of CPU (float arithmetic differs between them); the test reads this machine's."""

from __future__ import annotations

import json

import pytest

from scripts import main_job_fingerprint as fp


@pytest.mark.slow
def test_each_main_job_arm_writes_the_recorded_files(rbctl_cache, tmp_path):
    recorded = json.loads(fp.REFERENCE.read_text())
    files = fp.recorded_files(recorded, fp.machine())
    if files is None:
        pytest.skip(f"no fingerprint recorded for {fp.machine()} (only for "
                    f"{[m['machine'] for m in recorded['machines']]}): float arithmetic may differ; record one "
                    "here with python -m scripts.main_job_fingerprint --add")
    assert (recorded["arms"], recorded["overrides"]) == (fp.ARMS, fp.OVERRIDES)
    now = fp.fingerprint(fp.run_main_job_arms(tmp_path / "sweep"))
    assert fp.differences(files, now) == []
    assert len(now) == 91  # 3 runs × 29 files (2 checkpoints of 9, 4 evaluations of 2, 5 logs) + 4 of the sweep


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_fingerprint_sees_a_changed_number_and_ignores_times_and_paths(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, t, value in ((a, 0.5, 0.25), (b, 9.0, 0.25)):
        _write(d / "runs" / "m.jsonl", json.dumps({"step": 1, "reward/mean": value, "time/step_s": t}) + "\n")
        _write(d / "s.json", json.dumps({"model": str(d / "ck"), "time_s": t, "protocol": {"max_batch_tokens": t}}))
        _write(d / "provenance.json", json.dumps({"host": str(t)}))
    assert fp.fingerprint(a) == fp.fingerprint(b)  # times, the sweep's own path and provenance aside
    assert set(fp.fingerprint(a)) == {"runs/m.jsonl", "s.json"}
    _write(b / "runs" / "m.jsonl", json.dumps({"step": 1, "reward/mean": 0.25000001, "time/step_s": 1.0}) + "\n")
    assert fp.differences(fp.fingerprint(a), fp.fingerprint(b)) == ["differs: runs/m.jsonl"]
    _write(b / "runs" / "m.jsonl", json.dumps({"step": 1, "time/step_s": 1.0, "reward/mean": 0.25}) + "\n")
    assert fp.differences(fp.fingerprint(a), fp.fingerprint(b)) == ["differs: runs/m.jsonl"]  # the keys' order counts
    _write(b / "x.yaml", "a: 1\n")
    (a / "s.json").unlink()
    assert fp.differences(fp.fingerprint(b), fp.fingerprint(a)) == [
        "differs: runs/m.jsonl", "missing now: s.json", "missing now: x.yaml"]


def test_the_fixture_keeps_one_fingerprint_per_machine_and_write_keeps_this_ones_alone():
    avx2 = {"torch": "2.13.0+cpu", "cpu_capability": "AVX2", "cpu_vendor": "AuthenticAMD"}
    avx512 = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "cpu_vendor": "GenuineIntel"}
    first = fp.with_fingerprint(None, avx512, {"a": "1"}, keep_others=True)
    both = fp.with_fingerprint(first, avx2, {"a": "2"}, keep_others=True)  # --add
    assert (fp.recorded_files(both, avx512), fp.recorded_files(both, avx2)) == ({"a": "1"}, {"a": "2"})
    again = fp.with_fingerprint(both, avx2, {"a": "3"}, keep_others=True)  # --add on a recorded machine replaces it
    assert [m["files"] for m in again["machines"]] == [{"a": "1"}, {"a": "3"}]
    alone = fp.with_fingerprint(both, avx2, {"a": "4"}, keep_others=False)  # --write: the runs changed
    assert (fp.recorded_files(alone, avx512), fp.recorded_files(alone, avx2)) == (None, {"a": "4"})
    other_run = {**both, "overrides": ["steps=2"]}  # made with other overrides: stale whatever the flag
    assert fp.recorded_files(fp.with_fingerprint(other_run, avx2, {"a": "5"}, keep_others=True), avx512) is None


def test_the_recorded_fixture_has_one_fingerprint_per_machine_of_the_run_it_names():
    recorded = json.loads(fp.REFERENCE.read_text())
    assert (recorded["arms"], recorded["overrides"]) == (fp.ARMS, fp.OVERRIDES)
    machines = [m["machine"] for m in recorded["machines"]]
    assert machines and len({json.dumps(m, sort_keys=True) for m in machines}) == len(machines)
    assert all(len(m["files"]) == 91 for m in recorded["machines"])
