"""The checks of `python -m scripts.gpu_check`, by what they need: one GPU (`single`), vLLM (`vllm`),
two or more GPUs (`multi`); the tiny models, problems and configs they share (`models`)."""
