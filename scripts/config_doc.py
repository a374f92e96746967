"""The config reference, docs/config.md: every key of a training config and of a sweep file, with its (the code: `rbctl.tools.config_doc`)."""

from rbctl.tools.config_doc import reference_markdown

if __name__ == "__main__":
    print(reference_markdown(), end="")
