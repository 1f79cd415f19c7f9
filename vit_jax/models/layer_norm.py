"""LayerNorm with flax's parameters (`scale`, `bias`) and a closed-form backward pass.

Statistics in float32 (two passes: mean, then the centred variance), the output in the
module's dtype. The backward pass is the closed form PyTorch uses: it keeps the
normalised input and the inverse deviation per row. Autodiff of flax's LayerNorm kept
broadcast copies of the scale and the deviation that XLA:CPU wrote to memory, and split
each norm into about nine small ops: this form took 7% less CPU time per quickstart
training step on one thread (README, Performance). Values agree with flax's to about 1e-7.
"""
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float) -> jax.Array:
  """LayerNorm of x over its last axis (statistics in float32), in x's dtype."""
  return _layer_norm_fwd(x, scale, bias, epsilon)[0]


def _layer_norm_fwd(x, scale, bias, epsilon):
  x32 = x.astype(jnp.float32)
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  centred = x32 - mean
  rstd = jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + epsilon)
  xhat = centred * rstd
  y = xhat * scale.astype(jnp.float32) + bias.astype(jnp.float32)
  return y.astype(x.dtype), (xhat, rstd, scale)


def _layer_norm_bwd(epsilon, res, g):
  del epsilon
  xhat, rstd, scale = res  # g has the input's dtype (the output's)
  g32 = g.astype(jnp.float32)
  gs = g32 * scale.astype(jnp.float32)
  dx = rstd * (gs - jnp.mean(gs, axis=-1, keepdims=True)
               - xhat * jnp.mean(gs * xhat, axis=-1, keepdims=True))
  lead = tuple(range(g.ndim - 1))
  return (dx.astype(g.dtype), jnp.sum(g32 * xhat, axis=lead).astype(scale.dtype),
          jnp.sum(g32, axis=lead).astype(scale.dtype))


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


class LayerNorm(nn.Module):
  """flax's LayerNorm (same `scale`/`bias` parameters), computed by `layer_norm`."""
  epsilon: float = 1e-6
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    width = x.shape[-1]
    scale = self.param('scale', nn.initializers.ones, (width,))
    bias = self.param('bias', nn.initializers.zeros, (width,))
    return layer_norm(x, scale, bias, self.epsilon).astype(self.dtype)
