"""Turning a problem into prompt token ids: the chat template, a plain template, or the built-in task's.

The template used is part of the protocol and is recorded with every run and evaluation.
"""

from __future__ import annotations

from rbctl.errors import UserError

# The standard instruction of the Qwen2.5-Math / DeepSeek-R1 evaluation protocols.
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

TEMPLATES = ("auto", "chat", "plain", "builtin")


def resolve_template(tokenizer, template: str, builtin_model: bool = False) -> str:
    """`auto` means the built-in task's format for the built-in policy, else the tokenizer's chat
    template where it has one, else `plain`."""
    if template not in TEMPLATES:
        raise UserError(f"unknown prompt template '{template}'; valid: {', '.join(TEMPLATES)}")
    if template == "auto":
        if builtin_model:
            return "builtin"
        return "chat" if getattr(tokenizer, "chat_template", None) else "plain"
    if template == "chat" and not getattr(tokenizer, "chat_template", None):
        raise UserError("prompt template 'chat' asked for, but this tokenizer has no chat template; use 'plain'")
    return template


def render_prompt(tokenizer, problem: str, template: str, instruction: str = MATH_INSTRUCTION,
                  builtin_task: str = "links") -> str:
    """The prompt text for one problem (template already resolved); `builtin_task`: the built-in task
    whose format the `builtin` template is (the policy's own)."""
    if template == "builtin":
        from rbctl.tasks.builtin import task

        return task(builtin_task).format_problem(problem)
    user = f"{problem}\n{instruction}" if instruction else problem
    if template == "chat":
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
    return f"{user}\n"


def encode_prompts(tokenizer, problems: list[str], template: str, instruction: str = MATH_INSTRUCTION,
                   builtin_task: str = "links") -> list[list[int]]:
    """Token ids of each prompt. Chat templates already hold their special tokens, so none are added."""
    texts = [render_prompt(tokenizer, p, template, instruction, builtin_task) for p in problems]
    add_special = template == "plain" or template == "builtin"
    return [tokenizer(t, add_special_tokens=add_special)["input_ids"] for t in texts]
