"""`HFEngine.generate_calls`: several seeded calls sampled as one batch give each call's own samples
(the same draws; log-probs equal up to the rounding of matrix products over more rows), and calls
that cannot be merged run one by one."""

from __future__ import annotations

import torch

from rbctl.rollout import hf
from rbctl.rollout.base import SamplingParams, generate_each
from rbctl.rollout.hf import HFEngine

from tests.unit.test_rollout import _Tok, _tiny_llama


def _key(out):
    return [[(s.prompt_index, s.token_ids, s.text, s.finished) for s in group] for group in out]


def _logprobs(outs) -> torch.Tensor:
    return torch.tensor([lp for out in outs for group in out for s in group for lp in s.logprobs])


def _counting(engine, monkeypatch) -> list[int]:
    """The number of prompts of each sampling loop the engine runs."""
    loops, real = [], engine._sample
    monkeypatch.setattr(engine, "_sample", lambda model, chunk, *a: loops.append(len(chunk)) or real(model, chunk, *a))
    return loops


# 6 calls of 2 prompts, each call's prompts 5 tokens long at most (so every call is padded to 5)
CALLS = [[[1, 5, 6, 7, 3], [1, 3]], [[1, 9, 8, 4, 11], [1, 4, 4, 4, 4]], [[1, 2, 3], [1, 7, 7, 7, 7]],
         [[1, 10, 10, 10, 10], [1, 11]], [[1, 6, 6, 6, 6], [1, 5]], [[1, 3, 3, 3, 3], [1, 8, 8]]]


def _seeded(params: SamplingParams, first_seed: int = 7):
    return [(prompts, SamplingParams(n=params.n, temperature=params.temperature, top_p=params.top_p,
                                     max_new_tokens=params.max_new_tokens, seed=first_seed + c))
            for c, prompts in enumerate(CALLS)]


def test_merged_calls_give_each_calls_own_samples_and_leave_the_generator_as_the_last_call_did(monkeypatch):
    params = SamplingParams(n=3, temperature=1.0, top_p=0.9, max_new_tokens=9)
    calls = _seeded(params)
    one_by_one = HFEngine(_tiny_llama(3), _Tok(), logprobs=True)
    merged = HFEngine(_tiny_llama(3), _Tok(), logprobs=True)
    loops = _counting(merged, monkeypatch)
    expected = [one_by_one.generate(prompts, p) for prompts, p in calls]
    got = list(merged.generate_calls(calls))
    assert loops == [12]  # the 6 calls' 12 prompts in one sampling loop
    assert [_key(o) for o in got] == [_key(o) for o in expected]
    # torch's CPU matmul takes another kernel for 1-3 rows than for more, so a call's last few rows
    # round differently alone than among the merged rows: the log-probs agree to float32 rounding
    a, b = _logprobs(got), _logprobs(expected)
    assert len(a) > 100 and torch.allclose(a, b, rtol=0, atol=1e-5)
    finished = {s.finished for o in got for g in o for s in g}
    lengths = {len(s.token_ids) for o in got for g in o for s in g}
    assert finished == {True, False} and len(lengths) > 3  # rows leave the batch at different steps
    # an unseeded call afterwards continues from where the last seeded call left the stream
    after = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    assert _key(merged.generate(CALLS[0], after)) == _key(one_by_one.generate(CALLS[0], after))


def test_greedy_calls_merge_and_give_the_same_tokens(monkeypatch):
    calls = _seeded(SamplingParams(n=2, temperature=0.0, max_new_tokens=8))
    engine = HFEngine(_tiny_llama(1), _Tok())
    expected = [engine.generate(prompts, p) for prompts, p in calls]
    loops = _counting(engine, monkeypatch)
    assert [_key(o) for o in engine.generate_calls(calls)] == [_key(o) for o in expected]
    assert loops == [12]


def test_calls_that_cannot_be_merged_run_one_by_one(monkeypatch):
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    engine = HFEngine(_tiny_llama(0), _Tok(), max_batch=64)
    loops = _counting(engine, monkeypatch)
    # another prompt width (call 2: 7 tokens), an unseeded call (4) and other parameters (5) end a run
    calls = _seeded(params)
    calls[2] = ([[1, 2, 3, 4, 5, 6, 7], [1, 2]], calls[2][1])
    calls[4] = (calls[4][0], SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=None))
    calls[5] = (calls[5][0], SamplingParams(n=2, temperature=0.5, max_new_tokens=6, seed=12))
    torch.manual_seed(0)
    list(engine.generate_calls(calls))
    assert loops == [4, 2, 2, 2, 2]  # calls 0-1 together; 2, 3, 4 and 5 alone
    # and what it gives equals the plain loop, unseeded call included (its stream follows call 3's)
    plain = HFEngine(_tiny_llama(0), _Tok(), max_batch=64)
    assert [_key(o) for o in engine.generate_calls(calls)] == [_key(o) for o in generate_each(plain, calls)]


def test_merging_keeps_to_the_row_bound_and_the_token_bound(monkeypatch):
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=5)
    engine = HFEngine(_tiny_llama(0), _Tok())
    loops = _counting(engine, monkeypatch)
    engine.merge_rows = 8  # 2 calls of 2 prompts × 2 samples
    list(engine.generate_calls(_seeded(params)))
    assert loops == [4, 4, 4]
    loops.clear()
    engine.merge_rows, engine.max_batch_tokens = 4096, 12 * (5 + 5)  # 12 sequences of 5 prompt + 5 new tokens
    list(engine.generate_calls(_seeded(params)))
    assert loops == [6, 6]


def test_only_small_models_merge(monkeypatch):
    model = _tiny_llama(0)
    assert HFEngine(model, _Tok()).merge_rows == hf.MERGE_ROWS
    monkeypatch.setattr(hf, "MERGE_MAX_PARAMS", sum(p.numel() for p in model.parameters()) - 1)
    engine = HFEngine(model, _Tok())
    loops = _counting(engine, monkeypatch)
    assert engine.merge_rows == 0
    list(engine.generate_calls(_seeded(SamplingParams(n=1, temperature=1.0, max_new_tokens=4))))
    assert loops == [2] * 6
