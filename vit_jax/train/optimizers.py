"""Optimizers chosen by name from the config, with gradient clipping and weight decay.

`config.optimizer` names an entry of OPTIMIZERS ('sgd': SGD with momentum, 'adam':
AdamW), one added with `register`, or any optax optimizer that takes a learning rate as
its first argument ('lion', 'lamb', 'adafactor', ...). Its keyword arguments are
`config.optimizers.<name>` (absent: the factory's defaults). Every optimizer gets the
config's learning-rate schedule, gradient clipping at `config.grad_clip_norm` (of the
global norm, or of each tensor's norm with `config.grad_clip_mode='per_tensor'` as DINO)
and weight decay `config.weight_decay` on the kernels only (decay_mask), constant or,
with `config.weight_decay_end` >= 0, cosine from weight_decay to it over the run (DINO);
`config.layer_decay` < 1 scales each parameter's updates by its depth
(vit_jax.train.layer_decay).
"""
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax import models
from vit_jax.train import layer_decay

# name -> factory(learning_rate, weight_decay, mask, **kwargs) -> GradientTransformation
Factory = Callable[..., optax.GradientTransformation]


def decay_mask(params: Any) -> Any:
  """True for the parameters that weight decay applies to: dense and conv kernels.

  Biases, LayerNorm/GroupNorm scales, position embeddings and the class token
  are not decayed.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) == 'kernel', params)


def _sgd(learning_rate, weight_decay, mask, *, momentum=0.9, nesterov=False,
         accumulator_dtype='float32') -> optax.GradientTransformation:
  opt = optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov,
                  accumulator_dtype=accumulator_dtype)
  if weight_decay:
    opt = optax.chain(optax.add_decayed_weights(weight_decay, mask=mask), opt)
  return opt


def _adamw(learning_rate, weight_decay, mask, *, b1=0.9, b2=0.999, eps=1e-8,
           mu_dtype='float32') -> optax.GradientTransformation:
  # Decoupled decay, multiplied by the learning rate.
  return optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype,
                     weight_decay=weight_decay, mask=mask)


OPTIMIZERS: dict[str, Factory] = {'sgd': _sgd, 'adam': _adamw}
CLIP_MODES = ('global', 'per_tensor')
CONSTANT_DECAY = -1.0  # config.weight_decay_end: no schedule


def clip_per_tensor(max_norm: float) -> optax.GradientTransformation:
  """Scales each gradient tensor whose norm exceeds max_norm to max_norm (DINO's clipping)."""
  def update(updates, state, params=None):
    del params
    def clip(g):
      norm = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32))))
      scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))  # the official's epsilon
      return (g * scale).astype(g.dtype)
    return jax.tree.map(clip, updates), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def weight_decay_schedule(config: ml_collections.ConfigDict) -> Any:
  """config.weight_decay, or a cosine from it to config.weight_decay_end over total_steps."""
  end = config.get('weight_decay_end', CONSTANT_DECAY)
  if end == CONSTANT_DECAY:
    return config.weight_decay
  if not 0 <= end < float('inf'):
    raise ValueError(f'config.weight_decay_end={end!r} must be >= 0 (or -1: constant '
                     'config.weight_decay).')
  start, total = float(config.weight_decay), config.total_steps

  def schedule(count):
    progress = jnp.minimum(count, total) / total
    return end + 0.5 * (start - end) * (1.0 + jnp.cos(jnp.pi * progress))
  return schedule


def register(name: str, factory: Factory) -> None:
  """Makes `factory(learning_rate, weight_decay, mask, **kwargs)` selectable by name."""
  OPTIMIZERS[name] = factory


def _optax_factory(name: str) -> Factory:
  """A factory around optax.<name>; one-line error if there is none taking a learning rate."""
  fn = getattr(optax, name, None)
  params = list(inspect.signature(fn).parameters) if callable(fn) else []
  if not params or params[0] != 'learning_rate':
    raise ValueError(f'config.optimizer={name!r} is unknown: use one of '
                     f'{", ".join(OPTIMIZERS)} or the name of an optax optimizer '
                     "taking a learning rate (e.g. 'lion', 'lamb').")

  def factory(learning_rate, weight_decay, mask, **kwargs):
    if 'weight_decay' in params:
      kwargs['weight_decay'] = weight_decay
      if 'mask' in params:
        kwargs['mask'] = mask
    elif weight_decay:
      raise ValueError(f'optax.{name} takes no weight decay; set '
                       'config.weight_decay=0 or register a factory that adds it.')
    return fn(learning_rate, **kwargs)

  factory.__signature__ = inspect.signature(fn)
  return factory


def _kwargs(config: ml_collections.ConfigDict, factory: Factory) -> dict[str, Any]:
  """config.optimizers.<name> as keyword arguments the factory takes, dtypes resolved."""
  section = config.get('optimizers', {}).get(config.optimizer, {})
  kwargs = dict(section.to_dict() if hasattr(section, 'to_dict') else section)
  params = inspect.signature(factory).parameters
  takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
  reserved = {'learning_rate', 'weight_decay', 'mask'}
  for key in kwargs:
    if key in reserved or (key not in params and not takes_any):
      valid = sorted(set(params) - reserved)
      raise ValueError(f'config.optimizers.{config.optimizer}.{key} is not an option of '
                       f'optimizer {config.optimizer!r}; its options: {", ".join(valid)}.')
  return {k: jnp.dtype(v) if k.endswith('_dtype') and isinstance(v, str) else v
          for k, v in kwargs.items()}


def make(config: ml_collections.ConfigDict, schedule: Any) -> optax.GradientTransformation:
  """Gradient clipping, the named optimizer with the schedule and weight decay, layer decay."""
  factory = OPTIMIZERS.get(config.optimizer) or _optax_factory(config.optimizer)
  if not config.weight_decay >= 0:
    raise ValueError(f'config.weight_decay={config.weight_decay} must be >= 0.')
  if not config.grad_clip_norm >= 0:
    raise ValueError(f'config.grad_clip_norm={config.grad_clip_norm} must be >= 0 '
                     '(0 = off).')
  decay = config.get('layer_decay', 1.0)
  layer_of = models.family_of(config.model_name).layer_of if decay != 1 else None
  layer_decay.check(decay, layer_of, config.model_name, config.get('objective', 'supervised'))
  mode = config.get('grad_clip_mode', 'global')
  if mode not in CLIP_MODES:
    raise ValueError(f'config.grad_clip_mode={mode!r} is unknown; use one of '
                     f'{", ".join(CLIP_MODES)}.')
  opt = factory(schedule, weight_decay_schedule(config), decay_mask,
                **_kwargs(config, factory))
  if decay != 1:
    opt = optax.chain(opt, layer_decay.scale_by_layer(layer_of, decay))
  if config.grad_clip_norm:
    clip = (clip_per_tensor if mode == 'per_tensor' else optax.clip_by_global_norm)
    opt = optax.chain(clip(config.grad_clip_norm), opt)
  return opt
