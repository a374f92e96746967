"""Loading a policy and sampling from it: the engine interface, the one engine factory, hf, vllm."""
