"""Learning-rate schedules and optimizers of the paper's recipes, built from the config."""
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

DECAY_TYPES = ('cosine', 'linear', 'constant')
OPTIMIZERS = ('sgd', 'adam')


def make_schedule(config: ml_collections.ConfigDict) -> Callable[[Any], Any]:
  """Linear warm-up from 0 to base_lr, then cosine/linear decay to end_lr."""
  base, end = config.base_lr, config.end_lr
  warmup, total = config.warmup_steps, config.total_steps
  if config.decay_type not in DECAY_TYPES:
    raise ValueError(f'config.decay_type={config.decay_type!r} is unknown; use '
                     f'one of {DECAY_TYPES}.')
  if not 0 <= warmup < total:
    raise ValueError(f'config.warmup_steps={warmup} must be in [0, '
                     f'config.total_steps={total}).')

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    warm = base * jnp.minimum(1.0, step / warmup) if warmup else base
    progress = jnp.clip((step - warmup) / (total - warmup), 0.0, 1.0)
    if config.decay_type == 'cosine':
      decayed = end + (base - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    elif config.decay_type == 'linear':
      decayed = end + (base - end) * (1.0 - progress)
    else:
      decayed = jnp.asarray(base, jnp.float32)
    return jnp.where(step < warmup, warm, decayed)

  return schedule


def decay_mask(params: Any) -> Any:
  """True for the parameters that weight decay applies to: dense and conv kernels.

  Biases, LayerNorm/GroupNorm scales, position embeddings and the class token
  are not decayed.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) == 'kernel', params)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Gradient clipping, then SGD-momentum or AdamW with the config's schedule."""
  schedule = make_schedule(config)
  dtype = jnp.dtype(config.optim_dtype)
  if config.optimizer == 'sgd':
    opt = optax.sgd(schedule, momentum=config.momentum or None,
                    accumulator_dtype=dtype)
    if config.weight_decay:
      opt = optax.chain(optax.add_decayed_weights(config.weight_decay,
                                                  mask=decay_mask), opt)
  elif config.optimizer == 'adam':
    # Decoupled decay, multiplied by the learning rate (AdamW).
    opt = optax.adamw(schedule, b1=config.b1, b2=config.b2, mu_dtype=dtype,
                      weight_decay=config.weight_decay, mask=decay_mask)
  else:
    raise ValueError(f'config.optimizer={config.optimizer!r} is unknown; use '
                     f'one of {OPTIMIZERS}.')
  if config.grad_clip_norm:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  return opt
