"""Analytic model FLOPs and device peak FLOP rates, for throughput and MFU.

Convention: a multiply-add counts as 2 FLOPs; only matrix products and
convolutions are counted (patch/stem embedding, QKV/out projections, the two
attention products, MLPs, ResNet convs, pre-logits and head), not norms,
activations, softmax or the optimizer update, which together are under 2% of
the total for ViT-B/16. A training step counts 3x the forward pass (the
backward pass is two matrix products per forward one), the convention of the
PaLM paper's MFU and of timm/MLPerf throughput reports.
"""
import math
import time
from typing import Any, Mapping, Optional, Sequence, Union

import jax
import jax.numpy as jnp

# Dense (no sparsity) peak rates per JAX device, FLOP/s, from the vendors'
# datasheets. TPU v2/v3 expose each core as a device (half a chip); v4 and
# later expose one device per chip. Matched by substring of device_kind, in
# order, so the more specific names come first.
_PEAK_BF16 = (
    ('H100 PCIe', 756e12),
    ('H100 NVL', 835e12),
    ('H100', 989e12),
    ('H200', 989e12),
    ('H800', 989e12),
    ('B200', 2250e12),
    ('A100', 312e12),
    ('A800', 312e12),
    ('L40S', 362e12),
    ('L4', 121e12),
    ('A10G', 70e12),
    ('V100', 125e12),
    ('TPU v2', 22.5e12),
    ('TPU v3', 61.5e12),
    ('TPU v4', 275e12),
    ('TPU v5 lite', 197e12),
    ('TPU v5e', 197e12),
    ('TPU v5p', 459e12),
    ('TPU v5', 459e12),
    ('TPU v6 lite', 918e12),
    ('TPU v6e', 918e12),
)
# Plain (non-tensor-core) float32 rates; TPUs run float32 matmuls as bf16 passes.
_PEAK_FP32 = (
    ('H100 PCIe', 51e12),
    ('H100', 67e12),
    ('H200', 67e12),
    ('A100', 19.5e12),
    ('V100', 15.7e12),
)
_PEAK_TABLES = {'bfloat16': _PEAK_BF16, 'float16': _PEAK_BF16,
                'float32': _PEAK_FP32}

ModelSpec = Union[str, Mapping[str, Any], Any]


def _as_dict(model: ModelSpec) -> dict:
  """Turns a preset name, a (Config)dict or a model Module into a plain dict."""
  if isinstance(model, str):
    from vit_jax import models  # Deferred: keeps this module free of flax.
    return models.get_model_config(model).to_dict()
  if hasattr(model, 'to_dict'):
    return model.to_dict()
  if isinstance(model, Mapping):
    return dict(model)
  fields = ('patches', 'hidden_size', 'transformer', 'resnet', 'classifier',
            'representation_size', 'num_classes', 'num_blocks', 'hidden_dim',
            'tokens_mlp_dim', 'channels_mlp_dim')
  out = {f: getattr(model, f) for f in fields if hasattr(model, f)}
  if not out:
    raise ValueError(f'Cannot count FLOPs of {type(model).__name__}: pass a '
                     'preset name, a model config or a ViT/Mixer module.')
  return out


def _get(d: Any, key: str, default: Any = None) -> Any:
  if d is None:
    return default
  if isinstance(d, Mapping):
    return d.get(key, default)
  return getattr(d, key, default)


def _conv(out_hw: int, k: int, cin: int, cout: int) -> float:
  return 2.0 * out_hw * k * k * cin * cout


def _resnet_flops(res: int, num_layers: Sequence[int], width_factor: float):
  """Forward FLOPs, output side length and channels of the BiT ResNet stem."""
  width = int(64 * width_factor)
  s = math.ceil(res / 2)  # 7x7 root conv, stride 2, SAME.
  flops = _conv(s * s, 7, 3, width)
  s = math.ceil(s / 2)  # 3x3 max pool, stride 2.
  cin = width
  for i, units in enumerate(num_layers):
    f = width * 2**i
    for u in range(units):
      stride = 2 if (i > 0 and u == 0) else 1
      s_out = math.ceil(s / stride)
      flops += _conv(s * s, 1, cin, f)
      flops += _conv(s_out * s_out, 3, f, f)
      flops += _conv(s_out * s_out, 1, f, 4 * f)
      if cin != 4 * f or stride != 1:
        flops += _conv(s_out * s_out, 1, cin, 4 * f)
      cin, s = 4 * f, s_out
  return flops, s, cin


def _vit_forward(c: dict, res: int, num_classes: int) -> float:
  d = c['hidden_size']
  t = c['transformer']
  mlp, layers = _get(t, 'mlp_dim'), _get(t, 'num_layers')
  patch = tuple(_get(c['patches'], 'size'))[0]
  flops, side, channels = 0.0, res, 3
  resnet = c.get('resnet')
  if resnet:
    flops, side, channels = _resnet_flops(
        res, tuple(_get(resnet, 'num_layers')), _get(resnet, 'width_factor', 1))
  grid = side // patch
  patches = grid * grid
  flops += 2.0 * patches * patch * patch * channels * d
  classifier = c.get('classifier', 'token')
  n = patches + (classifier in ('token', 'token_unpooled'))
  per_layer = (2.0 * n * d * 3 * d      # fused QKV projection
               + 2 * 2.0 * n * n * d    # q.k^T and attention-weighted v
               + 2.0 * n * d * d        # output projection
               + 2 * 2.0 * n * d * mlp)  # the two MLP matmuls
  flops += layers * per_layer
  rows = n if classifier in ('unpooled', 'token_unpooled') else 1
  width = d
  rep = c.get('representation_size')
  if rep:
    flops += 2.0 * rows * d * rep
    width = rep
  if num_classes:
    flops += 2.0 * rows * width * num_classes
  return flops


def _mixer_forward(c: dict, res: int, num_classes: int) -> float:
  d = c['hidden_dim']
  patch = tuple(_get(c['patches'], 'size'))[0]
  s = (res // patch)**2
  flops = 2.0 * s * patch * patch * 3 * d
  per_block = (2 * 2.0 * d * s * c['tokens_mlp_dim']
               + 2 * 2.0 * s * d * c['channels_mlp_dim'])
  flops += c['num_blocks'] * per_block
  if num_classes:
    flops += 2.0 * d * num_classes
  return flops


def model_flops_per_image(model_config_or_name: ModelSpec, resolution: int, *,
                          train: bool, num_classes: Optional[int] = None
                          ) -> float:
  """Analytic FLOPs per image: forward, or 3x forward when `train` is True.

  `num_classes` defaults to the model's own, else 1000.
  """
  c = _as_dict(model_config_or_name)
  if not isinstance(resolution, int) or resolution <= 0:
    raise ValueError(f'resolution must be a positive int, got {resolution!r}.')
  if num_classes is None:
    num_classes = c.get('num_classes')
    num_classes = 1000 if num_classes is None or num_classes < 0 else num_classes
  if 'num_blocks' in c:
    fwd = _mixer_forward(c, resolution, num_classes)
  elif 'hidden_size' in c and 'transformer' in c:
    fwd = _vit_forward(c, resolution, num_classes)
  else:
    raise ValueError(f'Cannot count FLOPs of model config with keys '
                     f'{sorted(c)}: expected a ViT or Mixer config.')
  return 3.0 * fwd if train else fwd


def peak_flops_for_kind(device_kind: str,
                        dtype: str = 'bfloat16') -> Optional[float]:
  """Datasheet dense peak FLOP/s for a device_kind string; None when unknown."""
  table = _PEAK_TABLES.get(str(jnp.dtype(dtype)))
  if table is None:
    return None
  for name, peak in table:
    if name.lower() in device_kind.lower():
      return peak
  return None


def device_peak_flops(device: Optional[jax.Device] = None,
                      dtype: str = 'bfloat16') -> Optional[float]:
  """Datasheet dense peak FLOP/s of one device for `dtype`; None when unknown."""
  device = device or jax.devices()[0]
  if device.platform == 'cpu':
    return None
  return peak_flops_for_kind(device.device_kind, dtype)


def measure_peak_flops(dtype: str = 'bfloat16', n: int = 8192, *,
                       device: Optional[jax.Device] = None,
                       inner: int = 20, repeats: int = 5) -> float:
  """Times `inner` chained n x n x n matmuls on the device; returns FLOP/s.

  Random operands (zeros run faster on some GPUs); after a warm-up that lets
  the clocks settle, the best of `repeats` timings (a peak, not a typical rate).
  """
  device = device or jax.devices()[0]
  dt = jnp.dtype(dtype)
  ka, kb = jax.random.split(jax.random.PRNGKey(0))
  # b ~ N(0, 1/n) keeps the chained product's scale constant.
  a = jax.device_put(jax.random.normal(ka, (n, n), dt), device)
  b = jax.device_put(
      (jax.random.normal(kb, (n, n), jnp.float32) / math.sqrt(n)).astype(dt),
      device)

  @jax.jit
  def chain(a, b):
    # Unrolled: a fori_loop carry adds a copy per product on GPU.
    for _ in range(inner):
      a = a @ b
    return a

  for _ in range(2):
    chain(a, b).block_until_ready()
  best = float('inf')
  for _ in range(repeats):
    t = time.perf_counter()
    chain(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2.0 * n**3 * inner / best


PEAK_MODES = ('auto', 'measure', 'table')


def parse_peak(spec: Union[str, float, int],
               name: str = 'peak') -> Optional[float]:
  """A given peak in TFLOP/s as FLOP/s; None for the modes in PEAK_MODES."""
  if isinstance(spec, (int, float)) and not isinstance(spec, bool):
    value = float(spec)
  elif isinstance(spec, str) and spec.replace('.', '', 1).isdigit():
    value = float(spec)
  elif spec in PEAK_MODES:
    return None
  else:
    raise ValueError(f'{name}={spec}: use one of {PEAK_MODES} or a number in '
                     'TFLOP/s.')
  if value <= 0:
    raise ValueError(f'{name}={spec}: a given peak must be positive TFLOP/s.')
  return value * 1e12


def resolve_peak(spec: Union[str, float, int] = 'auto',
                 dtype: str = 'bfloat16',
                 device: Optional[jax.Device] = None
                 ) -> tuple[Optional[float], str]:
  """(peak FLOP/s or None, how it was obtained): the MFU denominator.

  One rule for the benchmark and the trainer, so their MFUs compare: a number
  is taken as given (TFLOP/s); 'table' is the datasheet; 'auto' is the
  datasheet on TPU and a measured 8192^3 matmul on GPU (512^3 on CPU, only so
  the field exists there); 'measure' always measures.
  """
  given = parse_peak(spec)
  if given:
    return given, f'given {given / 1e12:g} TFLOP/s'
  device = device or jax.devices()[0]
  if spec == 'table' or (spec == 'auto' and device.platform == 'tpu'):
    peak = device_peak_flops(device, dtype)
    if peak is None:
      return None, f'no datasheet peak for {device.device_kind} {dtype}'
    return peak, f'datasheet {device.device_kind}'
  n = 512 if device.platform == 'cpu' else 8192
  return (measure_peak_flops(dtype, n, device=device),
          f'measured {n}^3 {jnp.dtype(dtype).name} matmul')
