"""Fitting a loaded checkpoint to a model for fine-tuning: new head, resized position embeddings.

`load_pretrained` is the original vit_jax function of that name: the checkpoint's
parameters go into the tree of freshly initialised ones, the head (and a pre-logits layer
of another width) comes from the fresh tree, and learned position embeddings are
interpolated to the new patch grid. What a family calls its head, class token and
position embedding comes from its record (vit_jax.models.families).
"""
from typing import Any, Mapping, Optional, Sequence, Union

from absl import logging
import numpy as np
import scipy.ndimage

from vit_jax.models import families
from vit_jax.models import formats
from vit_jax.models.formats import npz

Params = dict[str, Any]
Grid = tuple[int, int]


def _as_grid(value: Union[int, Sequence[int]], what: str) -> Grid:
  """Token count (must be square) or (h, w) -> (h, w)."""
  if isinstance(value, (int, np.integer)):
    side = int(round(np.sqrt(max(int(value), 0))))
    if value <= 0 or side * side != int(value):
      raise ValueError(f'Cannot interpolate position embeddings: {what} has '
                       f'{int(value)} patch tokens, not a square grid; pass the '
                       'grid as (height, width).')
    return side, side
  grid = tuple(int(v) for v in value)
  if len(grid) != 2 or min(grid) <= 0:
    raise ValueError(f'Cannot interpolate position embeddings: {what} grid '
                     f'{tuple(value)} is not (height, width) with positive '
                     'sides.')
  return grid


def interpolate_posemb(posemb: np.ndarray,
                       new_shape_or_grid: Union[int, Sequence[int]],
                       has_class_token: bool,
                       old_grid: Optional[Sequence[int]] = None) -> np.ndarray:
  """Resizes (1, N, D) position embeddings bilinearly on their 2D patch grid.

  `new_shape_or_grid` is the new token count N' (class token included when
  `has_class_token`; the rest must form a square grid), a (1, N', D) shape, or
  the new patch grid (h, w). `old_grid` gives the old grid when it is not
  square. The class token's embedding is kept as is. The resize is
  scipy.ndimage.zoom(order=1) as in the original vit_jax (grid corners stay on
  corners), so fine-tuned checkpoints reproduce its numbers.
  """
  posemb = np.asarray(posemb)
  if posemb.ndim != 3 or posemb.shape[0] != 1:
    raise ValueError(f'Position embeddings must have shape (1, tokens, width), '
                     f'got {posemb.shape}.')
  ntok = 1 if has_class_token else 0
  tok, grid_emb = posemb[:, :ntok], posemb[0, ntok:]
  if isinstance(new_shape_or_grid, (int, np.integer)):
    new_grid = _as_grid(int(new_shape_or_grid) - ntok, 'the new model')
  elif len(new_shape_or_grid) == 3:
    new_grid = _as_grid(int(new_shape_or_grid[1]) - ntok, 'the new model')
  else:
    new_grid = _as_grid(new_shape_or_grid, 'the new model')
  old = _as_grid(len(grid_emb) if old_grid is None else old_grid, 'the checkpoint')
  if old[0] * old[1] != len(grid_emb):
    raise ValueError(f'Cannot interpolate position embeddings: checkpoint grid '
                     f'{old} holds {old[0] * old[1]} tokens but the embeddings '
                     f'have {len(grid_emb)} (plus {ntok} class token).')
  if old == new_grid:
    return posemb
  logging.info('interpolate_posemb: grid %s -> %s', old, new_grid)
  grid_emb = grid_emb.reshape(old[0], old[1], -1)
  zoom = (new_grid[0] / old[0], new_grid[1] / old[1], 1)
  grid_emb = scipy.ndimage.zoom(grid_emb, zoom, order=1)
  grid_emb = grid_emb.reshape(1, new_grid[0] * new_grid[1], -1)
  return np.concatenate([tok, grid_emb], axis=1)


# ----------------------------------------------------------------------------
# Fine-tuning.


def _summary(keys: Sequence[str], limit: int = 6) -> str:
  keys = sorted(keys)
  more = f' (+{len(keys) - limit} more)' if len(keys) > limit else ''
  return ', '.join(keys[:limit]) + more


def load_pretrained(*,
                    pretrained_path: str,
                    init_params: Mapping[str, Any],
                    model_config: Any,
                    grid: Optional[Sequence[int]] = None,
                    pretrained_grid: Optional[Sequence[int]] = None,
                    strict: bool = True) -> Params:
  """Loads a checkpoint into the tree of `init_params` for fine-tuning.

  `pretrained_path` is an .npz, a timm state dict (.safetensors/.pth/.bin; the
  heads come from model_config) or a transformers ViT directory.
  The head comes from `init_params`; the checkpoint's `pre_logits` is dropped
  when the new model has none and kept when its width matches (else taken
  from `init_params`, as when the checkpoint lacks it). Position embeddings are
  interpolated to the new grid (`grid` for non-square new grids,
  `pretrained_grid` for non-square checkpoint grids). Other shape mismatches
  raise a one-line ValueError; with `strict`, so do parameters the checkpoint
  lacks or the model does not have (beyond head, pre-logits, class token), else
  they are logged. Returns a nested dict of numpy arrays shaped like `init_params`.
  """
  family = families.of_config(model_config)
  transformer = model_config.get('transformer') or {}
  # Fine-tuning retrains under tanh GELU anyway (the google/vit-* checkpoints were
  # trained with it), so transformers' exact-GELU configs are accepted here.
  tree = formats.read_params(
      pretrained_path, num_heads=transformer.get('num_heads'), exact_gelu='accept')
  restored = npz.flatten(tree)
  init = {k: np.asarray(v) for k, v in npz.flatten(init_params).items()}
  name = model_config.get('model_name') or 'the model'
  token_key = family.class_token_key
  new_token = token_key in init
  old_token = token_key in restored
  posemb_key = '/'.join(family.posemb_path or ())
  head_prefixes = tuple(k + '/' for k in family.head_keys)

  def is_head(key: str) -> bool:
    return key.startswith(head_prefixes)

  unexpected = [k for k in restored if k not in init]
  missing = [k for k in init if k not in restored]
  # A checkpoint's class token is dropped when the new model pools without it.
  hard_unexpected = [k for k in unexpected
                     if not is_head(k) and not (k == token_key and not new_token)]
  hard_missing = [k for k in missing if not is_head(k)]
  if unexpected:
    logging.info('load_pretrained: dropping %d checkpoint parameters the model '
                 'does not have: %s', len(unexpected), _summary(unexpected))
  if missing:
    logging.warning('load_pretrained: %d parameters not in %s, kept from '
                    'init_params: %s', len(missing), pretrained_path,
                    _summary(missing))
  if strict and (hard_unexpected or hard_missing):
    parts = []
    if hard_missing:
      parts.append(f'lacks {len(hard_missing)} parameters of {name} '
                   f'({_summary(hard_missing)})')
    if hard_unexpected:
      parts.append(f'has {len(hard_unexpected)} parameters {name} does not '
                   f'({_summary(hard_unexpected)})')
    raise ValueError(f'Checkpoint {pretrained_path} does not fit {name}: '
                     f'{"; ".join(parts)}. Pick the matching model_name or pass '
                     'strict=False.')

  params, mismatched = {}, []
  for key, init_value in sorted(init.items()):
    if key.startswith(head_prefixes[0]) or key not in restored:
      params[key] = init_value
      continue
    value = restored[key]
    if is_head(key) and value.shape != init_value.shape:
      # A new representation_size is a deliberate choice: start that layer anew.
      logging.warning('load_pretrained: %s is %s in the checkpoint but %s in '
                      'the model; kept from init_params', key, value.shape,
                      init_value.shape)
      params[key] = init_value
      continue
    if (key == posemb_key and value.shape != init_value.shape and
        value.shape[-1] == init_value.shape[-1]):
      value = _adapt_posemb(value, init_value, old_token, new_token, grid,
                            pretrained_grid)
    if value.shape != init_value.shape:
      mismatched.append((key, value.shape, init_value.shape))
      continue
    params[key] = value.astype(init_value.dtype, copy=False)
  if mismatched:
    key, got, want = mismatched[0]
    more = (f' (and {len(mismatched) - 1} more mismatched keys)'
            if len(mismatched) > 1 else '')
    raise ValueError(f'Checkpoint {pretrained_path} key {key!r} has shape {got} '
                     f'but {name} expects {want}{more}; check model_name and '
                     'its overrides.')
  return npz.unflatten(params, pretrained_path)


def _adapt_posemb(posemb: np.ndarray, init_posemb: np.ndarray, old_token: bool,
                  new_token: bool, grid: Optional[Sequence[int]],
                  pretrained_grid: Optional[Sequence[int]]) -> np.ndarray:
  """Checkpoint posemb -> the new model's shape (class token, grid)."""
  if old_token and not new_token:
    posemb = posemb[:, 1:]
  elif new_token and not old_token:
    posemb = np.concatenate([init_posemb[:, :1], posemb], axis=1)
  new = grid if grid is not None else init_posemb.shape[1] - int(new_token)
  new_grid = _as_grid(new, 'the new model')
  if new_grid[0] * new_grid[1] + int(new_token) != init_posemb.shape[1]:
    raise ValueError(f'grid={tuple(new_grid)} does not match the model\'s '
                     f'{init_posemb.shape[1]} position embeddings.')
  logging.info('load_pretrained: resized position embeddings %s -> %s',
               posemb.shape, init_posemb.shape)
  return interpolate_posemb(posemb, new_grid, new_token, old_grid=pretrained_grid)
