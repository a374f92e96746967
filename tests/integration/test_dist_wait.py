"""How long ranks wait for each other (`rbctl.train.distributed`): the training group's collectives
time out after `dist_timeout_min`, while a rank waiting for rank 0's evaluation (`DistContext.barrier`)
waits as long as it takes. Two gloo ranks on the CPU, with a 1.8-second timeout and rank 0 busy for 4."""

from __future__ import annotations

import json
import os
import socket
import time

import torch

from rbctl.train.distributed import init_from_env

TIMEOUT_MIN = 0.03  # 1.8 s
BUSY_S = 4.0  # more than twice the timeout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    ctx = init_from_env(TIMEOUT_MIN)
    got = {}
    # rank 0 "evaluates" for twice the timeout while rank 1 waits at the barrier: no failure
    if rank == 0:
        time.sleep(BUSY_S)
    ctx.barrier()
    got["after_evaluation"] = ctx.sum(1.0)[0]
    # a training collective that rank 0 keeps waiting for twice the timeout fails on rank 1
    if rank == 0:
        time.sleep(BUSY_S)
    t = time.monotonic()
    try:
        ctx.sum(1.0)
        got["late_collective"] = "completed"
    except RuntimeError:
        got["late_collective"] = "timed out"
    got["waited_s"] = time.monotonic() - t
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(got, f)
    # gloo's threads of a timed-out collective abort the interpreter's teardown ("terminate called
    # without an active exception"): leave without it, the result written
    os._exit(0)


def test_the_timeout_bounds_collectives_but_not_the_wait_for_rank_0(tmp_path):
    torch.multiprocessing.spawn(_rank, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["after_evaluation"] == r1["after_evaluation"] == 2.0  # both ranks went on after the wait
    # rank 1 gave up on the late collective after about the timeout (1.8 s), well before rank 0 came (4 s)
    assert r1["late_collective"] == "timed out" and 1.2 < r1["waited_s"] < 3.7
