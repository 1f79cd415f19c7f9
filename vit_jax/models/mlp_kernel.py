"""The ViT MLP with its memory-bound passes inside the matmuls (Pallas; Triton on GPU).

XLA runs the MLP's matmuls on cuBLAS but the activation and its gradient as separate
passes over the [tokens, mlp_dim] tensor: on an H100 (ViT-B/16 b256) the GELU pass took
0.32 ms and GELU's gradient with the bias gradient 0.42 ms per block, next to 0.32 ms for
each matmul of that width. Here two Pallas kernels take them in:

  forward   h = x @ W1 + b1, a = act(h) in the epilogue of the first matmul (it writes a,
            and h where the backward pass needs it);
  backward  dh = (dy @ W2^T) * act'(h) in the epilogue of the matmul that produces the
            activation's gradient, with each row block's bias-gradient sum beside it.

The epilogue is the one place dh is formed: dX = dh @ W1^T and dW1 = x^T @ dh then read
it once each from cuBLAS (a prologue in those two kernels would form dh twice and still
need dy @ W2^T written first). The remaining products (a @ W2, dX, dW1, dW2) stay XLA
dots. Off GPU the kernels run with interpret=True (for tests: slow, same numerics).
"""
import dataclasses
import functools
from typing import Any, Callable, Optional

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

KERNELS = ('xla', 'pallas')

# Pallas' Triton compiler parameters (CompilerParams since jax 0.6; TritonCompilerParams before).
_COMPILER_PARAMS = getattr(plgpu, 'CompilerParams', None) or getattr(
    plgpu, 'TritonCompilerParams')

_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_CUBIC = 0.044715
_QUICK_GELU = 1.702


def _gelu_tanh(h: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(gelu_tanh(h), its derivative), as nn.gelu(approximate=True)."""
  inner = _SQRT_2_OVER_PI * (h + _GELU_CUBIC * h * h * h)
  t = jnp.tanh(inner)
  grad = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * _SQRT_2_OVER_PI * (
      1.0 + 3.0 * _GELU_CUBIC * h * h)
  return 0.5 * h * (1.0 + t), grad


def _quick_gelu(h: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(h * sigmoid(1.702 h), its derivative): CLIP's activation."""
  s = jax.nn.sigmoid(_QUICK_GELU * h)
  return h * s, s + _QUICK_GELU * h * s * (1.0 - s)


# activation name (layers.ACTIVATIONS) -> (value, derivative) in f32; exact 'gelu' needs
# erf, which Pallas' Triton lowering lacks.
ACTIVATIONS: dict[str, Callable[[jax.Array], tuple[jax.Array, jax.Array]]] = {
    'gelu_tanh': _gelu_tanh,
    'quick_gelu': _quick_gelu,
}


@dataclasses.dataclass(frozen=True)
class Blocks:
  """The tiles of both kernels: rows x columns x contraction step, and Triton's launch knobs."""
  m: int = 128
  n: int = 256
  k: int = 64
  num_warps: int = 8
  num_stages: int = 3


DEFAULT_BLOCKS = Blocks()


def interpret_default() -> bool:
  """Whether kernels must run interpreted: everywhere but on a GPU (Triton)."""
  return jax.default_backend() != 'gpu'


def _step(k: int, block_k: int) -> int:
  """The contraction step: block_k, or the whole width where block_k does not divide it."""
  return block_k if k % block_k == 0 else k


def _accumulate(a_ref: Any, b_ref: Any, step: int, transpose_b: bool) -> jax.Array:
  """f32 sum over K of a [bm, K] times b ([K, bn], or [bn, K] with transpose_b), step by step."""
  width = a_ref.shape[1]
  rows, cols = a_ref.shape[0], b_ref.shape[0 if transpose_b else 1]
  contract = ((1,), (1,)) if transpose_b else ((1,), (0,))

  def body(i, acc):
    span = pl.ds(pl.multiple_of(i * step, step), step)
    a = a_ref[:, span]
    b = b_ref[:, span] if transpose_b else b_ref[span, :]
    return acc + jax.lax.dot_general(a, b, (contract, ((), ())),
                                     preferred_element_type=jnp.float32)

  return jax.lax.fori_loop(0, width // step, body, jnp.zeros((rows, cols), jnp.float32))


def _forward_kernel(x_ref, w_ref, b_ref, a_ref, *h_ref, step: int, activation: str):
  """One [bm, bn] tile of a = act(x @ W1 + b1), and of h when asked."""
  h = _accumulate(x_ref, w_ref, step, transpose_b=False) + b_ref[...].astype(jnp.float32)
  a_ref[...] = ACTIVATIONS[activation](h)[0].astype(a_ref.dtype)
  if h_ref:
    h_ref[0][...] = h.astype(h_ref[0].dtype)


def _backward_kernel(dy_ref, w_ref, h_ref, dh_ref, db_ref, *, step: int, activation: str,
                     rows: int):
  """One [bm, bn] tile of dh = (dy @ W2^T) * act'(h), and its column sums (the bias gradient)."""
  da = _accumulate(dy_ref, w_ref, step, transpose_b=True)
  dh = da * ACTIVATIONS[activation](h_ref[...].astype(jnp.float32))[1]
  dh_ref[...] = dh.astype(dh_ref.dtype)
  bm = dh.shape[0]
  row = pl.program_id(0) * bm + jax.lax.broadcasted_iota(jnp.int32, dh.shape, 0)
  # The last row block reaches past the tokens: what it read there must not count.
  db_ref[...] = jnp.sum(jnp.where(row < rows, dh, 0.0), axis=0, keepdims=True)


def _params(blocks: Blocks, interpret: bool) -> dict[str, Any]:
  """pallas_call's backend arguments."""
  if interpret:
    return dict(interpret=True)
  return dict(compiler_params=_COMPILER_PARAMS(num_warps=blocks.num_warps,
                                               num_stages=blocks.num_stages))


def forward(x: jax.Array, w: jax.Array, b: jax.Array, *, activation: str, blocks: Blocks,
            interpret: bool, save_pre: bool) -> tuple[jax.Array, Optional[jax.Array]]:
  """(act(x @ w + b), x @ w + b or None) for x [M, K], w [K, N], b [N], in x's dtype."""
  (m, k), n = x.shape, w.shape[1]
  bm, bn = min(blocks.m, pl.next_power_of_2(m)), min(blocks.n, pl.next_power_of_2(n))
  tile = pl.BlockSpec(block_shape=(bm, bn), index_map=lambda i, j: (i, j))
  out = jax.ShapeDtypeStruct((m, n), x.dtype)
  kernel = functools.partial(_forward_kernel, step=_step(k, blocks.k), activation=activation)
  outs = pl.pallas_call(
      kernel, grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
      in_specs=[pl.BlockSpec(block_shape=(bm, k), index_map=lambda i, j: (i, 0)),
                pl.BlockSpec(block_shape=(k, bn), index_map=lambda i, j: (0, j)),
                pl.BlockSpec(block_shape=(bn,), index_map=lambda i, j: (j,))],
      out_specs=[tile, tile] if save_pre else [tile],
      out_shape=[out, out] if save_pre else [out],
      name='mlp_bias_activation', **_params(blocks, interpret))(x, w, b)
  return outs[0], (outs[1] if save_pre else None)


def backward(dy: jax.Array, w: jax.Array, h: jax.Array, *, activation: str, blocks: Blocks,
             interpret: bool) -> tuple[jax.Array, jax.Array]:
  """(dh, sum of dh over rows in f32) for dy [M, K], w [N, K] (W2), h [M, N]."""
  (m, k), n = dy.shape, w.shape[0]
  bm, bn = min(blocks.m, pl.next_power_of_2(m)), min(blocks.n, pl.next_power_of_2(n))
  grid = (pl.cdiv(m, bm), pl.cdiv(n, bn))
  kernel = functools.partial(_backward_kernel, step=_step(k, blocks.k),
                             activation=activation, rows=m)
  dh, partial = pl.pallas_call(
      kernel, grid=grid,
      in_specs=[pl.BlockSpec(block_shape=(bm, k), index_map=lambda i, j: (i, 0)),
                pl.BlockSpec(block_shape=(bn, k), index_map=lambda i, j: (j, 0)),
                pl.BlockSpec(block_shape=(bm, bn), index_map=lambda i, j: (i, j))],
      out_specs=[pl.BlockSpec(block_shape=(bm, bn), index_map=lambda i, j: (i, j)),
                 pl.BlockSpec(block_shape=(1, bn), index_map=lambda i, j: (i, j))],
      out_shape=[jax.ShapeDtypeStruct((m, n), h.dtype),
                 jax.ShapeDtypeStruct((grid[0], n), jnp.float32)],
      name='mlp_activation_grad', **_params(blocks, interpret))(dy, w, h)
  return dh, jnp.sum(partial, axis=0)


def _dot(a: jax.Array, b: jax.Array, contract: tuple, dtype: Any) -> jax.Array:
  """A 2-D dot_general with f32 accumulation, in `dtype`."""
  return jax.lax.dot_general(a, b, (contract, ((), ())),
                             preferred_element_type=jnp.float32).astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def mlp(x: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array,
        activation: str = 'gelu_tanh', blocks: Blocks = DEFAULT_BLOCKS,
        interpret: Optional[bool] = None) -> jax.Array:
  """act(x @ w1 + b1) @ w2 + b2 on x [M, D] (one dtype throughout), with the fused kernels."""
  a, _ = forward(x, w1, b1, activation=activation, blocks=blocks,
                 interpret=_interpret(interpret), save_pre=False)
  return _dot(a, w2, ((1,), (0,)), x.dtype) + b2


def _interpret(interpret: Optional[bool]) -> bool:
  return interpret_default() if interpret is None else interpret


def _mlp_fwd(x, w1, b1, w2, b2, activation, blocks, interpret):
  a, h = forward(x, w1, b1, activation=activation, blocks=blocks,
                 interpret=_interpret(interpret), save_pre=True)
  y = _dot(a, w2, ((1,), (0,)), x.dtype) + b2
  return y, (x, w1, b1, h, a, w2, b2)


def _mlp_bwd(activation, blocks, interpret, res, dy):
  x, w1, b1, h, a, w2, b2 = res
  dh, db1 = backward(dy, w2, h, activation=activation, blocks=blocks,
                     interpret=_interpret(interpret))
  dx = _dot(dh, w1, ((1,), (1,)), x.dtype)     # [M, F] x [D, F]^T
  dw1 = _dot(x, dh, ((0,), (0,)), w1.dtype)    # [M, D]^T x [M, F]
  dw2 = _dot(a, dy, ((0,), (0,)), w2.dtype)    # [M, F]^T x [M, D]
  db2 = jnp.sum(dy.astype(jnp.float32), axis=0).astype(b2.dtype)
  return dx, dw1, db1.astype(b1.dtype), dw2, db2


mlp.defvjp(_mlp_fwd, _mlp_bwd)
