"""Masked patch prediction around a ViT: the ViT paper's self-supervision (its B.1.2).

A chosen `mask_ratio` (50%) of each image's patch embeddings is corrupted, BERT-style:
of those, `replace_mask` (80%) become a learnable [mask] embedding, `replace_random`
(10%) the embedding of another patch of the same image, and the rest (10%) stay as
they are. From each corrupted patch's output token a linear head predicts a target
(`TARGETS`): its mean colour with 3 bits per channel (512 classes), a 4x4 downsized
version with 3-bit colours (16 predictions of 512 classes), or its normalised pixels.
The ViT's parameters stay in their published layout under params['model']; the mask
embedding and the head are params['masked_patch']. The loss lives with the training
objectives (vit_jax.train.objectives).
"""
import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import families
from vit_jax.models import mae
from vit_jax.models import masking
from vit_jax.models import vit as vit_lib

TARGETS = ('mean_color', 'downsized', 'pixels')
KEEP, MASK, RANDOM = 0, 1, 2  # what happens to a corrupted patch
Params = Any


class Corruption(NamedTuple):
  """Which patches are corrupted and how."""
  chosen: jax.Array   # [n, tokens] 1.0 for corrupted patches (the predicted ones)
  action: jax.Array   # [n, tokens] KEEP, MASK or RANDOM (KEEP where not chosen)
  source: jax.Array   # [n, tokens] the patch whose embedding a RANDOM patch takes


def corrupt(rng: jax.Array, batch: int, tokens: int, mask_ratio: float = 0.5,
            replace_mask: float = 0.8, replace_random: float = 0.1) -> Corruption:
  """Chooses round(mask_ratio * tokens) patches per image and what becomes of each."""
  choose_rng, action_rng, source_rng = jax.random.split(rng, 3)
  chosen = masking.random_mask(choose_rng, batch, tokens, mask_ratio).masked
  u = jax.random.uniform(action_rng, (batch, tokens))
  action = jnp.where(u < replace_mask, MASK,
                     jnp.where(u < replace_mask + replace_random, RANDOM, KEEP))
  action = jnp.where(chosen > 0, action, KEEP)
  # Another patch of the same image: an offset of 1..tokens-1 never lands on itself.
  offset = jax.random.randint(source_rng, (batch, tokens), 1, max(tokens, 2))
  source = (jnp.arange(tokens)[None] + offset) % tokens
  return Corruption(chosen, action, source)


def quantize(values: jax.Array, bits: int) -> jax.Array:
  """Values in [-1, 1] -> integers 0 .. 2**bits - 1 (equal-width bins)."""
  levels = 2 ** bits
  unit = (jnp.clip(values, -1.0, 1.0) + 1.0) / 2.0
  return jnp.minimum(jnp.floor(unit * levels), levels - 1).astype(jnp.int32)


def color_classes(rgb: jax.Array, bits: int) -> jax.Array:
  """[..., 3] colours in [-1, 1] -> one class of (2**bits)**3 per colour (r-major)."""
  q = quantize(rgb, bits)
  levels = 2 ** bits
  return (q[..., 0] * levels + q[..., 1]) * levels + q[..., 2]


def mean_color_target(images: jax.Array, patch: tuple[int, int],
                      bits: int = 3) -> jax.Array:
  """[n, tokens] class of each patch's mean colour, `bits` per channel."""
  pixels = masking.patchify(images.astype(jnp.float32), patch)
  mean = pixels.reshape(pixels.shape[:2] + (-1, 3)).mean(axis=2)
  return color_classes(mean, bits)


def downsized_target(images: jax.Array, patch: tuple[int, int], bits: int = 3,
                     size: int = 4) -> jax.Array:
  """[n, tokens, size * size] classes of each patch shrunk to size x size colours."""
  ph, pw = patch
  if ph % size or pw % size:
    raise ValueError(f'The downsized target needs patches divisible by {size}, got '
                     f'{patch}; use target=mean_color or pixels.')
  n, h, w, _ = images.shape
  cells = images.astype(jnp.float32).reshape(
      n, h // ph, size, ph // size, w // pw, size, pw // size, 3).mean(axis=(3, 6))
  # [n, gh, size, gw, size, 3] -> [n, gh * gw, size * size, 3]
  cells = cells.transpose(0, 1, 3, 2, 4, 5).reshape(
      n, (h // ph) * (w // pw), size * size, 3)
  return color_classes(cells, bits)


@dataclasses.dataclass(frozen=True)
class MaskedPatchPredictor:
  """A ViT whose corrupted patch tokens predict a target; params {'model', 'masked_patch'}."""
  model: vit_lib.VisionTransformer
  mask_ratio: float  # the defaults: vit_jax.train.objectives' masked_patch factory
  replace_mask: float
  replace_random: float
  target: str
  bits: int
  downsized: int

  def __post_init__(self):
    mae.check_vit(self.model, 'masked_patch')
    mae.check_ratio(self.mask_ratio, 'config.objectives.masked_patch.mask_ratio')
    for key in ('replace_mask', 'replace_random'):
      value = getattr(self, key)
      if not 0.0 <= value <= 1.0:
        raise ValueError(f'config.objectives.masked_patch.{key}={value} must lie in '
                         '[0, 1].')
    if self.replace_mask + self.replace_random > 1.0:
      raise ValueError('config.objectives.masked_patch.replace_mask + replace_random '
                       f'= {self.replace_mask + self.replace_random} exceeds 1.')
    if self.target not in TARGETS:
      raise ValueError(f'config.objectives.masked_patch.target={self.target!r} is '
                       f'unknown; use one of {", ".join(TARGETS)}.')
    if not 1 <= self.bits <= 8:
      raise ValueError(f'config.objectives.masked_patch.bits={self.bits} must be '
                       '1..8.')
    ph, pw = tuple(self.model.patches['size'])
    if self.target == 'downsized' and (ph % self.downsized or pw % self.downsized):
      raise ValueError(f'config.objectives.masked_patch.target=downsized needs patches '
                       f'divisible by downsized={self.downsized}, got {(ph, pw)}; use '
                       'target=mean_color or pixels.')

  @property
  def patch(self) -> tuple[int, int]:
    """Pixels per patch side (rows, cols)."""
    return tuple(self.model.patches['size'])

  @property
  def classes(self) -> int:
    """Classes of one colour prediction: (2**bits)**3."""
    return (2 ** self.bits) ** 3

  @property
  def outputs(self) -> int:
    """Head outputs per patch."""
    if self.target == 'mean_color':
      return self.classes
    if self.target == 'downsized':
      return self.downsized ** 2 * self.classes
    ph, pw = self.patch
    return ph * pw * 3

  def head(self) -> nn.Dense:
    """The linear prediction head on the output tokens."""
    return nn.Dense(self.outputs, dtype=self.model.dtype,
                    kernel_init=nn.initializers.zeros)

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """Fresh parameters: the ViT's, the [mask] embedding and the head."""
    model_rng, mask_rng, head_rng = jax.random.split(rng, 3)
    params = self.model.init(model_rng, jnp.zeros(image_shape, jnp.float32))['params']
    width = self.model.hidden_size
    own = {'mask_embedding': 0.02 * jax.random.normal(mask_rng, (1, 1, width)),
           'head': self.head().init(head_rng, jnp.zeros((1, width)))['params']}
    return {'model': params, 'masked_patch': own}

  def predict(self, params: Params, images: jax.Array, rng: jax.Array, *,
              train: bool = False) -> tuple[jax.Array, Corruption]:
    """(head outputs of every patch token [n, tokens, outputs], the corruption)."""
    vit, own = params['model'], params['masked_patch']
    family = families.of_module(self.model)
    # Position embeddings come after the corruption, inside encode (as the ViT adds them).
    prefix, x = family.embed(self.model, vit, images, add_posemb=False)
    n, tokens, _ = x.shape
    corrupt_rng, dropout_rng = jax.random.split(rng)
    c = corrupt(corrupt_rng, n, tokens, self.mask_ratio, self.replace_mask,
                self.replace_random)
    mask_embedding = jnp.broadcast_to(own['mask_embedding'].astype(x.dtype), x.shape)
    x = jnp.where((c.action == MASK)[..., None], mask_embedding,
                  jnp.where((c.action == RANDOM)[..., None],
                            masking.take_tokens(x, c.source), x))
    x = jnp.concatenate([prefix, x], axis=1)
    out = family.encode(self.model, vit, x, train=train, rngs={'dropout': dropout_rng},
                        add_posemb=True)
    return self.head().apply({'params': own['head']}, out[:, prefix.shape[1]:]), c

  def targets(self, images: jax.Array) -> jax.Array:
    """The target of every patch: classes [n, tokens(, cells)] or pixels [n, tokens, P]."""
    if self.target == 'mean_color':
      return mean_color_target(images, self.patch, self.bits)
    if self.target == 'downsized':
      return downsized_target(images, self.patch, self.bits, self.downsized)
    return mae.pixel_targets(images, self.patch)
