"""A run's provenance records whether its checkout was dirty (rbctl.train.run_setup.git_state, on a
temporary git repository), and a document says "one commit" only when every run records the same
clean commit (rbctl.report.provenance.code_text)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from importlib import metadata

import pytest

from rbctl.report.provenance import code_text

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    for k, v in (("user.email", "t@example.com"), ("user.name", "t"), ("commit.gpgsign", "false")):
        _git(tmp_path, "config", k, v)
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_clean_tree_an_untracked_file_and_a_dirty_tree(repo):
    from rbctl.train.run_setup import git_state

    head = _git(repo, "rev-parse", "HEAD").decode().strip()
    assert git_state(repo) == {"git_commit": head, "git_dirty": False, "git_diff_sha256": None}
    (repo / "notes.txt").write_text("untracked\n")  # not a tracked file: the tree is still clean
    assert git_state(repo)["git_dirty"] is False
    (repo / "a.py").write_text("x = 2\n")
    state = git_state(repo)
    diff = _git(repo, "diff", "HEAD", "--binary")
    assert b"-x = 1\n+x = 2\n" in diff
    assert state == {"git_commit": head, "git_dirty": True, "git_diff_sha256": hashlib.sha256(diff).hexdigest()}
    (repo / "a.py").write_text("x = 3\n")  # another uncommitted change: another hash
    assert git_state(repo)["git_diff_sha256"] not in (None, state["git_diff_sha256"])


def test_outside_a_checkout_everything_is_unknown(tmp_path):
    from rbctl.train.run_setup import git_state

    assert git_state(tmp_path / "nowhere") == {"git_commit": None, "git_dirty": None, "git_diff_sha256": None}


def test_the_run_header_records_the_state_and_the_package_versions(repo):
    import torch

    from rbctl.config.train import TrainConfig
    from rbctl.train.run_setup import provenance
    from tests.conftest import TINY_TRAIN

    (repo / "a.py").write_text("x = 2\n")
    prov = provenance(TrainConfig.model_validate(TINY_TRAIN), torch.device("cpu"), root=repo)
    assert prov["git_dirty"] is True and prov["git_diff_sha256"] is not None and prov["seed"] == 0
    assert prov["packages"]["torch"] == metadata.version("torch") and prov["packages"]["numpy"] == metadata.version("numpy")
    assert "vllm" not in prov["packages"] or prov["packages"]["vllm"] == metadata.version("vllm")
    # the document's line over such a run and a clean one at the same commit
    clean = {**prov, "git_dirty": False, "git_diff_sha256": None}
    assert code_text([prov, clean]) == (f"commit `{prov['git_commit'][:7]}` (1 of 2 runs from a dirty tree, "
                                        "1 distinct uncommitted diff)")


def test_one_commit_only_when_every_run_records_the_same_clean_commit():
    clean = {"git_commit": "abc1234def", "git_dirty": False}
    assert code_text([clean, clean]) == "one commit `abc1234` (every run from a clean tree)"
    old = {"git_commit": "abc1234def"}  # a run made before rbctl recorded the flag
    assert code_text([clean, old]) == "commit `abc1234` (1 of 2 runs record no dirty flag: unknown)"
    other = {"git_commit": "9999999aaa", "git_dirty": False}
    assert code_text([clean, other]) == "2 commits `9999999`, `abc1234` (every run from a clean tree)"
    d1, d2 = ({"git_commit": "abc1234def", "git_dirty": True, "git_diff_sha256": h} for h in ("h1", "h2"))
    assert code_text([d1, d2, {}]) == ("commit `abc1234` (2 of 3 runs from a dirty tree, 2 distinct uncommitted "
                                       "diffs; 1 of 3 runs record no commit)")
    assert code_text([{}, {}]) == "unknown (no run of 2 records a commit)" and code_text([]) == "unknown (no runs)"
