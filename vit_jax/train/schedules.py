"""Learning-rate schedules of the recipes: linear warm-up, then cosine, linear or constant."""
from typing import Any

import ml_collections
import optax

DECAY_TYPES = ('cosine', 'linear', 'constant')


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
    if not (isinstance(value, (int, float)) and 0 <= value < float('inf')):
      raise ValueError(f'config.{key}={value!r} must be a finite number >= 0.')


def make(config: ml_collections.ConfigDict) -> Any:
  """Warm-up from 0 to base_lr over warmup_steps, then decay to end_lr at total_steps."""
  check(config)
  base, end = config.base_lr, config.end_lr
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
