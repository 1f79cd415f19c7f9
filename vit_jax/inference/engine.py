"""The serving path of a classifier: one deterministic, jitted forward pass over fixed batches.

`predict`, `evaluate` (the classification evaluator) and the benchmark's `--mode=infer` all
run it. Against a plain `jit(model.apply)` it:
- runs with train=False and no RNG (no dropout, no stochastic depth);
- resolves the compute dtype (`'auto'`: bfloat16 on GPU/TPU, float32 on CPU) and casts,
  once at load, every parameter the model would cast to it on each call (found in the
  traced program: values that reach a cast to the compute dtype through layout ops only),
  so the logits are those of the model in that dtype, bit for bit in what is cast;
- builds q/k/v as measured fastest for inference on the backend
  (vit_jax/models/vit/options.py FUSED_QKV_FASTEST), whatever the model trained with;
- optionally (`weights='fp8'`) holds the blocks' projection kernels as float8 with one
  scale per tensor, quantized once (vit_jax/models/fp8.py), and runs those matmuls in
  float8, the activations scaled per call;
- pads a ragged last batch, so one compiled shape serves every batch, of a size chosen
  from the device memory (or given).
The image buffer is not donated: XLA reuses a donated input only for an output of its
shape, and the logits have another (JAX warns that such a donation is unusable).
"""
import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
from flax import traverse_util
import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np

from vit_jax import models
from vit_jax.models import fp8

WEIGHTS = ('default', 'fp8')
# The largest batch `pick_batch` chooses from device memory, and its choice where the
# device reports no memory (CPU).
MAX_BATCH = 1024
HOST_BATCH = 64
# Share of the device memory left after the parameters that the batch may fill.
MEMORY_SHARE = 0.5
# The module whose matmuls the `matmul` option turns to float8: the encoder blocks.
_FP8_SCOPE = 'encoderblock_'
# Primitives that only move or regroup values: a cast after them equals the cast before.
_LAYOUT = frozenset({'reshape', 'transpose', 'stack', 'concatenate', 'squeeze',
                     'expand_dims', 'broadcast_in_dim', 'slice', 'copy'})
SEP = '/'


def _has(model: nn.Module, field: str) -> bool:
  return field in {f.name for f in dataclasses.fields(model)}


def inference_model(model: nn.Module, dtype: Any = None, weights: str = 'default',
                    fused_qkv: Optional[bool] = None) -> nn.Module:
  """The model as served: `dtype` resolved (None: the model's), q/k/v, fp8 matmuls.

  Same parameter tree as `model`; only how it computes changes. `fused_qkv` None: the
  faster for inference on this backend (vit_jax/models/vit/options.py), whatever the
  model was trained with. With `weights='fp8'` q/k/v are three matmuls: each kernel has
  its own float8 scale (one matmul would round them again at a joint scale).
  """
  if weights not in WEIGHTS:
    raise ValueError(f'Unknown weights {weights!r}; use one of {", ".join(WEIGHTS)}.')
  changes = {}
  if _has(model, 'dtype'):
    changes['dtype'] = models.resolve_dtype(model.dtype if dtype is None else dtype)
  if _has(model, 'fused_qkv'):
    changes['fused_qkv'] = fused_qkv
  if weights == 'fp8':
    if not _has(model, 'matmul'):
      raise ValueError(f'weights=fp8: {type(model).__name__} has no float8 matmuls; '
                       'use weights=default.')
    changes['matmul'] = 'fp8'
    changes['fused_qkv'] = False
  return model.clone(**changes)


def compute_dtype(model: nn.Module) -> Any:
  """The dtype `model` computes in (float32 where it has no dtype field)."""
  return jnp.dtype(model.dtype) if _has(model, 'dtype') else jnp.dtype(jnp.float32)


def _flat(tree: Any) -> dict[str, Any]:
  return traverse_util.flatten_dict(dict(tree), sep=SEP)


def cast_paths(model: nn.Module, params: Any, image_shape: tuple) -> frozenset:
  """The parameters the model casts to its compute dtype before any arithmetic.

  Read from the traced forward pass: a parameter is listed when every use of it, after
  layout ops only (stack, reshape, ...), is a cast to the compute dtype. Casting those
  once gives the same values as the model's cast on each call.
  """
  dtype = compute_dtype(model)
  flat = _flat(params)
  if all(jnp.dtype(v.dtype) == dtype for v in flat.values()):
    return frozenset()  # nothing to cast (float32 on CPU): no trace needed
  paths = list(flat)
  shapes = [jax.ShapeDtypeStruct(flat[p].shape, flat[p].dtype) for p in paths]

  def fn(leaves, images):
    tree = traverse_util.unflatten_dict(dict(zip(paths, leaves)), sep=SEP)
    return model.apply({'params': tree}, images, train=False)

  jaxpr = jax.make_jaxpr(fn)(shapes, jax.ShapeDtypeStruct(image_shape, jnp.float32)).jaxpr
  uses: dict[Any, list] = {}
  for eqn in jaxpr.eqns:
    for var in eqn.invars:
      if not isinstance(var, jax_core.Literal):
        uses.setdefault(var, []).append(eqn)
  outputs = {v for v in jaxpr.outvars if not isinstance(v, jax_core.Literal)}

  def cast_only(var, seen=()) -> bool:
    if var in outputs or var in seen or not uses.get(var):
      return False
    for eqn in uses[var]:
      name = eqn.primitive.name
      if name == 'convert_element_type':
        if jnp.dtype(eqn.params['new_dtype']) != dtype:
          return False
      elif name not in _LAYOUT or not all(cast_only(o, seen + (var,))
                                          for o in eqn.outvars):
        return False
    return True

  return frozenset(p for p, var, shape in zip(paths, jaxpr.invars, shapes)
                   if jnp.dtype(shape.dtype) != dtype and cast_only(var))


def fp8_paths(model: nn.Module, params: Any) -> frozenset:
  """The kernels that the float8 matmuls of the encoder blocks take."""
  if not _has(model, 'matmul') or model.matmul != 'fp8':
    return frozenset()
  return frozenset(p for p, v in _flat(params).items()
                   if _FP8_SCOPE in p and p.endswith(SEP + 'kernel') and np.ndim(v) >= 2)


def preparer(model: nn.Module, params: Any, image_shape: tuple) -> Callable[[Any], dict]:
  """Jitted params -> what the forward reads: {'params': tree, 'scales': {path: scale}}.

  Decided once for `model` (the served model: inference_model) and the shapes of
  `params` and of a batch `image_shape` [N, H, W, 3]; call it on each new set of weights
  (an evaluator's every run). The kernels of fp8_paths become float8 (with their
  scales), those of cast_paths the compute dtype; the rest stays as it is.
  """
  quantized = fp8_paths(model, params)
  cast = cast_paths(model, params, image_shape) - quantized
  dtype = compute_dtype(model)

  @jax.jit
  def make(tree: Any) -> dict:
    out, scales = {}, {}
    for path, value in _flat(tree).items():
      if path in quantized:
        out[path], scales[path] = fp8.quantize(value, fp8.FORWARD)
      else:
        out[path] = value.astype(dtype) if path in cast else value
    return {'params': traverse_util.unflatten_dict(out, sep=SEP), 'scales': scales}

  return make


def prepare(model: nn.Module, params: Any, image_shape: tuple) -> dict:
  """preparer(model, params, image_shape)(params): the weights made ready once, at load."""
  return preparer(model, params, image_shape)(params)


def forward(model: nn.Module) -> Callable[[dict, jax.Array], jax.Array]:
  """Pure (prepared, images [N, H, W, 3] in [-1, 1]) -> logits [N, C] of the served model."""
  dtype = compute_dtype(model)

  def fn(prepared: dict, images: jax.Array) -> jax.Array:
    params = prepared['params']
    if prepared['scales']:
      flat = _flat(params)
      for path, scale in prepared['scales'].items():
        flat[path] = fp8.dequantize(flat[path], scale, dtype)
      params = traverse_util.unflatten_dict(flat, sep=SEP)
    # float32 logits: what softmax, losses and argmax read, whatever the compute dtype.
    return model.apply({'params': params}, images, train=False).astype(jnp.float32)

  return fn


def pick_batch(requested: int, n_images: Optional[int] = None,
               per_image_bytes: Optional[float] = None, param_bytes: float = 0,
               limit: Optional[float] = None) -> int:
  """The serving batch: `requested` if > 0, else what the device memory holds.

  From memory (`limit`: the device's bytes): the largest power of two (<= MAX_BATCH)
  whose activations (`per_image_bytes` each) fill at most MEMORY_SHARE of what the
  parameters leave; HOST_BATCH without a limit (CPU). Never more than `n_images` needs
  (rounded up to a power of two).
  """
  if requested > 0:
    return requested
  batch = HOST_BATCH
  if limit and per_image_bytes:
    fits = int(MEMORY_SHARE * max(limit - param_bytes, 0) / per_image_bytes)
    batch = 1 << max(min(fits, MAX_BATCH).bit_length() - 1, 0)
  if n_images:
    batch = min(batch, 1 << max(n_images - 1, 0).bit_length())
  return batch


def device_limit(device: Optional[jax.Device] = None) -> Optional[float]:
  """Bytes the device's allocator may hand out (None where it reports none: CPU)."""
  device = device or jax.devices()[0]
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  return (stats or {}).get('bytes_limit')


@dataclasses.dataclass(frozen=True)
class Engine:
  """A served model: prepared parameters and one compiled forward for batches of `batch`."""
  model: nn.Module
  prepared: dict
  batch: int
  compiled: Any

  def run(self, images: np.ndarray) -> np.ndarray:
    """Outputs [N, C] (float32) of images [N, H, W, 3], in batches of `batch`, the last padded."""
    images = np.asarray(images, np.float32)
    out = []
    for start in range(0, len(images), self.batch):
      chunk = images[start:start + self.batch]
      n = len(chunk)
      if n < self.batch:  # same compiled shape: pad with zeros, drop their rows
        chunk = np.concatenate(
            [chunk, np.zeros((self.batch - n,) + chunk.shape[1:], chunk.dtype)])
      out.append(np.asarray(self.compiled(self.prepared, jnp.asarray(chunk)),
                            np.float32)[:n])
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def compile_forward(model: nn.Module, prepared: dict, image_shape: tuple,
                    transform: Optional[Callable] = None) -> Any:
  """The forward (then `transform` of the logits) compiled for batches of `image_shape`."""
  logits = forward(model)

  def fn(prepared: dict, images: jax.Array) -> jax.Array:
    out = logits(prepared, images)
    return out if transform is None else transform(out)

  return jax.jit(fn).lower(prepared, jax.ShapeDtypeStruct(image_shape, jnp.float32)).compile()


def _per_image_bytes(model: nn.Module, prepared: dict, image_shape: tuple) -> Optional[float]:
  """Bytes of temporaries per image in the compiled forward at a probe batch of 8."""
  probe = (8,) + tuple(image_shape[1:])
  try:
    memory = compile_forward(model, prepared, probe).memory_analysis()
  except Exception:  # pylint: disable=broad-except
    return None  # a backend without memory analysis
  if memory is None:
    return None
  return (memory.temp_size_in_bytes + memory.output_size_in_bytes +
          memory.argument_size_in_bytes - memory.alias_size_in_bytes
          - _tree_bytes(prepared)) / probe[0] or None


def _tree_bytes(tree: Any) -> float:
  return float(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def build(model: nn.Module, params: Any, resolution: int, *, dtype: Any = None,
          weights: str = 'default', batch: int = 0, n_images: Optional[int] = None,
          transform: Optional[Callable] = None) -> Engine:
  """The engine serving `model` with `params` at `resolution` (see the module docstring).

  `batch` 0 picks it from device memory (pick_batch); `transform` maps the logits
  (e.g. softmax) inside the compiled call.
  """
  served = inference_model(model, dtype, weights)
  shape = (1, resolution, resolution, 3)
  prepared = prepare(served, params, shape)
  limit = device_limit() if batch <= 0 else None
  per_image = _per_image_bytes(served, prepared, shape) if limit else None
  size = pick_batch(batch, n_images, per_image, _tree_bytes(prepared), limit)
  compiled = compile_forward(served, prepared, (size,) + shape[1:], transform=transform)
  return Engine(served, prepared, size, compiled)
