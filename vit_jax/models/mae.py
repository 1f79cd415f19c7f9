"""Masked autoencoder (He et al., MAE) around a ViT: encode the visible patches, decode all.

`MaskedAutoencoder(vit)` keeps the ViT's parameters in their published layout under
params['model'] and adds a light decoder under params['decoder']. `encode` runs the
ViT's own Transformer on the visible 25% of the patch tokens only (plus its prefix
tokens: class, distillation, registers), which is where MAE's speed comes from; the
ViT family's embed/encode (vit_jax.models.families) do the ViT's part; `decode` puts a shared learnable mask
token at every left-out position, restores the token order and predicts each patch's
pixels. The loss lives with the training objectives (vit_jax.train.objectives).
"""
import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.models import families
from vit_jax.models import masking
from vit_jax.models import vit as vit_lib

POSEMBS = ('sincos2d', 'learn')
Params = Any


def check_vit(model: nn.Module, objective: str) -> None:
  """One-line error unless `model` is a plain ViT (patch tokens of pixels)."""
  family = next((f for f in families.FAMILIES.values() if isinstance(model, f.module)),
                None)
  if family is None or family.embed is None or family.encode is None:
    raise ValueError(f'config.objective={objective!r} needs a ViT (patch tokens); '
                     f'{type(model).__name__} has none. Choose a ViT-* model_name.')
  if model.resnet is not None:
    raise ValueError(f'config.objective={objective!r} needs a ViT whose patches are '
                     f'pixels; {model.model_name or "this hybrid"} embeds ResNet '
                     'features. Choose a ViT-* model_name.')
  if model.classifier in ('unpooled', 'token_unpooled'):
    raise ValueError(f'config.objective={objective!r} needs a pooled classifier '
                     f'(token or gap), got {model.classifier!r}.')


def check_ratio(value: float, key: str) -> None:
  """One-line error unless 0 < value < 1."""
  if not 0.0 < value < 1.0:
    raise ValueError(f'{key}={value} must lie strictly between 0 and 1.')


def patch_grid(model: vit_lib.VisionTransformer,
               image_shape: tuple[int, ...]) -> tuple[int, int]:
  """The (rows, cols) of patch tokens the ViT cuts an [n, H, W, C] image into."""
  ph, pw = tuple(model.patches['size'])
  if image_shape[1] % ph or image_shape[2] % pw:
    raise ValueError(f'Image size {tuple(image_shape[1:3])} is not divisible by the '
                     f'patch size {(ph, pw)}.')
  return image_shape[1] // ph, image_shape[2] // pw


def posemb_table(grid: tuple[int, int], width: int, prefix: int) -> np.ndarray:
  """[1, prefix + tokens, width] fixed sin-cos embeddings (zeros at the prefix tokens).

  `prefix` counts the prefix tokens the embedding covers (a bool: a class token).
  """
  table = masking.sincos_posemb(grid, width)
  table = np.concatenate([np.zeros((int(prefix), width), np.float32), table])
  return table[None]


class Decoder(nn.Module):
  """MAE's decoder: embed, mask tokens in, restore order, add positions, blocks, pixels."""
  width: int
  depth: int
  num_heads: int
  mlp_dim: int
  patch_dim: int       # pixels per patch (ph * pw * 3)
  grid: tuple[int, int]
  prefix_tokens: int   # the encoder's leading tokens (class, distillation, registers)
  posemb: str = 'sincos2d'
  dtype: Any = jnp.float32
  attention: str = 'xla'  # the encoder's kernel choice ('auto': cuDNN where it runs)

  @nn.compact
  def __call__(self, latent: jax.Array, restore: jax.Array, *,
               train: bool = False) -> jax.Array:
    """latent [n, prefix + kept, D], restore [n, tokens] -> pixels [n, tokens, patch_dim]."""
    dense = lambda n, name: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(), name=name)
    x = dense(self.width, 'embed')(latent)
    n, tokens = restore.shape
    lead = self.prefix_tokens
    visible = x[:, lead:]
    mask_token = self.param('mask_token', nn.initializers.normal(0.02),
                            (1, 1, self.width))
    filler = jnp.broadcast_to(mask_token.astype(x.dtype),
                              (n, tokens - visible.shape[1], self.width))
    x_full = masking.take_tokens(jnp.concatenate([visible, filler], axis=1), restore)
    x = jnp.concatenate([x[:, :lead], x_full], axis=1)
    if self.posemb == 'sincos2d':
      pe = jnp.asarray(posemb_table(self.grid, self.width, lead))
    else:
      pe = self.param('pos_embedding', nn.initializers.normal(0.02),
                      (1, lead + tokens, self.width))
    x = x + pe.astype(x.dtype)
    block = vit_lib.BlockConfig(mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                                dtype=self.dtype, dropout_rate=0.0,
                                attention_dropout_rate=0.0, attention=self.attention)
    x = vit_lib.Encoder(config=block, num_layers=self.depth, add_position_embedding=False,
                        name='Transformer')(x, train=train)
    return dense(self.patch_dim, 'pred')(x[:, lead:]).astype(jnp.float32)


class Encoded(NamedTuple):
  """The encoder's output on the visible tokens and the mask that chose them."""
  latent: jax.Array   # [n, cls + kept, D]
  mask: masking.Mask


@dataclasses.dataclass(frozen=True)
class MaskedAutoencoder:
  """A ViT encoder on visible patches plus MAE's decoder; params {'model', 'decoder'}."""
  model: vit_lib.VisionTransformer
  mask_ratio: float  # the defaults: vit_jax.train.objectives' mae factory
  decoder_width: int
  decoder_depth: int
  decoder_heads: int
  decoder_mlp_dim: int
  posemb: str

  def __post_init__(self):
    check_vit(self.model, 'mae')
    check_ratio(self.mask_ratio, 'config.objectives.mae.mask_ratio')
    if self.posemb not in POSEMBS:
      raise ValueError(f'config.objectives.mae.posemb={self.posemb!r} is unknown; use '
                       f'one of {", ".join(POSEMBS)}.')
    for key in ('decoder_width', 'decoder_depth', 'decoder_heads', 'decoder_mlp_dim'):
      if getattr(self, key) < 1:
        raise ValueError(f'config.objectives.mae.{key}={getattr(self, key)} must be '
                         'a positive integer.')
    if self.decoder_width % self.decoder_heads:
      raise ValueError(f'config.objectives.mae.decoder_width={self.decoder_width} is '
                       f'not divisible by decoder_heads={self.decoder_heads}.')
    if self.posemb == 'sincos2d' and (self.model.hidden_size % 4 or
                                      self.decoder_width % 4):
      raise ValueError('config.objectives.mae.posemb=sincos2d needs widths divisible '
                       f'by 4 (encoder {self.model.hidden_size}, decoder '
                       f'{self.decoder_width}); use posemb=learn.')

  @property
  def patch(self) -> tuple[int, int]:
    """Pixels per patch side (rows, cols)."""
    return tuple(self.model.patches['size'])

  @property
  def family(self) -> families.Family:
    """The ViT's family record: its prefix tokens, embed and encode."""
    return families.of_module(self.model)

  @property
  def prefix(self) -> int:
    """Tokens before the patches (class, distillation, registers)."""
    return self.family.prefix_tokens(self.model)

  def decoder(self, grid: tuple[int, int]) -> Decoder:
    """The decoder module for a patch grid."""
    ph, pw = self.patch
    return Decoder(width=self.decoder_width, depth=self.decoder_depth,
                   num_heads=self.decoder_heads, mlp_dim=self.decoder_mlp_dim,
                   patch_dim=ph * pw * 3, grid=grid, prefix_tokens=self.prefix,
                   posemb=self.posemb, dtype=self.model.dtype,
                   attention=self.model.attention)

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """Fresh parameters; with sin-cos positions the ViT's table holds them (exported)."""
    grid = patch_grid(self.model, image_shape)
    model_rng, decoder_rng = jax.random.split(rng)
    params = self.model.init(model_rng, jnp.zeros(image_shape, jnp.float32))['params']
    if self.posemb == 'sincos2d':
      params = _replace_posemb(params, self._positions(params, grid),
                               self.family.posemb_path)
    kept = masking.num_kept(grid[0] * grid[1], self.mask_ratio)
    latent = jnp.zeros((1, self.prefix + kept, self.model.hidden_size))
    restore = jnp.arange(grid[0] * grid[1])[None]
    decoder = self.decoder(grid).init(decoder_rng, latent, restore)['params']
    return {'model': params, 'decoder': decoder}

  def _positions(self, params: Params, grid: tuple[int, int]) -> Any:
    """The sin-cos table (fixed: not the trained parameter), or None for learned ones."""
    if self.posemb != 'sincos2d':
      return None
    return jnp.asarray(posemb_table(grid, self.model.hidden_size,
                                    self.family.posemb_prefix_tokens(self.model)))

  def encode(self, params: Params, images: jax.Array, rng: jax.Array, *,
             train: bool = False) -> Encoded:
    """Runs the ViT's Transformer on a random (1 - mask_ratio) of each image's patches."""
    vit = params['model']
    grid = patch_grid(self.model, images.shape)
    prefix, x = self.family.embed(self.model, vit, images,
                                  posemb=self._positions(vit, grid))
    mask_rng, dropout_rng = jax.random.split(rng)
    mask = masking.random_mask(mask_rng, x.shape[0], x.shape[1], self.mask_ratio)
    x = jnp.concatenate([prefix, masking.take_tokens(x, mask.keep)], axis=1)
    latent = self.family.encode(self.model, vit, x, train=train,
                                rngs={'dropout': dropout_rng})
    return Encoded(latent, mask)

  def decode(self, params: Params, encoded: Encoded, grid: tuple[int, int], *,
             train: bool = False) -> jax.Array:
    """Predicted pixels of every patch [n, tokens, ph * pw * 3] (normalised if trained so)."""
    return self.decoder(grid).apply({'params': params['decoder']}, encoded.latent,
                                    encoded.mask.restore, train=train)

  def predict(self, params: Params, images: jax.Array, rng: jax.Array, *,
              train: bool = False) -> tuple[jax.Array, masking.Mask]:
    """(predicted pixels of every patch, the mask) for a batch of images."""
    grid = patch_grid(self.model, images.shape)
    encoded = self.encode(params, images, rng, train=train)
    return self.decode(params, encoded, grid, train=train), encoded.mask

  def flops_per_image(self, resolution: int) -> float:
    """Matmul FLOPs of one forward pass: encoder on the kept tokens, decoder on all."""
    ph, pw = self.patch
    tokens = (resolution // ph) * (resolution // pw)
    lead = self.prefix
    kept = masking.num_kept(tokens, self.mask_ratio)
    t = dict(self.model.transformer)
    d = self.model.hidden_size
    embed = 2.0 * tokens * ph * pw * 3 * d
    swiglu = self.model.activation == 'swiglu'
    enc = vit_lib.transformer_flops(lead + kept, d, t['mlp_dim'], t['num_layers'],
                                    mlp_matmuls=3 if swiglu else 2)
    dec = (2.0 * (lead + kept) * d * self.decoder_width
           + vit_lib.transformer_flops(lead + tokens, self.decoder_width,
                                       self.decoder_mlp_dim, self.decoder_depth)
           + 2.0 * tokens * self.decoder_width * ph * pw * 3)
    return embed + enc + dec


def _patch_stats(patches: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Each patch's pixel mean and standard deviation (eps 1e-6 on the variance)."""
  mean = patches.mean(axis=-1, keepdims=True)
  return mean, jnp.sqrt(patches.var(axis=-1, keepdims=True) + 1e-6)


def pixel_targets(images: jax.Array, patch: tuple[int, int],
                  normalize: bool = True) -> jax.Array:
  """The patches' pixels [n, tokens, ph * pw * 3], each patch to mean 0 / variance 1."""
  target = masking.patchify(images.astype(jnp.float32), patch)
  if not normalize:
    return target
  mean, std = _patch_stats(target)
  return (target - mean) / std


def denormalize(pred: jax.Array, patches: jax.Array) -> jax.Array:
  """Predicted normalised patches back in pixel units, with each true patch's mean/std."""
  mean, std = _patch_stats(patches)
  return pred * std + mean


def reconstruction(mae: MaskedAutoencoder, params: Params, images: jax.Array,
                   rng: jax.Array, normalized: bool = True
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(masked input, reconstruction, reconstruction pasted into the visible patches).

  All three are images like the input, with the left-out patches grey in the first.
  """
  grid = patch_grid(mae.model, images.shape)
  pred, mask = mae.predict(params, images, rng)
  patches = masking.patchify(images.astype(jnp.float32), mae.patch)
  if normalized:
    pred = denormalize(pred, patches)
  masked = mask.masked[..., None]
  grey = masking.unpatchify(patches * (1 - masked), grid, mae.patch)
  recon = masking.unpatchify(pred, grid, mae.patch)
  pasted = masking.unpatchify(patches * (1 - masked) + pred * masked, grid, mae.patch)
  return grey, jnp.clip(recon, -1, 1), jnp.clip(pasted, -1, 1)


def _replace_posemb(params: Params, table: jax.Array, path: tuple[str, ...]) -> Params:
  """`params` with the leaf at `path` (the family's posemb_path) replaced by `table`."""
  if len(path) == 1:
    return {**params, path[0]: table}
  return {**params, path[0]: _replace_posemb(dict(params[path[0]]), table, path[1:])}
