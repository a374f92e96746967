"""The GPU check of the paper-scale path: bf16-mixed training with the hf engine on CUDA, periodic (the code: `rbctl.tools.gpu_check`)."""

from rbctl.tools.gpu_check import main

if __name__ == "__main__":
    raise SystemExit(main())
