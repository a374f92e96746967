"""Loading a policy and sampling from it: the engine interface, the one engine factory, hf (with the
KV-cache forward passes it shares with the trainer, kvcache), vllm."""
