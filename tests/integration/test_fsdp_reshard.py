"""FSDP2's resharding after the hf engine's gathered sampling (`Sharded.gathered`): the decoder layers
reshard after each training forward again, and the root module keeps its parameters (embeddings,
final norm, LM head) unsharded from forward to backward, as FSDP sets it, instead of being set to
reshard too (one more all-gather per micro-batch). Two gloo ranks on the CPU."""

from __future__ import annotations

import json
import os

import torch

from rbctl.train.distributed import init_from_env
from rbctl.train.parallel import Sharded
from tests.conftest import tiny_llama
from tests.integration.test_dist_wait import _free_port


def _rank(rank: int, world: int, port: int, out: str) -> None:
    from torch.distributed.tensor import DTensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    parallel = Sharded(init_from_env(5.0), torch.device("cpu"))
    model = tiny_llama(40)
    train = parallel.wrap(model)
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(rank))

    def sharded_between_forward_and_backward() -> dict:
        logits = train(input_ids=ids).logits
        state = {"root": isinstance(model.model.embed_tokens.weight, DTensor),
                 "layer": isinstance(model.model.layers[0].self_attn.q_proj.weight, DTensor)}
        logits.float().sum().backward()
        return state

    got = {"before": sharded_between_forward_and_backward()}
    with parallel.gathered(model):  # the hf engine's sampling (and rank 0's evaluation)
        with torch.no_grad():
            train(input_ids=ids)
    got["after"] = sharded_between_forward_and_backward()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(got, f)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def test_after_gathered_sampling_the_root_stays_unsharded_through_backward(tmp_path):
    torch.multiprocessing.spawn(_rank, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for r in (0, 1):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["before"] == {"root": False, "layer": True}  # FSDP's own setting
        assert got["after"] == got["before"]
