"""Layer-wise learning-rate decay (BEiT, MAE fine-tuning): deeper layers learn faster.

With decay d and L blocks, the embeddings' updates are scaled by d^(L+1), block i's
(0-based) by d^(L-i), and what sits on top (final norm, pre-logits, head) by 1. The scale
multiplies the optimizer's final update, i.e. the parameter's learning rate: that is the
same as timm's per-group lr_scale for every optimizer (decoupled weight decay included,
as it is multiplied by the learning rate too) and holds under any sharding. The model
family says which layer a parameter belongs to (Family.layer_of).
"""
from typing import Any, Callable, Optional

import jax
import optax

LayerOf = Callable[[tuple[str, ...]], Optional[int]]


def _keys(path) -> tuple[str, ...]:
  return tuple(str(getattr(k, 'key', getattr(k, 'name', k))) for k in path)


def scales(params: Any, layer_of: LayerOf, decay: float) -> Any:
  """The per-parameter learning-rate scale tree: decay^(L+1-layer), 1 on top."""
  layers = jax.tree_util.tree_map_with_path(lambda p, _: layer_of(_keys(p)), params)
  # Blocks are layers 1..L, so L + 1 is the layer on top.
  top = max((d for d in jax.tree.leaves(layers) if d is not None), default=0) + 1
  return jax.tree.map(lambda d: decay ** (top - (top if d is None else d)), layers,
                      is_leaf=lambda d: d is None)


def describe(params: Any, layer_of: LayerOf, decay: float) -> str:
  """'embeddings x0.075, block 0 x0.116, ..., head and final norm x1' for the log."""
  groups = {}
  for path, scale in jax.tree_util.tree_leaves_with_path(scales(params, layer_of, decay)):
    layer = layer_of(_keys(path))
    name = ('head and final norm' if layer is None else 'embeddings' if layer == 0
            else f'block {layer - 1}')
    groups.setdefault(name, scale)
  order = sorted(groups, key=groups.get)
  return ', '.join(f'{name} x{groups[name]:.3g}' for name in order)


def scale_by_layer(layer_of: LayerOf, decay: float) -> optax.GradientTransformation:
  """Multiplies each update by its parameter's layer-decay scale."""

  def update_fn(updates, state, params=None):
    del params
    factors = scales(updates, layer_of, decay)
    return jax.tree.map(lambda u, f: u * f if f != 1.0 else u, updates, factors), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def check(decay: Any, layer_of: Optional[LayerOf], model_name: str, objective: str) -> None:
  """One-line errors for a decay outside (0, 1] or a run it cannot apply to."""
  if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
    raise ValueError(f'config.layer_decay={decay!r} must be in (0, 1] (1 = off).')
  if decay == 1:
    return
  if layer_of is None:
    raise ValueError(f'config.layer_decay={decay} does not apply to {model_name}: its '
                     'family has no layers for it (set layer_decay=1).')
  if objective != 'supervised':
    raise ValueError(f'config.layer_decay={decay} applies to fine-tuning (objective '
                     f"'supervised'), not to objective {objective!r}'s parameters.")
