"""A step's rollout groups (`Groups`), the same as training tensors (`RolloutBatch`), and the forward
pass that scores their responses.

On CPU every forward pass over the batch (policy, reference, κ_eff) runs each prompt once for its
G rollouts and continues the G responses from its KV cache (`response_logits`): the same log-probs,
up to float rounding, for about half the work on short-answer tasks. A built-in policy's rows run
packed besides (`packed_response_logits`): no padding token is computed on.
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass, field

import numpy as np
import torch

from rbctl.errors import UserError

from rbctl.rollout.base import Sample
from rbctl.rollout.gqa import kv_heads_once
from rbctl.rollout.kvcache import forward_with_cache, new_cache, position_ids, prefix_cache_supported
from rbctl.rollout.logprobs import engine_logprobs_tensor
from rbctl.train import seeds


@dataclass
class Groups:
    """A step's rollout groups: P prompts' ids, samples and correctness, and what it cost."""

    idx: list[int]
    samples: list[list[Sample]] = field(default_factory=list)  # [P][G]
    correct: torch.Tensor | None = None  # [P, G] bool
    grader_failures: int = 0
    grader_unevaluated: int = 0  # answers that were a computation left undone (scored wrong)
    generated: int = 0  # rollouts sampled this step (all rounds)
    rounds: int = 1  # rounds sampled (1 = no resampling)
    topped_up: int = 0  # filtered-out groups put back to fill P


@dataclass
class RolloutBatch:
    """N = P·G sequences, prompt-major (prompt p's rollouts are rows p·G … p·G+G−1)."""

    input_ids: torch.Tensor  # [N, Lp + Lr] left-padded prompt, then right-padded response
    attention_mask: torch.Tensor  # [N, Lp + Lr]
    response_ids: torch.Tensor  # [N, Lr]
    response_mask: torch.Tensor  # [N, Lr] 1 on response tokens up to and including EOS
    prompt_width: int  # Lp
    rewards: torch.Tensor  # [P, G]
    correct: torch.Tensor  # [P, G] bool
    advantages: torch.Tensor  # [P, G]
    engine_logp: torch.Tensor | None = None  # [N, Lr] the rollout engine's log-probs (vLLM), if any
    step: int = 0  # the training step the rollouts were sampled for (seeds a policy loss's random choice)
    shaped_rewards: torch.Tensor | None = None  # [P, G] the rewards the estimator saw (a reward transform), if shaped
    groups: Groups | None = None  # the prompts and samples the rows hold, and what they cost (rounds, generated)

    @property
    def n(self) -> int:
        return self.input_ids.shape[0]


def build_batch(prompts: list[list[int]], samples: list[list[Sample]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Token tensors for the training forward pass from prompts and their samples."""
    rows = [(prompts[p], s.token_ids) for p, group in enumerate(samples) for s in group]
    lp = max(len(p) for p, _ in rows)
    lr = max(1, max(len(r) for _, r in rows))
    # Padded rows are built as Python lists and converted once (one torch.tensor call per field).
    ids = torch.tensor([[pad_id] * (lp - len(p)) + p + r + [pad_id] * (lr - len(r)) for p, r in rows], dtype=torch.long)
    attn = torch.tensor([[0] * (lp - len(p)) + [1] * (len(p) + len(r)) + [0] * (lr - len(r)) for p, r in rows],
                        dtype=torch.long)
    resp = ids[:, lp:].clone()  # [n, Lr]: the response, pad_id after it
    rmask = attn[:, lp:].to(torch.float32)  # 1 on response tokens
    return ids, attn, resp, rmask, lp


def make_batch(prompts: list[list[int]], samples: list[list[Sample]], pad_id: int, **fields) -> RolloutBatch:
    """The training batch of prompts and their samples; `fields` are RolloutBatch's other fields.
    The engine's sampled-token log-probs come along where the engine recorded them."""
    ids, attn, resp, rmask, lp = build_batch(prompts, samples, pad_id)
    engine_logp = None
    if samples and samples[0] and samples[0][0].logprobs is not None:
        engine_logp = engine_logprobs_tensor(samples, resp.shape[1])
    return RolloutBatch(ids, attn, resp, rmask, lp, engine_logp=engine_logp, **fields)


def micro_slices(n: int, size: int) -> list[slice]:
    """Contiguous slices of `size` rows covering n rows (one slice of all when size is 0)."""
    size = size or n
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def mini_batch_rows(n_prompts: int, group_size: int, m: int, micro_batch_size: int,
                    seed: tuple[int, ...]) -> list[list]:
    """The optimizer steps of one epoch over a batch of `n_prompts` groups (prompt-major rows):
    `m` mini-batches of whole groups, each a list of micro-batches of at most `micro_batch_size`
    rows. m = 1 is the whole batch in order, as contiguous slices; m > 1 deals the groups out by a
    permutation seeded by `seed` = (run seed, step, epoch), each mini-batch's groups in row order,
    its micro-batches as row-index tensors (docs/method.md, "Mini-batch updates")."""
    if m == 1:
        return [micro_slices(n_prompts * group_size, micro_batch_size)]
    if n_prompts % m:
        raise UserError(f"algo.ppo_mini_batch_size: this process holds {n_prompts} prompts, which do not "
                        f"split into {m} mini-batches of whole groups")
    order = seeds.mini_batch_rng(seed).permutation(n_prompts)
    size = n_prompts // m
    out = []
    for j in range(m):
        groups = torch.as_tensor(np.sort(order[j * size:(j + 1) * size]))
        rows = (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # [size·G]
        out.append([rows[sl] for sl in micro_slices(len(rows), micro_batch_size)])
    return out


def sample_rows(step: int, problems: list, batch: RolloutBatch) -> list[dict]:
    """The rows of samples.jsonl for this step's rollouts (reward as graded, advantage as trained on)."""
    rows = []
    for p, group in enumerate(batch.groups.samples):
        prob = problems[batch.groups.idx[p]]
        for g, s in enumerate(group):
            rows.append({"step": step, "prompt_id": prob.id, "problem": prob.problem, "answer": prob.answer,
                         "completion": s.text, "reward": batch.rewards[p, g].item(),
                         "advantage": batch.advantages[p, g].item()})
    return rows


def response_logits(model, input_ids, attention_mask, prompt_width: int, group_size: int = 1,
                    lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Logits that predict each response token: [n, Lr, V]. Position ids follow the attention mask,
    as in generation, so left padding does not shift positions.

    With the responses' `lengths` [n] (tokens up to and including EOS) and a built-in-size policy on
    the CPU (`_can_pack`), the rows run packed (`packed_response_logits`): no padding token is
    computed on; the logits past a row's length are then another position's (finite, and masked out
    by every caller).

    With `group_size` G > 1, rows p·G … p·G+G−1 that hold the same prompt run it once: the prompt
    [n/G, Lp] goes through the model, its KV cache is repeated G times, and the responses
    [n, Lr − 1] continue from it, as in generation. Same computation as running every row whole,
    up to float rounding; about half the work when prompts are as long as responses. Used on CPU
    (where it is measured and tested; on GPUs every row runs whole, as before) where the model
    supports it (`rollout.prefix_cache_supported`), without gradient checkpointing, and without
    active dropout (which would draw one prompt mask for the whole group)."""

    # grouped KV heads held once for backward, on the CPU; not under gradient checkpointing, whose
    # recomputation in the backward runs outside this context (and would repeat them: another shape)
    with kv_heads_once(input_ids.device) if not _checkpointing(model) else contextlib.nullcontext():
        return _response_logits(model, input_ids, attention_mask, prompt_width, group_size, lengths)


def _response_logits(model, input_ids, attention_mask, prompt_width: int, group_size: int,
                     lengths: torch.Tensor | None) -> torch.Tensor:
    if lengths is not None and _can_pack(model, input_ids, attention_mask, prompt_width, group_size):
        return packed_response_logits(model, input_ids, attention_mask, prompt_width, group_size, lengths)
    positions = position_ids(attention_mask)
    lr = input_ids.shape[1] - prompt_width
    if _can_share_prompts(model, input_ids, attention_mask, prompt_width, group_size):
        lp, cache = prompt_width, new_cache(model)
        first = forward_with_cache(model, input_ids[::group_size, :lp], attention_mask[::group_size, :lp],
                                   positions[::group_size, :lp], cache, logits_to_keep=1)  # [n/G, 1, V]
        first = first.repeat_interleave(group_size, 0)  # predicts response token 0: [n, 1, V]
        if lr == 1:
            return first
        cache.batch_repeat_interleave(group_size)
        rest = forward_with_cache(model, input_ids[:, lp:-1], attention_mask[:, :-1], positions[:, lp:-1], cache)
        return torch.cat([first, rest], dim=1)  # rest predicts response tokens 1 … Lr−1
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                use_cache=False, logits_to_keep=lr + 1)
    return out.logits[:, :-1]


# A packed forward's most tokens (at least one group's): its attention is dense over them (T² scores).
PACK_TOKENS = 256


def packed_response_logits(model, input_ids, attention_mask, prompt_width: int, group_size: int,
                           lengths: torch.Tensor) -> torch.Tensor:
    """`response_logits` [n, Lr, V] of rows in groups of `group_size` with one prompt each, without padding.

    A group's prompt (its real tokens, no left padding) and its rows' responses (all but the last
    token, which predicts nothing scored) are laid end to end in one sequence with groups after each
    other, up to `PACK_TOKENS` tokens a forward pass; a block mask lets each prompt token see its
    prompt's earlier tokens, and each response token its group's prompt and its own row's earlier
    tokens — what it sees in the padded batch, at the same positions. So every response token is
    computed once, and each prompt once for its G rows (as `_can_share_prompts`' path). The same
    log-probs up to float rounding (tests/unit/test_packed_logits.py); on the built-in tasks, whose
    answers are mostly a few tokens while a batch is as wide as its longest walk, a fraction of the
    padded batch's tokens."""
    n = input_ids.shape[0]
    lens = lengths.tolist()
    prompt_lens = attention_mask[::group_size, :prompt_width].sum(1).tolist()
    groups = n // group_size
    chunks, start, tokens = [], 0, 0
    for g in range(groups):
        size = prompt_lens[g] + sum(max(int(ln) - 1, 0) for ln in lens[g * group_size:(g + 1) * group_size])
        if g > start and tokens + size > PACK_TOKENS:
            chunks.append((start, g))
            start, tokens = g, 0
        tokens += size
    chunks.append((start, groups))
    return torch.cat([_packed_chunk(model, input_ids, prompt_width, group_size, lens, prompt_lens, a, b)
                      for a, b in chunks])


def _packed_chunk(model, input_ids, lp: int, group_size: int, lens: list, prompt_lens: list, g0: int, g1: int):
    """The packed forward of groups g0 … g1 − 1 (`packed_response_logits`): [rows, Lr, V]."""
    lr = input_ids.shape[1] - lp
    pieces, grp, row, pos, pred = [], [], [], [], []
    t = 0
    for g in range(g0, g1):
        plen = int(prompt_lens[g])
        pieces.append(input_ids[g * group_size, lp - plen:lp])
        grp += [g] * plen
        row += [-1] * plen
        pos += range(plen)
        t += plen
        last = t - 1  # the prompt's last token predicts each row's first response token
        for r in range(g * group_size, (g + 1) * group_size):
            k = max(int(lens[r]) - 1, 0)
            pieces.append(input_ids[r, lp:lp + k])
            grp += [g] * k
            row += [r] * k
            pos += range(plen, plen + k)
            idx = [last, *range(t, t + k)]
            pred.append(idx + [last] * (lr - len(idx)))
            t += k
    grp_t, row_t, order = torch.tensor(grp), torch.tensor(row), torch.arange(t)
    sees = ((grp_t[:, None] == grp_t[None]) & (order[None] <= order[:, None])
            & ((row_t[None] == -1) | (row_t[None] == row_t[:, None])))
    out = model(input_ids=torch.cat(pieces)[None], attention_mask=sees[None, None], position_ids=torch.tensor(pos)[None],
                use_cache=False, logits_to_keep=torch.tensor(pred).flatten())
    return out.logits.view(len(pred), lr, -1)


def _can_pack(model, input_ids, attention_mask, prompt_width: int, group_size: int) -> bool:
    """Packed rows (`packed_response_logits`): a policy with rbctl's lean forward (a built-in-size float32
    Llama on the CPU) under sdpa attention, rows in groups of one prompt, without autocast or active dropout."""
    from rbctl.rollout.lean_forward import uses_lean_forward

    return (input_ids.device.type == "cpu" and uses_lean_forward(model)
            and getattr(model.config, "_attn_implementation", None) == "sdpa"
            and not torch.is_autocast_enabled("cpu") and not dropout_active(model) and not _checkpointing(model)
            and _shares_prompts(input_ids, attention_mask, prompt_width, group_size))


def _can_share_prompts(model, input_ids, attention_mask, prompt_width: int, group_size: int) -> bool:

    return (group_size > 1 and input_ids.device.type == "cpu"
            and _shares_prompts(input_ids, attention_mask, prompt_width, group_size)
            and not _checkpointing(model) and not dropout_active(model) and prefix_cache_supported(model))


def _checkpointing(model) -> bool:
    """Gradient (activation) checkpointing is on: it turns the KV cache off, so no shared prefix. `model`
    may be wrapped (DDP, FSDP's training forward: `.module`; PEFT: its base model)."""
    model = getattr(model, "module", model)
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # renamed in transformers 5.x
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def dropout_active(model) -> bool:
    """Dropout would act in this forward pass (training mode and a nonzero rate somewhere)."""
    if not model.training:
        return False
    if any(getattr(model.config, k, 0) or 0 for k in ("attention_dropout", "hidden_dropout", "dropout")):
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _shares_prompts(input_ids, attention_mask, prompt_width: int, group_size: int) -> bool:
    """Whether the rows come in groups of `group_size` with identical (padded) prompts."""
    n = input_ids.shape[0]
    if n % group_size:
        return False
    ids = input_ids[:, :prompt_width].reshape(n // group_size, group_size, prompt_width)
    mask = attention_mask[:, :prompt_width].reshape(n // group_size, group_size, prompt_width)
    return bool((ids == ids[:, :1]).all() and (mask == mask[:, :1]).all())


