"""MLP-Mixer with the original Linen parameter tree."""
import re
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
# The family (vit_jax.models.families): what the rest of the package asks about a Mixer.

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


# The sizes of a Mixer, by the names error messages give them.
_SIZES = {'width': 'hidden_dim', 'blocks': 'num_blocks', 'token MLP': 'tokens_mlp_dim',
          'channel MLP': 'channels_mlp_dim'}


class MixerFamily(families.Family):
  """MLP-Mixer: no position embedding, so its token count is fixed by its parameters."""
  name = 'mixer'
  module = MlpMixer
  signature = ('num_blocks', 'hidden_dim')
  head_keys = ('head',)

  def forward_flops(self, fields: Mapping[str, Any], res: int, num_classes: int) -> float:
    """Matmul FLOPs of one forward pass at `res` pixels."""
    return forward_flops(fields, res, num_classes)

  def width(self, fields: Mapping[str, Any]) -> int:
    """The channel width (hidden_dim)."""
    return fields['hidden_dim']

  def patch_tokens(self, model: nn.Module, params: families.Params) -> Optional[int]:
    """Token mixing is a Dense over the token axis: its input width is the token count."""
    del model
    kernel = families.get_path(params, _TOKEN_MIXING)
    return None if kernel is None else int(kernel.shape[0])

  def rgb_filters(self, model: nn.Module, params: families.Params) -> Any:
    """The stem's kernel on RGB pixels."""
    del model
    return params['stem']['kernel']

  def owns(self, params: families.Params) -> bool:
    """A Mixer stem."""
    return 'stem' in params

  def architecture(self, params: families.Params, source: str) -> dict:
    """Patch size, width, blocks, MLP widths and head of a Mixer tree."""
    stem = families.shape_at(params, 'stem', 'kernel')
    tok = families.shape_at(params, 'MixerBlock_0', 'token_mixing', 'Dense_0', 'kernel')
    ch = families.shape_at(params, 'MixerBlock_0', 'channel_mixing', 'Dense_0', 'kernel')
    if stem is None or tok is None or ch is None or len(stem) != 4:
      raise ValueError(f'{source}: a Mixer stem but no Mixer blocks; this fits '
                       'no vit_jax model.')
    blocks = sum(1 for k in params if re.fullmatch(r'MixerBlock_\d+', k))
    head = families.shape_at(params, 'head', 'kernel')
    return {'patches': {'size': tuple(stem[:2])}, 'hidden_dim': stem[3],
            'num_blocks': blocks, 'tokens_mlp_dim': tok[1],
            'channels_mlp_dim': ch[1], 'num_classes': head[1] if head else 0}

  def misfits(self, cfg: Mapping[str, Any], arch: Mapping[str, Any],
              ignore_heads: bool) -> list[str]:
    """Width, blocks and MLP widths that differ from the preset."""
    del ignore_heads
    return [f'{key} {arch[key]} != {cfg[key]}' for key in _SIZES.values()
            if cfg[key] != arch[key]]

  def describe(self, arch: Mapping[str, Any]) -> str:
    """'Mixer width 768, 12 blocks, patch 16'."""
    return (f'Mixer width {arch["hidden_dim"]}, {arch["num_blocks"]} blocks, '
            f'patch {arch["patches"]["size"][0]}')

  def size_pairs(self, got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple]:
    """Width, blocks and MLP widths of two architectures."""
    return {name: (got[key], want[key]) for name, key in _SIZES.items()}

  def base_preset(self, arch: Mapping[str, Any]) -> str:
    """Mixer-B_16."""
    del arch
    return 'Mixer-B_16'


FAMILY = MixerFamily()
