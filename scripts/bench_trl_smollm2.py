"""rbctl against TRL's `GRPOTrainer` on a real model: SmolLM2-135M-Instruct, GSM8K prompts, side by side. (the code: `rbctl.tools.bench_trl_smollm2`)."""

from rbctl.tools.bench_trl_smollm2 import main

if __name__ == "__main__":
    raise SystemExit(main())
