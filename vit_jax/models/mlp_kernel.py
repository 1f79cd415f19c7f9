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
import jax.numpy as jnp

try:
  from jax.experimental.pallas import triton as plgpu
except ImportError:  # a jax without Pallas' Triton backend: the kernels run interpreted
  plgpu = None

KERNELS = ('xla', 'pallas')


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
  """The tiles of both kernels: rows x columns x contraction step, and Triton's launch knobs.

  The default is Triton's usual Hopper bf16 GEMM tile; tools/dev/mlp_kernel_bench.py times others.
  """
  m: int = 128
  n: int = 256
  k: int = 64
  num_warps: int = 8
  num_stages: int = 3


DEFAULT_BLOCKS = Blocks()


def parse_blocks(text: str) -> Blocks:
  """'m,n,k,num_warps,num_stages' (config.model.mlp_kernel_blocks) -> Blocks; '': the default."""
  if not text:
    return DEFAULT_BLOCKS
  try:
    values = [int(v) for v in str(text).split(',')]
  except ValueError:
    values = []
  tiles_ok = len(values) == 5 and all(v >= 16 and v & (v - 1) == 0 for v in values[:3])
  if not tiles_ok or min(values[3:]) < 1:
    raise ValueError(f'mlp_kernel_blocks {text!r} must be m,n,k,num_warps,num_stages: tiles '
                     'powers of 2 >= 16, then two positive ints (e.g. 128,256,64,8,3).')
  return Blocks(*values)


def interpret_default() -> bool:
  """Whether kernels must run interpreted: everywhere but on a GPU (Triton)."""
  return jax.default_backend() != 'gpu' or plgpu is None


def fit(size: int, block: int) -> tuple[int, int]:
  """(tile, padded size) of one dimension: whole tiles of a power of 2 (Triton's tiles).

  The tile is `block` (at most the size rounded up to a power of 2), or its half where
  that divides the size and the tile does not (no smaller: small tiles starve the tensor
  cores); otherwise the size is padded to a multiple of the tile, because Pallas' Triton
  lowering does not mask a tile that reaches past an array.
  """
  tile = min(block, 1 << (size - 1).bit_length())
  for candidate in (tile, tile // 2):
    if candidate >= 16 and size % candidate == 0:
      return candidate, size
  return tile, -(-size // tile) * tile


def _pad(a: jax.Array, shape: tuple) -> jax.Array:
  """a zero-padded at the end of each dimension to `shape` (itself when it fits)."""
  if a.shape == tuple(shape):
    return a
  return jnp.pad(a, [(0, s - d) for s, d in zip(shape, a.shape)])


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


def _backward_kernel(dy_ref, w_ref, h_ref, dh_ref, db_ref, *, step: int, activation: str):
  """One [bm, bn] tile of dh = (dy @ W2^T) * act'(h), and its column sums (the bias gradient).

  Padded rows hold dy = 0, so their dh is 0 and adds nothing to the sums.
  """
  da = _accumulate(dy_ref, w_ref, step, transpose_b=True)
  dh = da * ACTIVATIONS[activation](h_ref[...].astype(jnp.float32))[1]
  dh_ref[...] = dh.astype(dh_ref.dtype)
  db_ref[...] = jnp.sum(dh, axis=0, keepdims=True)


def _params(blocks: Blocks, interpret: bool) -> dict[str, Any]:
  """pallas_call's backend arguments."""
  if interpret:
    return dict(interpret=True)
  # Pallas' Triton compiler parameters: CompilerParams (jax 0.6 on), TritonCompilerParams before.
  params = getattr(plgpu, 'CompilerParams', None) or getattr(plgpu, 'TritonCompilerParams')
  return dict(compiler_params=params(num_warps=blocks.num_warps,
                                     num_stages=blocks.num_stages))


@dataclasses.dataclass(frozen=True)
class _Tiles:
  """A 1-D launch over [m, n] in [bm, bn] tiles, the column tiles of a row block adjacent.

  Adjacent programs then share their row block of the left operand (read once from HBM,
  then from L2) while the whole right operand (W1 or W2, a few MB) stays in L2; the launch
  order of a 2-D grid's axes is the backend's choice.
  """
  bm: int
  bn: int
  columns: int  # tiles per row block

  def row(self, p: Any) -> Any:
    """The row block of program `p`."""
    return p // self.columns

  def col(self, p: Any) -> Any:
    """The column block of program `p`."""
    return p % self.columns

  def spec(self, rows: Optional[int], cols: Optional[int]) -> pl.BlockSpec:
    """The BlockSpec of a [bm or rows, bn or cols] operand tile (None: this tile's side)."""
    shape = (rows or self.bm, cols or self.bn)
    rmap = (lambda p: 0) if rows else self.row
    cmap = (lambda p: 0) if cols else self.col
    return pl.BlockSpec(block_shape=shape, index_map=lambda p: (rmap(p), cmap(p)))


@dataclasses.dataclass(frozen=True)
class _Shape:
  """One kernel's sizes: output [m, n], contraction k, each padded to whole tiles."""
  m: int
  n: int
  k: int
  tiles: _Tiles
  step: int

  @property
  def grid(self) -> tuple[int]:
    """The 1-D launch: one program per output tile."""
    return (self.m // self.tiles.bm * self.tiles.columns,)


def _shape(m: int, n: int, k: int, blocks: Blocks) -> _Shape:
  """The tiles of an [m, n] output contracting k, and the padded sizes they cover."""
  (bm, mp), (bn, np_), (step, kp) = fit(m, blocks.m), fit(n, blocks.n), fit(k, blocks.k)
  return _Shape(mp, np_, kp, _Tiles(bm, bn, np_ // bn), step)


def forward(x: jax.Array, w: jax.Array, b: jax.Array, *, activation: str, blocks: Blocks,
            interpret: bool, save_pre: bool) -> tuple[jax.Array, Optional[jax.Array]]:
  """(act(x @ w + b), x @ w + b or None) for x [M, K], w [K, N], b [N], in x's dtype."""
  (m, k), n = x.shape, w.shape[1]
  s = _shape(m, n, k, blocks)
  t = s.tiles
  outs = 2 if save_pre else 1
  kernel = functools.partial(_forward_kernel, step=s.step, activation=activation)
  result = pl.pallas_call(
      kernel, grid=s.grid,
      in_specs=[t.spec(None, s.k), t.spec(s.k, None),
                pl.BlockSpec(block_shape=(t.bn,), index_map=lambda p: (t.col(p),))],
      out_specs=[t.spec(None, None)] * outs,
      out_shape=[jax.ShapeDtypeStruct((s.m, s.n), x.dtype)] * outs,
      name='mlp_bias_activation', **_params(blocks, interpret))(
          _pad(x, (s.m, s.k)), _pad(w, (s.k, s.n)), _pad(b, (s.n,)))
  result = [r[:m, :n] if (s.m, s.n) != (m, n) else r for r in result]
  return result[0], (result[1] if save_pre else None)


def backward(dy: jax.Array, w: jax.Array, h: jax.Array, *, activation: str, blocks: Blocks,
             interpret: bool) -> tuple[jax.Array, jax.Array]:
  """(dh, sum of dh over rows in f32) for dy [M, K], w [N, K] (W2), h [M, N]."""
  (m, k), n = dy.shape, w.shape[0]
  s = _shape(m, n, k, blocks)
  t = s.tiles
  kernel = functools.partial(_backward_kernel, step=s.step, activation=activation)
  dh, partial = pl.pallas_call(
      kernel, grid=s.grid,
      in_specs=[t.spec(None, s.k),
                pl.BlockSpec(block_shape=(t.bn, s.k), index_map=lambda p: (t.col(p), 0)),
                t.spec(None, None)],
      out_specs=[t.spec(None, None),
                 pl.BlockSpec(block_shape=(1, t.bn), index_map=lambda p: (t.row(p), t.col(p)))],
      out_shape=[jax.ShapeDtypeStruct((s.m, s.n), h.dtype),
                 jax.ShapeDtypeStruct((s.m // t.bm, s.n), jnp.float32)],
      name='mlp_activation_grad', **_params(blocks, interpret))(
          _pad(dy, (s.m, s.k)), _pad(w, (s.n, s.k)), _pad(h, (s.m, s.n)))
  if (s.m, s.n) != (m, n):
    dh = dh[:m, :n]
  return dh, jnp.sum(partial[:, :n], axis=0)


def _dot(a: jax.Array, b: jax.Array, contract: tuple, dtype: Any) -> jax.Array:
  """A 2-D dot_general in the operands' dtype (cuBLAS accumulates bf16 in f32), as `dtype`.

  An f32 result converted afterwards would add a pass over [tokens, width] that XLA's own
  MLP does not make.
  """
  return jax.lax.dot_general(a, b, (contract, ((), ()))).astype(dtype)


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
