"""The tables of `python -m scripts.bench_trl_smollm2` (rbctl against TRL on SmolLM2-135M): the
workload's constants, the phases of a step, decoding's compute and memory limits, and the report
printed from the runs' records."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from scripts.bench_trl import ATTN_IMPLEMENTATION, machine

# rbctl_gguf: rbctl given the GGUF file itself (as configs/smollm2_*.yaml do), dequantized on load;
# rbctl_bf16: rbctl with rollout.dtype=bfloat16. The others load the float32 folder.
FRAMEWORKS = ("rbctl", "rbctl_gguf", "rbctl_bf16", "trl")
LABELS = {"rbctl": "rbctl", "rbctl_gguf": "rbctl, model from the GGUF file", "rbctl_bf16": "rbctl, bf16 sampling",
          "trl": "TRL"}
PHASES = ("sampling", "forward + loss", "backward", "optimizer")
P, G, NEW_TOKENS, LR = 4, 4, 64, 1e-6


def phases(step: dict) -> dict:
    """A measured step's seconds per phase: sampling (the rollout phase: prefill, decoding, grading),
    backward and optimizer (`phase_clock`), and forward + loss: the rest of the step less κ_eff's pass
    (the log-prob forwards, the loss, gradient clipping, the weight sync)."""
    back, opt = step.get("backward_s"), step.get("optimizer_s")
    if back is None or opt is None:
        return {}
    return {"sampling": step["rollout_s"], "forward + loss": step["step_s"] - step["rollout_s"] - step.get("kappa_eff_s", 0.0) - back - opt,
            "backward": back, "optimizer": opt}


def decode_memory_limit(model_dir: Path, rows: int, gbps: float) -> float:
    """Tokens/s of decoding `rows` sequences when each step must read every matmul weight once in
    float32 (half the FLOP a token, × 4 bytes) at `gbps` GB/s: the bound that holds at few rows."""
    return rows * gbps * 1e9 / (decode_flops_per_token(model_dir) / 2 * 4)


def decode_flops_per_token(model_dir: Path) -> float:
    """FLOP of one sampled token's matmuls: 2 × the weights a token passes through (the layers' and the
    LM head's; attention over the context, a few % at these lengths, left out)."""
    c = json.loads((model_dir / "config.json").read_text())
    h, i, layers, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c.get("num_key_value_heads", c["num_attention_heads"])
    return 2.0 * (layers * (2 * h * h + 2 * h * kv + 3 * h * i) + h * v)


def decode_rate(runs: list[dict]) -> float | None:
    """rbctl's decoding rate (tok/s) over `runs`: per step, the tokens decoded after each sequence's
    first (which the prefill's logits give) over the sampling loop's time less its prefill forward;
    the median over the measured steps. None when no step timed its decoding."""
    rates = [(s["rollout_tokens"] - P * G) / s["decode_s"] for r in runs for s in measured(r) if s.get("decode_s")]
    return statistics.median(rates) if rates else None


def measured(run: dict) -> list[dict]:
    return run["steps"][1:-1]  # no warm-up step, no checkpoint step


def med(runs: list[dict], key: str) -> float:
    vals = [s[key] for r in runs for s in measured(r) if s.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")


def report(args, model_dir: Path, table) -> None:
    """Print the comparison (module docstring of scripts.bench_trl_smollm2) of `table`: per thread
    count, (threads, {framework: runs}, matmul runs)."""
    _settings_lines(args, model_dir, table[0][1])
    print()
    _step_table(table)
    print()
    print_phases(table)
    print()
    _decoding_lines(model_dir, table)
    _workload_lines(table)


def _settings_lines(args, model_dir: Path, first: dict) -> None:
    """The machine, the model, the workload and each framework's settings and layout of the work."""
    fws = tuple(first)  # the frameworks measured (FRAMEWORKS, without rbctl_bf16 under --no-bf16)
    print(f"machine: {machine()}")
    print(f"model: {model_dir} (float32), attention {ATTN_IMPLEMENTATION} in all runs")
    print(f"workload: {P} GSM8K prompts x {G} rollouts x {NEW_TOKENS} new tokens (forced), temperature 1, lr {LR}, "
          f"AdamW, 1 optimizer step per batch, no reference model; {args.steps} steps per run, first and last "
          f"left out; {args.rounds} alternating rounds per thread count")
    for fw in fws:
        print(f"{LABELS[fw]} settings: {first[fw][0]['settings']}")
    for fw in fws:
        print(f"{LABELS[fw]} layout of the work: {first[fw][0]['layout']}")
    same = all(first[fw][0]["layout"]["sequences per forward/backward"] == first["trl"][0]["layout"]["sequences per forward/backward"]
               and first[fw][0]["layout"]["sequences sampled at once"] == first["trl"][0]["layout"]["sequences sampled at once"]
               for fw in fws)
    print("layout: " + ("matched (micro-batches, generation batch, sampling past EOS)" if same
                        else "DIFFERS between the frameworks (see the lines above)"))
    if args.rbctl_set:
        print(f"rbctl --set {' '.join(args.rbctl_set)}")


def _step_table(table) -> None:
    """Seconds per step, the ratios per round, the rollout phase, peak RSS and the matmul rates."""
    print("| threads | rbctl s/step (folder) | rbctl, model from the GGUF file (vs folder) | rbctl, bf16 sampling | TRL s/step "
          "| TRL / rbctl (per round) | TRL / rbctl GGUF (per round) | TRL / rbctl bf16 (per round) "
          "| rollout s: rbctl / GGUF / bf16 / TRL | rbctl κ_eff pass | peak RSS GiB: rbctl / GGUF / bf16 / TRL "
          "| matmul GFLOP/s fp32 / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for threads, res, mm in table:
        def ratio(fw):
            if fw not in res:
                return "–"
            rounds = [statistics.median(s["step_s"] for s in measured(t)) / statistics.median(s["step_s"] for s in measured(b))
                      for b, t in zip(res[fw], res["trl"])]
            return f"{med(res['trl'], 'step_s') / med(res[fw], 'step_s'):.2f}x ({', '.join(f'{x:.2f}' for x in rounds)})"

        peak = {fw: max(r["peak_rss_mib"] for r in res[fw]) for fw in res}
        rss = " / ".join(f"{peak[fw] / 1024:.2f}" if fw in res else "–" for fw in FRAMEWORKS) \
            + " (of TRL's: " + ", ".join(f"{LABELS[fw]} {peak[fw] / peak['trl']:.3f}" for fw in res if fw != "trl") + ")"
        roll = " / ".join(f"{med(res[fw], 'rollout_s'):.1f}" if fw in res else "–" for fw in FRAMEWORKS)
        bf16 = f"{med(res['rbctl_bf16'], 'step_s'):.1f}" if "rbctl_bf16" in res else "–"
        gguf = (f"{med(res['rbctl_gguf'], 'step_s'):.1f} ({med(res['rbctl_gguf'], 'step_s') / med(res['rbctl'], 'step_s') - 1:+.1%})"
                if "rbctl_gguf" in res else "–")
        print(f"| {threads} | {med(res['rbctl'], 'step_s'):.1f} | {gguf} | {bf16} | "
              f"{med(res['trl'], 'step_s'):.1f} | {ratio('rbctl')} | {ratio('rbctl_gguf')} | {ratio('rbctl_bf16')} | {roll} | "
              f"{med(res['rbctl'], 'kappa_eff_s'):.1f} s | {rss} | "
              f"{statistics.median(m['float32'] for m in mm):.0f} / {statistics.median(m['bfloat16'] for m in mm):.0f} |")


def _decoding_lines(model_dir: Path, table) -> None:
    """The sampling rate against the compute and memory limits of decoding, and rbctl's decoding alone."""
    per_token = decode_flops_per_token(model_dir)
    for threads, res, mm in table:  # the sampling rate against the matmul-bound limit of decoding
        # tokens/s at the float32 matmul rate of torch.mm and of oneDNN (None where a rate was not measured)
        limits = [statistics.median(m[k] for m in mm) * 1e9 / per_token if all(k in m for m in mm) else None
                  for k in ("float32", "onednn_float32")]
        rates = " / ".join(f"{x:.0f}" if x else "–" for x in limits)
        mem = ""
        if all("copy_gbps" in m for m in mm):
            gbps = statistics.median(m["copy_gbps"] for m in mm)
            mem = (f"; memory limit of decoding {decode_memory_limit(model_dir, P * G, gbps):.0f} tok/s ({P * G} rows, "
                   f"every float32 weight read once a step at the copy rate of {gbps:.1f} GB/s)")
        print(f"threads {threads}: sampling rbctl {med(res['rbctl'], 'rollout_tokens') / med(res['rbctl'], 'rollout_s'):.0f} "
              f"tok/s, TRL {med(res['trl'], 'rollout_tokens') / med(res['trl'], 'rollout_s'):.0f} tok/s (rollout phase: "
              f"prefill, decoding and grading); compute limit of decoding {rates} tok/s at the float32 matmul rate of "
              f"torch.mm / oneDNN ({per_token / 1e9:.2f} GFLOP a token){mem}")
        for fw in ("rbctl", "rbctl_gguf", "rbctl_bf16"):
            rate = decode_rate(res.get(fw, []))
            if rate is not None:
                share = " / ".join(f"{rate / x:.0%}" if x else "–" for x in limits)
                print(f"threads {threads}: decoding alone, {LABELS[fw]}: {rate:.0f} tok/s = {share} of that limit "
                      f"(the tokens after each sequence's first, over the sampling loop's time less its prefill "
                      f"forward: no weight reorder, tokenizing or grading)")


def _workload_lines(table) -> None:
    """Rollout and prompt tokens per step, the mean reward and the sampler's log-prob mismatch."""
    for threads, res, _ in table:
        print(f"threads {threads}: rollout tokens per step " + ", ".join(f"{LABELS[fw]} {med(res[fw], 'rollout_tokens'):.0f}" for fw in res)
              + f"; TRL prompt tokens per step {med(res['trl'], 'prompt_tokens'):.0f}, rbctl's prompts at every step: "
              + f"{all(s['same_prompts'] for r in res['trl'] for s in r['steps'])}; mean reward "
              + ", ".join(f"{LABELS[fw]} {med(res[fw], 'reward'):.3f}" for fw in res)
              + f"; rollout/logprob_diff (sampler vs trainer, mean |Δ log p| per token) rbctl {med(res['rbctl'], 'logprob_diff'):.2e}"
              + (f", bf16 sampling {med(res['rbctl_bf16'], 'logprob_diff'):.2e}" if "rbctl_bf16" in res else ""))


def phase_medians(runs: list[dict]) -> dict:
    """Per phase (`PHASES`), the median over `runs`' measured steps of its seconds; {} when not timed."""
    rows = [phases(s) for r in runs for s in measured(r)]
    rows = [r for r in rows if r]
    return {k: statistics.median(r[k] for r in rows) for k in PHASES} if rows else {}


def print_phases(table) -> None:
    """Seconds per step in each phase, per framework and thread count (medians of the measured steps)."""
    print("| threads | run | s/step | " + " | ".join(f"{k} s" for k in PHASES) + " | κ_eff pass s |")
    print("|---|---|---|" + "---|" * (len(PHASES) + 1))
    for threads, res, _ in table:
        for fw in res:
            ph = phase_medians(res[fw])
            cells = " | ".join(f"{ph[k]:.1f}" if ph else "–" for k in PHASES)
            kappa = med(res[fw], "kappa_eff_s")
            print(f"| {threads} | {LABELS[fw]} | {med(res[fw], 'step_s'):.1f} | {cells} | {'–' if kappa != kappa else f'{kappa:.1f}'} |")
