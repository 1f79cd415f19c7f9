"""Vision Transformer (and its ResNet hybrid) with the original Linen parameter tree."""
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import attention as attention_lib
from vit_jax.models import resnet

CLASSIFIERS = ('token', 'gap', 'unpooled', 'token_unpooled')


class AddPositionEmbs(nn.Module):
  """Adds a learned position embedding of shape (1, tokens, width)."""
  posemb_init: Any = nn.initializers.normal(stddev=0.02)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    pe = self.param('pos_embedding', self.posemb_init, (1,) + x.shape[1:])
    if pe.shape[1:] != x.shape[1:]:
      raise ValueError(
          f'Position embedding has shape {pe.shape} but the input has '
          f'{x.shape[1]} tokens of width {x.shape[2]}; interpolate it with '
          'vit_jax.checkpoint.load_pretrained for a new resolution.')
    return x + pe.astype(x.dtype)


class MlpBlock(nn.Module):
  """Dense -> tanh-GELU -> Dropout -> Dense -> Dropout."""
  mlp_dim: int
  dtype: Any = jnp.float32
  out_dim: Optional[int] = None
  dropout_rate: float = 0.1
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out_dim = x.shape[-1] if self.out_dim is None else self.out_dim
    dense = lambda n: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6))
    x = nn.gelu(dense(self.mlp_dim)(x), approximate=True)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    x = dense(out_dim)(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)


def drop_path(module: nn.Module, x: jax.Array, rate: float,
              deterministic: bool) -> jax.Array:
  """Stochastic depth: zeroes a residual branch per example, rescaling the rest."""
  if deterministic or rate == 0.0:
    return x
  keep = 1.0 - rate
  mask = jax.random.bernoulli(module.make_rng('dropout'), keep,
                              (x.shape[0],) + (1,) * (x.ndim - 1))
  return jnp.where(mask, x / keep, jnp.zeros_like(x))


class Encoder1DBlock(nn.Module):
  """Pre-LayerNorm transformer block: x + attn(LN(x)), then x + mlp(LN(x))."""
  mlp_dim: int
  num_heads: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  stochastic_depth: float = 0.0
  deterministic: bool = True
  attention: str = 'xla'

  @nn.compact
  def __call__(self, inputs: jax.Array) -> jax.Array:
    norm = lambda name: nn.LayerNorm(  # noqa: E731
        epsilon=1e-6, dtype=self.dtype, name=name)
    x = norm('LayerNorm_0')(inputs)
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        dropout_rate=self.attention_dropout_rate,
        deterministic=self.deterministic, implementation=self.attention,
        name='MultiHeadDotProductAttention_0')(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    x = inputs + drop_path(self, x, self.stochastic_depth, self.deterministic)
    y = norm('LayerNorm_1')(x)
    y = MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype,
                 dropout_rate=self.dropout_rate,
                 deterministic=self.deterministic, name='MlpBlock_0')(y)
    return x + drop_path(self, y, self.stochastic_depth, self.deterministic)


class Encoder(nn.Module):
  """Position embedding, `num_layers` blocks and the final LayerNorm."""
  num_layers: int
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  add_position_embedding: bool = True
  dtype: Any = jnp.float32
  attention: str = 'xla'
  remat: bool = False
  stochastic_depth: float = 0.0

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    if self.add_position_embedding:
      x = AddPositionEmbs(name='posembed_input')(x)
      x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
    block_cls = nn.remat(Encoder1DBlock) if self.remat else Encoder1DBlock
    for i in range(self.num_layers):
      # Stochastic depth grows linearly with depth, 0 at the first block.
      rate = self.stochastic_depth * i / max(self.num_layers - 1, 1)
      x = block_cls(
          mlp_dim=self.mlp_dim, num_heads=self.num_heads, dtype=self.dtype,
          dropout_rate=self.dropout_rate,
          attention_dropout_rate=self.attention_dropout_rate,
          stochastic_depth=rate, deterministic=not train,
          attention=self.attention, name=f'encoderblock_{i}')(x)
    return nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name='encoder_norm')(x)


class VisionTransformer(nn.Module):
  """ViT: patch embedding (optionally of a ResNet's features) + Transformer + head.

  Takes NHWC images in [-1, 1]; returns float32 logits (or features when
  num_classes is None/0 or the classifier is unpooled).
  """
  num_classes: Optional[int]
  patches: Any
  transformer: Any
  hidden_size: int
  resnet: Optional[Any] = None
  representation_size: Optional[int] = None
  classifier: str = 'token'
  head_bias_init: float = 0.0
  model_name: Optional[str] = None
  dtype: Any = jnp.float32
  attention: str = 'xla'
  remat: bool = False
  stochastic_depth: float = 0.0

  @nn.compact
  def __call__(self, inputs: jax.Array, *, train: bool = False) -> jax.Array:
    if self.classifier not in CLASSIFIERS:
      raise ValueError(f'Unknown classifier {self.classifier!r}; use one of '
                       f'{CLASSIFIERS}.')
    if inputs.ndim != 4:
      raise ValueError(f'Expected NHWC images, got shape {inputs.shape}.')
    x = inputs.astype(self.dtype)
    if self.resnet is not None:
      x = resnet.apply_resnet(x, tuple(self.resnet['num_layers']),
                              self.resnet['width_factor'], self.dtype)
    patch = tuple(self.patches['size'])
    if x.shape[1] % patch[0] or x.shape[2] % patch[1]:
      raise ValueError(f'Image/feature size {x.shape[1:3]} is not divisible '
                       f'by the patch size {patch}.')
    x = nn.Conv(self.hidden_size, patch, strides=patch, padding='VALID',
                dtype=self.dtype, name='embedding')(x)
    n, h, w, c = x.shape
    x = jnp.reshape(x, (n, h * w, c))
    if self.classifier in ('token', 'token_unpooled'):
      cls = self.param('cls', nn.initializers.zeros, (1, 1, c))
      x = jnp.concatenate([jnp.tile(cls.astype(x.dtype), (n, 1, 1)), x], axis=1)
    x = Encoder(name='Transformer', dtype=self.dtype, attention=self.attention,
                remat=self.remat, stochastic_depth=self.stochastic_depth,
                **dict(self.transformer))(x, train=train)
    if self.classifier == 'token':
      x = x[:, 0]
    elif self.classifier == 'gap':
      x = jnp.mean(x, axis=1)
    if self.representation_size:
      x = nn.tanh(nn.Dense(self.representation_size, dtype=self.dtype,
                           name='pre_logits')(x))
    if self.num_classes:
      x = nn.Dense(self.num_classes, dtype=self.dtype, name='head',
                   kernel_init=nn.initializers.zeros,
                   bias_init=nn.initializers.constant(self.head_bias_init))(x)
    return x.astype(jnp.float32)
