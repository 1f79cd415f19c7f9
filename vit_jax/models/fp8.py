"""FP8 matmuls for the transformer blocks (an opt-in for Hopper-class GPUs).

Each operand is scaled per tensor and rounded to float8: activations and weights to
e4m3 on the forward pass, the incoming gradient to e5m2 (wider range) on the backward
pass (Transformer Engine's HYBRID format). Two ways to choose the scales:

- 'fp8' (current scaling): each operand's own absolute maximum, a reduction over the
  operand before it can be rounded. No state: train state and checkpoints are the
  bf16 model's.
- 'fp8_delayed' (Transformer Engine's delayed scaling): each matmul keeps an amax
  history per operand ([3, AMAX_HISTORY]: rows x, w, grad; column 0 the newest), and
  the scale is the history's maximum from the steps BEFORE this one, so the rounding
  needs no reduction first and can fuse into the op that produces the operand. The
  maxima the step meets are recorded on the side, as the history's gradient (column
  0; summed where a model applies a matmul more than once, which only widens the
  scale), and the train step moves them into the history (`advance`). An empty
  history (the first step) scales by 1, as Transformer Engine's initial scale:
  for that step operands past e4m3's 448 saturate and gradients below e5m2's
  smallest value flush to zero. The histories are parameter-tree leaves named HISTORY_<matmul>
  while the loss runs and live in TrainState.extra otherwise (vit_jax/train/step.py):
  no optimizer state, no weight decay, checkpointed with the state. Where a model is
  applied without them (evaluation, a teacher) its matmuls use current scaling.

Each product is a dot of the float8 operands with float32 accumulation, times the
product of their scales: on Hopper GPUs XLA runs it as one cuBLASLt FP8 matmul; on
other backends XLA widens the float8 values first, so results agree across backends
up to accumulation order. (Rounding and widening again before a bf16 dot, the other
common way to write it, lets XLA's simplifier drop the rounding as excess precision.)
The rounding is treated as the identity for gradients (straight-through).
"""
import functools
import math
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

MATMULS = ('default', 'fp8', 'fp8_delayed')

FORWARD = jnp.float8_e4m3fn
BACKWARD = jnp.float8_e5m2

# Steps of amax history per operand. Transformer Engine and flax default to 1024 (with
# the 'max' rule), longer than a short run's warm-up: the scales would stay sized for
# the first steps' large gradients. 16 steps forget them soon and still span
# step-to-step spikes.
AMAX_HISTORY = 16
HISTORY = 'fp8_history'  # prefix of the history leaves: HISTORY_<matmul name>


def amax(x: jax.Array) -> jax.Array:
  """max|x| in float32."""
  return jnp.max(jnp.abs(x)).astype(jnp.float32)


def scale_for(largest_seen: jax.Array, dtype: Any) -> jax.Array:
  """The scale mapping `largest_seen` to dtype's largest value; 1 where none is known."""
  known = (largest_seen > 0) & jnp.isfinite(largest_seen)
  return jnp.where(known, largest_seen / float(jnp.finfo(dtype).max), jnp.float32(1.0))


def cast(x: jax.Array, scale: jax.Array, dtype: Any) -> jax.Array:
  """x / scale rounded to `dtype`, saturating (e4m3fn has no infinity: overflow is NaN)."""
  largest = float(jnp.finfo(dtype).max)
  return jnp.clip(x.astype(jnp.float32) / scale, -largest, largest).astype(dtype)


def quantize(x: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
  """(x / scale rounded to `dtype`, scale): the scale maps max|x| to dtype's largest value."""
  scale = scale_for(amax(x), dtype)
  return cast(x, scale, dtype), scale


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


def history_scales(history: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The scales of x, w (e4m3) and the gradient (e5m2) from a [3, L] amax history."""
  seen = jnp.max(history, axis=1)
  return (scale_for(seen[0], FORWARD), scale_for(seen[1], FORWARD),
          scale_for(seen[2], BACKWARD))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _delayed_matmul(x: jax.Array, w: jax.Array, history: jax.Array,
                    dtypes: tuple) -> jax.Array:
  """x [M, K] @ w [K, N] in float8, scaled by `history`; records maxima only when differentiated."""
  sx, sw, _ = history_scales(history)
  return _scaled_dot(cast(x, sx, FORWARD), cast(w, sw, FORWARD), ((1,), (0,)), sx * sw,
                     dtypes[0])


def _delayed_matmul_fwd(x, w, history, dtypes):
  sx, sw, sg = history_scales(history)
  xq, wq = cast(x, sx, FORWARD), cast(w, sw, FORWARD)
  out = _scaled_dot(xq, wq, ((1,), (0,)), sx * sw, dtypes[0])
  # The maxima are recorded beside the rounding, which does not wait for them.
  return out, (xq, wq, sx, sw, sg, jnp.stack([amax(x), amax(w)]), jnp.zeros_like(history))


def _delayed_matmul_bwd(dtypes, res, grad):
  xq, wq, sx, sw, sg, seen, zeros = res
  gq = cast(grad, sg, BACKWARD)
  dx = _scaled_dot(gq, wq, ((1,), (1,)), sg * sw, dtypes[1])
  dw = _scaled_dot(xq, gq, ((0,), (0,)), sx * sg, dtypes[2])
  # The history's "gradient": this step's maxima in column 0 (advance() moves them in).
  return dx, dw, zeros.at[:, 0].set(jnp.append(seen, amax(grad)))


_delayed_matmul.defvjp(_delayed_matmul_fwd, _delayed_matmul_bwd)


def _as_matrices(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                 preferred_element_type: Any) -> tuple:
  """(lhs as [M, K], rhs as [K, N], output shape, dtypes) of a dot without batch dims."""
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
  return a, b, lshape + rshape, (jnp.dtype(out_dtype), a.dtype, b.dtype)


def fp8_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                    precision: Any = None, preferred_element_type: Any = None,
                    **unused: Any) -> jax.Array:
  """lax.dot_general's signature (no batch dimensions), computed as one float8 matmul.

  The operands are float8 in the product itself (not rounded and widened again, which
  XLA's simplifier may fold away), so the GPU runs cuBLASLt's FP8 kernels.
  """
  del precision  # float8 products have one precision
  a, b, shape, dtypes = _as_matrices(lhs, rhs, dimension_numbers, preferred_element_type)
  return _fp8_matmul(a, b, dtypes).reshape(shape)


def delayed_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                        precision: Any = None, preferred_element_type: Any = None, *,
                        history: jax.Array, **unused: Any) -> jax.Array:
  """fp8_dot_general with the scales of `history` ([3, L]: x, w, grad) instead of the operands'."""
  del precision
  a, b, shape, dtypes = _as_matrices(lhs, rhs, dimension_numbers, preferred_element_type)
  return _delayed_matmul(a, b, history, dtypes).reshape(shape)


def dot_general(matmul: str) -> Callable[..., jax.Array]:
  """The dot_general the blocks' matmuls use for the `matmul` option, without history.

  'fp8_delayed' without a history (module_dot_general found none) is current scaling.
  """
  if matmul == 'default':
    return jax.lax.dot_general
  if matmul in ('fp8', 'fp8_delayed'):
    return fp8_dot_general
  raise ValueError(f'Unknown matmul {matmul!r}; use one of {MATMULS}.')


def module_dot_general(module: nn.Module, matmul: str, name: str) -> Callable[..., jax.Array]:
  """The dot_general of `module`'s matmul `name`; 'fp8_delayed' reads (or creates) its history.

  Call inside the module's compact __call__. The history is the parameter leaf
  HISTORY_<name> of `module`: created (zeros) at init, found in the params while the
  train step's loss runs; without it the matmul scales by the operands' own maxima.
  """
  leaf = f'{HISTORY}_{name}'
  if matmul != 'fp8_delayed' or not (module.is_initializing() or
                                     module.has_variable('params', leaf)):
    return dot_general(matmul)
  history = module.param(leaf, nn.initializers.zeros_init(), (3, AMAX_HISTORY), jnp.float32)
  return functools.partial(delayed_dot_general, history=history)


def split_histories(params: Any) -> tuple[Any, dict]:
  """(params without the history leaves, the histories as a tree of the same nesting)."""
  if not isinstance(params, Mapping):
    return params, {}
  rest, histories = {}, {}
  for key, value in params.items():
    if str(key).startswith(HISTORY):
      histories[key] = value
      continue
    rest[key], inner = split_histories(value)
    if inner:
      histories[key] = inner
  return rest, histories


def merge_histories(params: Any, histories: Mapping) -> Any:
  """`params` with the history leaves put back where split_histories took them."""
  if not histories:
    return params
  merged = dict(params)
  for key, value in histories.items():
    merged[key] = value if str(key).startswith(HISTORY) else merge_histories(params[key], value)
  return merged


def advance(histories: Any, recorded: Any) -> Any:
  """Each history shifted one step, the step's recorded maxima (column 0) as the newest."""
  return jax.tree.map(lambda h, r: jnp.concatenate([r[..., :1], h[..., :-1]], axis=-1),
                      histories, recorded)
