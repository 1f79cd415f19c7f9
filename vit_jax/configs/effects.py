"""Options that have no effect: one warning each, for options set while a switch they need is off.

The rules ("these options act only while that switch is on") are declared by each section's
owner (data.multicrop, data.preprocess, train.ema, the evaluators); this module compares a
config with the base config, which is why it lives with the configs and not with the trainer.
"""
from absl import logging
import ml_collections

from vit_jax import evaluators
from vit_jax import option_rules
from vit_jax.configs import base
from vit_jax.data import multicrop
from vit_jax.data import preprocess
from vit_jax.train import ema

_OPTION_RULES = multicrop.OPTION_RULES + preprocess.OPTION_RULES + ema.OPTION_RULES


def options_without_effect(config: ml_collections.ConfigDict) -> list[str]:
  """One line per option set while a switch it needs is off (multicrop, mixup, EMA, evals)."""
  defaults = base.get_base_config()
  return (option_rules.unused(config, defaults, _OPTION_RULES) +
          evaluators.base.unused_options(config, defaults.evals))


def warn_options_without_effect(config: ml_collections.ConfigDict) -> None:
  """Logs options_without_effect(config), one warning per line."""
  for line in options_without_effect(config):
    logging.warning('%s', line)
