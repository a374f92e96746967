"""The real-model demo on vLLM's CPU build beside the hf engine: the SmolLM2 addition run (the code: `rbctl.tools.vllm_cpu_demo`)."""

from rbctl.tools.vllm_cpu_demo import main

if __name__ == "__main__":
    raise SystemExit(main())
