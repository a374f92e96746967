"""Console hygiene shared by the CLI, the sweep workers and the developer scripts."""

from __future__ import annotations


def quiet_libraries() -> None:
    """Progress bars and advice from transformers/datasets would drown rbctl's own display."""
    import os
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
