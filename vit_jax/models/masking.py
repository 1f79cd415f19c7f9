"""Patches as pixels, random token masks and fixed 2D sin-cos position embeddings.

The pieces the masked pre-training models share (vit_jax.models.mae,
vit_jax.models.masked_patch): images cut into the same patches the ViT embeds, a random
subset of the patch tokens per image with the permutation that puts them back in order,
and the fixed position embedding MAE uses.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def patchify(images: jax.Array, patch: tuple[int, int]) -> jax.Array:
  """[n, H, W, C] -> [n, tokens, ph * pw * C], patches in the ViT's row-major order."""
  n, h, w, c = images.shape
  ph, pw = patch
  if h % ph or w % pw:
    raise ValueError(f'Image size {(h, w)} is not divisible by the patch size {patch}.')
  x = images.reshape(n, h // ph, ph, w // pw, pw, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, (h // ph) * (w // pw), ph * pw * c)


def unpatchify(patches: jax.Array, grid: tuple[int, int],
               patch: tuple[int, int]) -> jax.Array:
  """The inverse of patchify: [n, gh * gw, ph * pw * C] -> [n, gh * ph, gw * pw, C]."""
  n = patches.shape[0]
  (gh, gw), (ph, pw) = grid, patch
  c = patches.shape[-1] // (ph * pw)
  x = patches.reshape(n, gh, gw, ph, pw, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, gh * ph, gw * pw, c)


SINCOS_LAYOUTS = ('mae', 'big_vision')


def sincos_posemb(grid: tuple[int, int], width: int, layout: str = 'mae',
                  temperature: float = 10000.0) -> np.ndarray:
  """Fixed 2D sin-cos position embeddings [gh * gw, width].

  A quarter of the channels each: sin and cos of one coordinate times the
  frequencies 1 / temperature^(i / n), i < width / 4. 'mae' (MAE's table): rows then
  columns, n = width / 4; 'big_vision' (posemb_sincos_2d of the plain ViT): columns
  then rows, n = width / 4 - 1 (the last frequency is exactly 1 / temperature).
  """
  if width % 4:
    raise ValueError(f'2D sin-cos position embeddings need a width divisible by 4, '
                     f'got {width}.')
  if layout not in SINCOS_LAYOUTS:
    raise ValueError(f'Unknown sin-cos layout {layout!r}; use one of {SINCOS_LAYOUTS}.')
  quarter = width // 4
  steps = quarter if layout == 'mae' else max(quarter - 1, 1)
  omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / steps)

  def encode(positions: np.ndarray) -> np.ndarray:
    angles = positions.reshape(-1)[:, None] * omega[None]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)

  rows, cols = np.meshgrid(np.arange(grid[0], dtype=np.float64),
                           np.arange(grid[1], dtype=np.float64), indexing='ij')
  first, second = (rows, cols) if layout == 'mae' else (cols, rows)
  return np.concatenate([encode(first), encode(second)], axis=1).astype(np.float32)


class Mask(NamedTuple):
  """A random subset of each image's tokens.

  keep: [n, kept] indices of the kept tokens (in the shuffled order);
  masked: [n, tokens] 1.0 where a token was left out, 0.0 where kept;
  restore: [n, tokens] the permutation that puts [kept, left out] back in order.
  """
  keep: jax.Array
  masked: jax.Array
  restore: jax.Array


def num_kept(tokens: int, mask_ratio: float) -> int:
  """Tokens kept when `mask_ratio` of `tokens` are masked (at least one each)."""
  return max(1, min(tokens - 1, int(round(tokens * (1.0 - mask_ratio)))))


def random_mask(rng: jax.Array, batch: int, tokens: int, mask_ratio: float) -> Mask:
  """Masks round(mask_ratio * tokens) tokens of each image, chosen uniformly."""
  kept = num_kept(tokens, mask_ratio)
  shuffle = jnp.argsort(jax.random.uniform(rng, (batch, tokens)), axis=1)
  restore = jnp.argsort(shuffle, axis=1)
  masked = jnp.concatenate([jnp.zeros((batch, kept)),
                            jnp.ones((batch, tokens - kept))], axis=1)
  return Mask(keep=shuffle[:, :kept],
              masked=jnp.take_along_axis(masked, restore, axis=1),
              restore=restore)


def take_tokens(x: jax.Array, indices: jax.Array) -> jax.Array:
  """x[i, indices[i]] for every image i: [n, tokens, d] -> [n, len(indices[i]), d]."""
  return jnp.take_along_axis(x, indices[..., None], axis=1)
