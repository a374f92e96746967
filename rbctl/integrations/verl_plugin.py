"""Importing this module registers rbctl's budgeted estimators with verl (see rbctl.integrations.verl).

It is meant for verl's plugin hook: `VERL_USE_EXTERNAL_MODULES=rbctl.integrations.verl_plugin`
makes every process that imports verl (the trainer's Ray actor included) import it.
"""

from rbctl.integrations.verl import register

REGISTERED = register()
