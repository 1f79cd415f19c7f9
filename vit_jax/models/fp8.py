"""FP8 matmuls for the transformer blocks (an opt-in for Hopper-class GPUs).

Each operand is scaled per tensor by its current absolute maximum and rounded to
float8: activations and weights to e4m3 on the forward pass, the incoming gradient
to e5m2 (wider range) on the backward pass. Scaling by the current maximum keeps
no state between steps (no amax history as in Transformer Engine's delayed
scaling), so the train state and checkpoints are the same as the bf16 model's.

Each product is a dot of the float8 operands with float32 accumulation, times the
product of their scales: on Hopper GPUs XLA runs it as one cuBLASLt FP8 matmul; on
other backends XLA widens the float8 values first, so results agree across backends
up to accumulation order. (Rounding and widening again before a bf16 dot, the other
common way to write it, lets XLA's simplifier drop the rounding as excess precision.)
The rounding is treated as the identity for gradients (straight-through).
"""
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

MATMULS = ('default', 'fp8')

FORWARD = jnp.float8_e4m3fn
BACKWARD = jnp.float8_e5m2


def quantize(x: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
  """(x / scale rounded to `dtype`, scale): the scale maps max|x| to dtype's largest value."""
  largest = float(jnp.finfo(dtype).max)
  amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
  scale = jnp.where(amax > 0, amax / largest, jnp.float32(1.0))
  q = jnp.clip(x.astype(jnp.float32) / scale, -largest, largest).astype(dtype)
  return q, scale


def dequantize(q: jax.Array, scale: jax.Array, dtype: Any) -> jax.Array:
  """The values `q` stands for, in `dtype`."""
  return (q.astype(jnp.float32) * scale).astype(dtype)


def round_trip(x: jax.Array, dtype: Any) -> jax.Array:
  """x rounded to float8 `dtype` with its current scale, back in x's dtype."""
  return dequantize(*quantize(x, dtype), x.dtype)


def _scaled_dot(a: jax.Array, b: jax.Array, contract: tuple, scale: jax.Array,
                out_dtype: Any) -> jax.Array:
  """dot_general of two float8 matrices, times the product of their scales."""
  out = jax.lax.dot_general(a, b, (contract, ((), ())),
                            preferred_element_type=jnp.float32)
  return (out * scale).astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _fp8_matmul(x: jax.Array, w: jax.Array, dtypes: tuple) -> jax.Array:
  """x [M, K] @ w [K, N] in float8; dtypes: (output's, x's, w's), static for the gradients."""
  return _fp8_matmul_fwd(x, w, dtypes)[0]


def _fp8_matmul_fwd(x, w, dtypes):
  (xq, sx), (wq, sw) = quantize(x, FORWARD), quantize(w, FORWARD)
  out = _scaled_dot(xq, wq, ((1,), (0,)), sx * sw, dtypes[0])
  # The float8 operands are what the backward pass needs: half the bf16 residuals.
  return out, (xq, sx, wq, sw)


def _fp8_matmul_bwd(dtypes, res, grad):
  xq, sx, wq, sw = res
  gq, sg = quantize(grad, BACKWARD)
  dx = _scaled_dot(gq, wq, ((1,), (1,)), sg * sw, dtypes[1])  # [M, N] x [K, N]^T
  dw = _scaled_dot(xq, gq, ((0,), (0,)), sx * sg, dtypes[2])  # [M, K]^T x [M, N]
  return dx, dw


_fp8_matmul.defvjp(_fp8_matmul_fwd, _fp8_matmul_bwd)


def fp8_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                    precision: Any = None, preferred_element_type: Any = None,
                    **unused: Any) -> jax.Array:
  """lax.dot_general's signature (no batch dimensions), computed as one float8 matmul.

  The operands are float8 in the product itself (not rounded and widened again, which
  XLA's simplifier may fold away), so the GPU runs cuBLASLt's FP8 kernels.
  """
  del precision  # float8 products have one precision
  (lc, rc), (lb, rb) = dimension_numbers
  if tuple(lb) or tuple(rb):
    raise ValueError('fp8 matmuls take no batch dimensions.')
  out_dtype = jnp.result_type(lhs.dtype, rhs.dtype)
  if preferred_element_type is not None:
    out_dtype = jnp.dtype(preferred_element_type)
  lfree = [i for i in range(lhs.ndim) if i not in tuple(lc)]
  rfree = [i for i in range(rhs.ndim) if i not in tuple(rc)]
  lshape = [lhs.shape[i] for i in lfree]
  rshape = [rhs.shape[i] for i in rfree]
  k = math.prod(lhs.shape[i] for i in lc)
  a = jnp.transpose(lhs, lfree + list(lc)).reshape(math.prod(lshape), k)
  b = jnp.transpose(rhs, list(rc) + rfree).reshape(k, math.prod(rshape))
  dtypes = (jnp.dtype(out_dtype), a.dtype, b.dtype)
  return _fp8_matmul(a, b, dtypes).reshape(lshape + rshape)


def dot_general(matmul: str) -> Callable[..., jax.Array]:
  """The dot_general the blocks' matmuls use for the `matmul` option."""
  if matmul == 'default':
    return jax.lax.dot_general
  if matmul == 'fp8':
    return fp8_dot_general
  raise ValueError(f'Unknown matmul {matmul!r}; use one of {MATMULS}.')
