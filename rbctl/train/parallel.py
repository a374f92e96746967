"""How a run's policy is spread over its processes (the launch is `rbctl.train.distributed`):

- one process: the model itself;
- data parallel (DDP, the default under `rbctl train --nproc N` / torchrun): every rank holds the
  whole model and its AdamW state; gradients are all-reduced;
- FSDP2 (`model.fsdp: true`): `torch.distributed.fsdp.fully_shard` on every decoder layer (the
  classes the model lists in `_no_split_modules`), then on the whole model. Each rank holds 1/N of
  every parameter, gradient and AdamW moment; a layer's parameters are all-gathered for its forward
  and backward and freed after; gradients are reduce-scattered after every micro-batch (averaged
  over ranks, as DDP's all-reduce: the trainer's `loss * world` undoes it in both). The KL
  reference is sharded the same way.

Under FSDP the hf engine samples from the full parameters, gathered once per `generate` and held
for its decoding steps (`gathered`): no collective per token, so ranks may decode different
lengths; periodic evaluation runs on rank 0 inside the same gather. A checkpoint holds the full
weights (`save_pretrained` on rank 0, loadable by `rbctl eval`) and the full optimizer state, both
gathered to rank 0's CPU; a resume reads them on rank 0 alone and scatters them to the shards.
What FSDP does not do yet: docs/scaling.md.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from rbctl.errors import UserError
from rbctl.rollout.base import generate_each
from rbctl.train.distributed import DistContext


class Replicated:
    """One process, or DDP: every rank holds the whole model."""

    sharded = False

    def __init__(self, dist: DistContext, device: torch.device):
        self.dist, self.device = dist, device

    def wrap(self, model):
        """What the training forward calls: the DDP wrapper when distributed, else the model."""
        if not self.dist.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def wrap_frozen(self, model):
        return model

    def gathered(self, model):
        """A context in which `model` holds its full parameters (every rank enters it together)."""
        return nullcontext()

    def engine(self, engine, model):
        return engine

    def full_state(self, model, opt) -> tuple[dict | None, dict]:
        """(weights to save, None: the model's own state dict; the optimizer state)."""
        return None, opt.state_dict()

    def load(self, model, opt, state: dict) -> None:
        """The checkpoint's optimizer state (its weights are in the model already)."""
        opt.load_state_dict(state["optimizer"])


class Sharded(Replicated):
    """FSDP2: parameters, gradients and optimizer state sharded over the ranks."""

    sharded = True

    def __init__(self, dist: DistContext, device: torch.device):
        super().__init__(dist, device)
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(device.type, (dist.world,))

    def _shard(self, model):
        from torch.distributed.fsdp import fully_shard

        layers = [m for m in model.modules() if type(m).__name__ in (getattr(model, "_no_split_modules", None) or ())]
        for layer in layers:
            fully_shard(layer, mesh=self.mesh)
        fully_shard(model, mesh=self.mesh)
        return model

    def wrap(self, model):
        return _TrainForward(self._shard(model))

    def wrap_frozen(self, model):
        return self._shard(model)

    @contextmanager
    def gathered(self, model):
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for m in units:  # all-gather every layer once; no reshard after each forward while inside
            m.unshard()
            m.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for m in units:
                m.reshard()
                # training's setting back: the layers reshard after forward; the root does not, as
                # FSDP sets it (its parameters, the embeddings and LM head, are needed again at once
                # by the backward: resharding them would add an all-gather per micro-batch)
                m.set_reshard_after_forward(m is not model, recurse=False)

    def engine(self, engine, model):
        return _GatheredEngine(engine, model, self)

    def resume(self, candidates, warn) -> tuple[int, dict | None]:
        """(step, trainer state) of the newest checkpoint that verifies as it is read, read by rank 0
        alone: its full weights and optimizer state stay there (the other ranks get empty ones, which
        `load` fills from rank 0); the rest of the state reaches every rank by broadcast."""
        from rbctl.store.checkpoint import checkpoint_weights, first_intact, load_state

        ck, state = first_intact(candidates, lambda c: {**load_state(c), "weights": checkpoint_weights(c)}, warn) \
            if self.dist.is_main else (None, None)
        step, common = self.dist.broadcast(
            (ck.step, {k: v for k, v in state.items() if k not in ("optimizer", "weights")}) if ck is not None else (0, None))
        if common is not None and not self.dist.is_main:
            state = {**common, "optimizer": {}, "weights": {}}
        return step, state

    def full_state(self, model, opt) -> tuple[dict | None, dict]:
        """Collective: the full weights (without tied aliases, as `save_pretrained` writes them) and
        the full optimizer state (keyed by parameter name) on rank 0's CPU; empty on the others."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=opts)
        for alias in _aliases(model):
            weights.pop(alias, None)
        return weights, get_optimizer_state_dict(model, opt, options=opts)

    def load(self, model, opt, state: dict) -> None:
        """Collective: rank 0's full weights and optimizer state (`state["weights"]`,
        `state["optimizer"]`; empty on the other ranks) scattered to every rank's shards."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        weights = state["weights"]
        if self.dist.is_main:
            for alias, name in _aliases(model).items():  # the tied copy the checkpoint leaves out
                weights.setdefault(alias, weights.get(name))
            missing = sorted(k for k in model.state_dict() if k not in weights)
            if missing:
                raise UserError(f"checkpoint weights miss {', '.join(missing[:3])} of the model")
        set_model_state_dict(model, weights, options=opts)
        set_optimizer_state_dict(model, opt, state["optimizer"], options=opts)


def _aliases(model) -> dict[str, str]:
    """{second name of a parameter: its first name}: tied weights (an LM head tied to the embedding)."""
    first: dict[int, str] = {}
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            out[name] = first[id(p)]
        else:
            first[id(p)] = name
    return out


class _TrainForward(torch.nn.Module):
    """What the training forward calls under FSDP: the sharded model. `no_sync()`, which the update
    enters between micro-batches for DDP, changes nothing here: gradients are reduce-scattered after
    every micro-batch and accumulate sharded, instead of whole on every rank."""

    def __init__(self, model):
        super().__init__()
        self.module = model

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def no_sync(self):
        return nullcontext()


class _GatheredEngine:
    """An engine whose `generate` runs on the full parameters (`Sharded.gathered`)."""

    def __init__(self, engine, model, parallel: Sharded):
        self._engine, self._model, self._parallel = engine, model, parallel

    def generate(self, *args, **kwargs):
        with torch.no_grad(), self._parallel.gathered(self._model):
            return self._engine.generate(*args, **kwargs)

    def generate_calls(self, calls, progress=None):
        return generate_each(self, calls, progress)  # each call gathers the parameters

    def __getattr__(self, name):
        return getattr(self._engine, name)


def parallel_for(cfg, dist: DistContext, device: torch.device, log=print) -> Replicated:
    """The strategy `model.fsdp` and the launch ask for (FSDP on one process: nothing to shard)."""
    if cfg.model.fsdp and dist.enabled:
        return Sharded(dist, device)
    if cfg.model.fsdp:
        log("model.fsdp: one process, nothing to shard (launch with rbctl train --nproc N); training unsharded")
    return Replicated(dist, device)
