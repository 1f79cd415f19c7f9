"""Learning-rate schedules of the recipes: linear warm-up, then cosine, linear or constant."""
from typing import Any

import ml_collections
import optax

DECAY_TYPES = ('cosine', 'linear', 'constant')
# config.end_lr = -1 asks for the original vit_jax's end of decay (its train.py):
# linear decay ends at 1e-5 (absolute), cosine at 0.
ORIGINAL_END = -1.0
ORIGINAL_LINEAR_END = 1e-5


def check(config: ml_collections.ConfigDict) -> None:
  """One-line errors for schedule settings that cannot work."""
  if config.decay_type not in DECAY_TYPES:
    raise ValueError(f'config.decay_type={config.decay_type!r} is unknown; use '
                     f'one of {DECAY_TYPES}.')
  if not 0 <= config.warmup_steps < config.total_steps:
    raise ValueError(f'config.warmup_steps={config.warmup_steps} must be in [0, '
                     f'config.total_steps={config.total_steps}).')
  for key in ('base_lr', 'end_lr'):
    value = config[key]
    if key == 'end_lr' and value == ORIGINAL_END:
      continue
    if not (isinstance(value, (int, float)) and 0 <= value < float('inf')):
      raise ValueError(f'config.{key}={value!r} must be a finite number >= 0'
                       + (' (or -1: 1e-5 after linear decay, 0 after cosine).'
                          if key == 'end_lr' else '.'))


def end_lr(config: ml_collections.ConfigDict) -> float:
  """config.end_lr, with -1 resolved as the original vit_jax did per decay type."""
  if config.end_lr == ORIGINAL_END:
    return ORIGINAL_LINEAR_END if config.decay_type == 'linear' else 0.0
  return config.end_lr


def make(config: ml_collections.ConfigDict) -> Any:
  """Warm-up from 0 to base_lr over warmup_steps, then decay to end_lr at total_steps."""
  check(config)
  base, end = config.base_lr, end_lr(config)
  warmup, decay_steps = config.warmup_steps, config.total_steps - config.warmup_steps
  if config.decay_type == 'cosine':
    after = optax.cosine_decay_schedule(base, decay_steps, alpha=end / base if base else 0.0)
  elif config.decay_type == 'linear':
    after = optax.linear_schedule(base, end, decay_steps)
  else:
    after = optax.constant_schedule(base)
  if not warmup:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, base, warmup), after], [warmup])
