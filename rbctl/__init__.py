"""rbctl: experiment and ablation toolkit for RL of LLM reasoning with reward budgeting."""

__version__ = "0.1.0"
