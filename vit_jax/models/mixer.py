"""MLP-Mixer with the original Linen parameter tree."""
from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import families


class MixerMlp(nn.Module):
  """Two Dense layers with a tanh-GELU between them."""
  mlp_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    y = nn.gelu(nn.Dense(self.mlp_dim, dtype=self.dtype)(x), approximate=True)
    return nn.Dense(x.shape[-1], dtype=self.dtype)(y)


class MixerBlock(nn.Module):
  """Token mixing across patches, then channel mixing, each pre-normed."""
  tokens_mlp_dim: int
  channels_mlp_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name='LayerNorm_0')(x)
    y = jnp.swapaxes(y, 1, 2)
    y = MixerMlp(self.tokens_mlp_dim, dtype=self.dtype, name='token_mixing')(y)
    x = x + jnp.swapaxes(y, 1, 2)
    y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name='LayerNorm_1')(x)
    return x + MixerMlp(self.channels_mlp_dim, dtype=self.dtype,
                        name='channel_mixing')(y)


class MlpMixer(nn.Module):
  """MLP-Mixer: patch stem, Mixer blocks, LayerNorm, global average pool, head."""
  patches: Any
  num_classes: Optional[int]
  num_blocks: int
  hidden_dim: int
  tokens_mlp_dim: int
  channels_mlp_dim: int
  model_name: Optional[str] = None
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs: jax.Array, *, train: bool = False) -> jax.Array:
    del train  # Mixer has no dropout.
    patch = tuple(self.patches['size'])
    x = nn.Conv(self.hidden_dim, patch, strides=patch, padding='VALID',
                dtype=self.dtype, name='stem')(inputs.astype(self.dtype))
    n, h, w, c = x.shape
    x = jnp.reshape(x, (n, h * w, c))
    for i in range(self.num_blocks):
      x = MixerBlock(self.tokens_mlp_dim, self.channels_mlp_dim,
                     dtype=self.dtype, name=f'MixerBlock_{i}')(x)
    x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype,
                     name='pre_head_layer_norm')(x)
    x = jnp.mean(x, axis=1)
    if self.num_classes:
      x = nn.Dense(self.num_classes, dtype=self.dtype, name='head',
                   kernel_init=nn.initializers.zeros)(x)
    return x.astype(jnp.float32)


# ----------------------------------------------------------------------------
# The family record (vit_jax.models.families).

_TOKEN_MIXING = ('MixerBlock_0', 'token_mixing', 'Dense_0', 'kernel')


def forward_flops(c: Mapping[str, Any], res: int, num_classes: int) -> float:
  """Matmul/conv FLOPs of one forward pass of an MLP-Mixer at `res` pixels."""
  d = c['hidden_dim']
  patch = tuple(c['patches']['size'])[0]
  s = (res // patch)**2
  flops = 2.0 * s * patch * patch * 3 * d
  per_block = (2 * 2.0 * d * s * c['tokens_mlp_dim']
               + 2 * 2.0 * s * d * c['channels_mlp_dim'])
  flops += c['num_blocks'] * per_block
  if num_classes:
    flops += 2.0 * d * num_classes
  return flops


def _patch_tokens(model: nn.Module, params: Mapping[str, Any]) -> Optional[int]:
  del model
  # Token mixing is a Dense over the token axis: its input width is the token count.
  kernel = families.get_path(params, _TOKEN_MIXING)
  return None if kernel is None else int(kernel.shape[0])


FAMILY = families.Family(
    name='mixer',
    module=MlpMixer,
    signature=('num_blocks', 'hidden_dim'),
    options={'num_classes': families.KEEP, 'dtype': 'auto'},
    forward_flops=forward_flops,
    width=lambda c: c['hidden_dim'],
    patch_tokens=_patch_tokens,
    rgb_filters=lambda model, params: params['stem']['kernel'],
    head_keys=('head',),
)
