"""The `launcher:` section of a sweep file: where `rbctl ablate --launcher submitit` runs its jobs
(rbctl.sweep.launchers)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from rbctl.config.base import Section


class LauncherCfg(Section):
    """The sweep file's `launcher:` section (submitit)."""

    cluster: Literal["auto", "slurm", "local", "debug"] = Field("auto", description="Where jobs run: auto (Slurm where srun exists, else local), slurm, local (subprocesses here), debug (in this process, in order).")
    folder: Optional[str] = Field(None, description="submitit's folder for job scripts, pickles and logs; null = SWEEP_DIR/submitit.")
    job_name: str = Field("rbctl", description="Slurm job name.")
    partition: Optional[str] = Field(None, description="Slurm partition (null = the cluster's default).")
    account: Optional[str] = Field(None, description="Slurm account.")
    qos: Optional[str] = Field(None, description="Slurm quality of service.")
    constraint: Optional[str] = Field(None, description="Slurm node constraint (e.g. a GPU type feature).")
    gpus_per_node: int = Field(1, ge=0, description="GPUs per job (one training run each).")
    cpus_per_task: int = Field(8, ge=1, description="CPU cores per job; also the run's torch threads.")
    mem_gb: Optional[int] = Field(None, ge=1, description="Memory per job in GB (null = the partition's default).")
    timeout_min: int = Field(24 * 60, ge=1, description="Wall-clock limit per job in minutes; a timed-out run is requeued and resumes.")
    max_parallel: Optional[int] = Field(None, ge=1, description="Most jobs running at once (Slurm array parallelism; enforced here for local/debug); null = no limit.")
    max_requeues: int = Field(3, ge=0, description="Requeues after a timeout or preemption before a run counts as failed.")
    setup: list[str] = Field(default_factory=list, description="Shell lines run before each job (e.g. 'module load cuda', 'source .venv/bin/activate').")
    slurm_additional: dict[str, Any] = Field(default_factory=dict, description="Extra sbatch options, e.g. {gres: 'gpu:a100:1'}.")
    poll_s: float = Field(10.0, gt=0, description="Seconds between checks of running jobs.")
