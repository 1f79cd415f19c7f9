"""Learned position embeddings resized to a new patch grid (numpy, any prefix tokens)."""
from typing import Optional, Sequence, Union

from absl import logging
import numpy as np
import scipy.ndimage

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
                       has_class_token: Union[bool, int],
                       old_grid: Optional[Sequence[int]] = None) -> np.ndarray:
  """Resizes (1, N, D) position embeddings bilinearly on their 2D patch grid.

  `has_class_token` is the number of leading (prefix) tokens the embedding
  covers: a bool for one class token or none, or a count (class + distillation
  + registers). `new_shape_or_grid` is the new token count N' (those tokens
  included; the rest must form a square grid), a (1, N', D) shape, or the new
  patch grid (h, w). `old_grid` gives the old grid when it is not square. The
  prefix tokens' embeddings are kept as they are. The resize is
  scipy.ndimage.zoom(order=1) as in the original vit_jax (grid corners stay on
  corners), so fine-tuned checkpoints reproduce its numbers.
  """
  posemb = np.asarray(posemb)
  if posemb.ndim != 3 or posemb.shape[0] != 1:
    raise ValueError(f'Position embeddings must have shape (1, tokens, width), '
                     f'got {posemb.shape}.')
  ntok = int(has_class_token)
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
                     f'have {len(grid_emb)} (plus {ntok} prefix tokens).')
  if old == new_grid:
    return posemb
  logging.info('interpolate_posemb: grid %s -> %s', old, new_grid)
  grid_emb = grid_emb.reshape(old[0], old[1], -1)
  zoom = (new_grid[0] / old[0], new_grid[1] / old[1], 1)
  grid_emb = scipy.ndimage.zoom(grid_emb, zoom, order=1)
  grid_emb = grid_emb.reshape(1, new_grid[0] * new_grid[1], -1)
  return np.concatenate([tok, grid_emb], axis=1)
