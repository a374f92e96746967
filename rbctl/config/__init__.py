"""Configuration, one schema package: `base` (the strict Section, YAML, `--set` overrides,
validation into one-line errors), `train` (the training config), `sweep` (the sweep file),
`launcher` (its submitit section) and `presets` (the shipped configs/*.yaml). Nothing here imports
the code that runs a config."""
