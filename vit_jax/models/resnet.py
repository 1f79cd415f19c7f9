"""BiT-style ResNet parts of the hybrid: weight-standardised convs and GroupNorm."""
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def weight_standardize(w: jax.Array, axis: Sequence[int], eps: float) -> jax.Array:
  """Normalises a conv kernel to zero mean and unit std per output channel.

  eps is added to the standard deviation (not the variance), as in the
  published BiT/hybrid checkpoints: small kernels are sensitive to this.
  """
  w = w - jnp.mean(w, axis=axis, keepdims=True)
  return w / (jnp.std(w, axis=axis, keepdims=True) + eps)


class StdConv(nn.Conv):
  """A bias-free convolution whose kernel is weight-standardised at every call."""

  def param(self, name: str, *args, **kwargs):
    value = super().param(name, *args, **kwargs)
    if name == 'kernel':
      # Standardise in float32: bf16 variance would lose the small kernels.
      value = weight_standardize(value.astype(jnp.float32), axis=(0, 1, 2),
                                 eps=1e-5)
    return value


class ResidualUnit(nn.Module):
  """Bottleneck unit: 1x1 -> 3x3 (strided) -> 1x1, GroupNorm after each conv."""
  features: int
  strides: tuple = (1, 1)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    conv = lambda f, k, s, name: StdConv(  # noqa: E731
        f, k, strides=s, use_bias=False, dtype=self.dtype, name=name)
    norm = lambda name, **kw: nn.GroupNorm(dtype=self.dtype, name=name, **kw)  # noqa: E731
    out = self.features * 4
    residual = x
    if x.shape[-1] != out or tuple(self.strides) != (1, 1):
      residual = conv(out, (1, 1), self.strides, 'conv_proj')(residual)
      residual = norm('gn_proj')(residual)
    y = nn.relu(norm('gn1')(conv(self.features, (1, 1), (1, 1), 'conv1')(x)))
    y = nn.relu(norm('gn2')(conv(self.features, (3, 3), self.strides,
                                 'conv2')(y)))
    # Zero-initialised last norm: each unit starts as the identity.
    y = norm('gn3', scale_init=nn.initializers.zeros)(
        conv(out, (1, 1), (1, 1), 'conv3')(y))
    return nn.relu(residual + y)


class ResNetStage(nn.Module):
  """A stage of `block_size` units; the first one may downsample."""
  block_size: int
  nout: int
  first_stride: tuple
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for i in range(self.block_size):
      stride = self.first_stride if i == 0 else (1, 1)
      x = ResidualUnit(self.nout, strides=stride, dtype=self.dtype,
                       name=f'unit{i + 1}')(x)
    return x


def apply_resnet(x: jax.Array, num_layers: Sequence[int], width_factor: float,
                 dtype: Any) -> jax.Array:
  """Runs the hybrid's root block and stages; call from a compact method.

  The parameters (conv_root, gn_root, block1, ...) then sit at the top level of
  the calling module, as in the published checkpoints.
  """
  width = int(64 * width_factor)
  x = StdConv(width, (7, 7), strides=(2, 2), use_bias=False, dtype=dtype,
              name='conv_root')(x)
  x = nn.relu(nn.GroupNorm(dtype=dtype, name='gn_root')(x))
  x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding='SAME')
  for i, block_size in enumerate(num_layers):
    x = ResNetStage(block_size, nout=width * 2**i,
                    first_stride=(1, 1) if i == 0 else (2, 2), dtype=dtype,
                    name=f'block{i + 1}')(x)
  return x


def _conv_flops(out_hw: int, k: int, cin: int, cout: int) -> float:
  return 2.0 * out_hw * k * k * cin * cout


def forward_flops(res: int, num_layers: Sequence[int],
                  width_factor: float) -> tuple[float, int, int]:
  """Forward FLOPs, output side length and channels of the hybrid's BiT ResNet at `res` px."""
  width = int(64 * width_factor)
  s = math.ceil(res / 2)  # 7x7 root conv, stride 2, SAME.
  flops = _conv_flops(s * s, 7, 3, width)
  s = math.ceil(s / 2)  # 3x3 max pool, stride 2.
  cin = width
  for i, units in enumerate(num_layers):
    f = width * 2**i
    for u in range(units):
      stride = 2 if (i > 0 and u == 0) else 1
      s_out = math.ceil(s / stride)
      flops += _conv_flops(s * s, 1, cin, f)
      flops += _conv_flops(s_out * s_out, 3, f, f)
      flops += _conv_flops(s_out * s_out, 1, f, 4 * f)
      if cin != 4 * f or stride != 1:
        flops += _conv_flops(s_out * s_out, 1, cin, 4 * f)
      cin, s = 4 * f, s_out
  return flops, s, cin
