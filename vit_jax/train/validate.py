"""The trainer's config check: every setting the run depends on, in one pass, up front.

Run before the work directory or anything else is created, so a mistake costs nothing:
each problem is a one-line ValueError/FileNotFoundError naming the key and what to do.
Each stage checks its own part (schedule, optimizer, objective, model, data, evaluators);
this module asks them in order.
"""
import dataclasses
from typing import Any

from absl import logging
import jax
import ml_collections

from vit_jax import evaluators
from vit_jax import option_rules
from vit_jax.configs import base
from vit_jax.data import catalog
from vit_jax.data import multicrop
from vit_jax.data import pipeline
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.models import from_config
from vit_jax.models import mae
from vit_jax.models import masking
from vit_jax.train import ema
from vit_jax.train import objectives
from vit_jax.train import precheck


def _check_devices(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh) -> None:
  """The batches split evenly over the mesh's devices and the processes."""
  micro = config.batch // config.accum_steps
  if micro % mesh.size:
    raise ValueError(
        f'config.batch={config.batch} / accum_steps={config.accum_steps} = '
        f'{micro} is not divisible by the {mesh.size} devices; use a batch '
        f'that is a multiple of {mesh.size * config.accum_steps}.')
  if config.batch_eval % mesh.size:
    raise ValueError(f'config.batch_eval={config.batch_eval} is not divisible '
                     f'by the {mesh.size} devices.')
  if config.batch % jax.process_count():
    raise ValueError(f'config.batch={config.batch} is not divisible by the '
                     f'{jax.process_count()} processes.')


@dataclasses.dataclass(frozen=True)
class Built:
  """What the check built on its way, for the run to use: nothing is built twice."""
  info: catalog.DatasetInfo
  model: Any
  objective: Any
  schedule: Any
  tx: Any


def validate(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh) -> Built:
  """Checks the whole config for a run on `mesh`; returns what it built on the way (Built)."""
  schedule, tx = precheck.check(config)  # what vit_jax.main also checks before TensorFlow
  _check_devices(config, mesh)
  info = sources.get_dataset_info(config)
  pipeline.check_train_config(config, info)
  pipeline.check_eval_config(config)
  # Preset, overrides, options; then the objective's options on that model.
  model = from_config.build(config, info.num_classes)
  objective = objectives.make(config, model)
  objectives.check_views(objective, config.pp)
  _warn_unused_objective_options(config)
  _warn_mask_rounding(config, model)
  evaluators.check(config)
  _warn_options_without_effect(config)
  return Built(info=info, model=model, objective=objective, schedule=schedule, tx=tx)


def _warn_unused_objective_options(config: ml_collections.ConfigDict) -> None:
  """One warning per option set for an objective the run does not use (a forgotten --config.objective?)."""
  defaults = base.get_base_config().objectives
  for name, options in config.get('objectives', {}).items():
    if name == config.objective or name not in defaults:
      continue
    for key, value in options.items():
      if key not in defaults[name] or defaults[name][key] != value:
        logging.warning('config.objectives.%s.%s=%r is ignored: the run trains '
                        'objective %r (set --config.objective=%s to use it).',
                        name, key, value, config.objective, name)


# Each section's "these options act only while that switch is on", declared by its owner.
_OPTION_RULES = multicrop.OPTION_RULES + preprocess.OPTION_RULES + ema.OPTION_RULES


def options_without_effect(config: ml_collections.ConfigDict) -> list[str]:
  """One line per option set while a switch it needs is off (multicrop, mixup, EMA, evals)."""
  defaults = base.get_base_config()
  return (option_rules.unused(config, defaults, _OPTION_RULES) +
          evaluators.base.unused_options(config, defaults.evals))


def _warn_options_without_effect(config: ml_collections.ConfigDict) -> None:
  for line in options_without_effect(config):
    logging.warning('%s', line)


def _warn_mask_rounding(config: ml_collections.ConfigDict, model: Any) -> None:
  """A warning where mask_ratio masks another share of the patches than it says."""
  options = config.get('objectives', {}).get(config.objective, {})
  ratio = options.get('mask_ratio')
  if ratio is None:
    return
  rows, cols = mae.patch_grid(model, (1, config.pp.crop, config.pp.crop, 3))
  tokens = rows * cols
  masked = tokens - masking.num_kept(tokens, ratio)
  if abs(masked / tokens - ratio) > 1e-6:
    logging.warning('config.objectives.%s.mask_ratio=%s masks %d of the %d patches '
                    'of each image (%.4g in effect).', config.objective, ratio, masked,
                    tokens, masked / tokens)
