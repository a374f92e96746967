"""Exact checks a claim may name (`rbctl.config.study.ExactRule`): computations, not tests, each
returning (what was measured, whether it passed, its table or None). The first line of each
docstring is printed as the rule. A study may name its own in a Python file (`StudyConfig.checks`;
`find_check`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

from rbctl.errors import UserError


def finite_g_gradient() -> tuple[str, bool, None]:
    """The unclipped budgeted GRPO estimator's expected weight on ∇p equals J_G'(p) = B(1 − (1−p)^{G−1})/p exactly (over all 2^8 outcomes; relative error < 1e-6), and plain GRPO's does not (> 1e-3)."""
    from rbctl.algo.sharpness import finite_g_check

    worst, best = finite_g_check()
    return (f"largest relative error of GRPO + budget {worst:.1e}; GRPO's smallest {best:.2f} (not the gradient)",
            worst < 1e-6 and best > 1e-3, None)


CHECKS = {"finite_g_gradient": finite_g_gradient}


def find_check(check: str, own: Path | None = None) -> Callable:
    """The check named ``check``: a function of the study's own checks file ``own`` (a Python file,
    `StudyConfig.checks`), else one of `CHECKS`; a `UserError` naming where it looked otherwise."""
    if own is not None:
        own = Path(own)
        if not own.is_file():
            raise UserError(f"the study's checks file {own} does not exist")
        spec = importlib.util.spec_from_file_location(f"rbctl_study_checks.{own.stem}", own)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, check, None)
        if callable(fn):
            return fn
    if check not in CHECKS:
        where = f"a function of {own} or " if own is not None else ""
        raise UserError(f"exact check '{check}' is neither {where}one of {', '.join(CHECKS)}")
    return CHECKS[check]
