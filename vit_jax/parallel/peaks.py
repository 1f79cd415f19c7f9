"""Peak FLOP rates of devices, the denominator of MFU: datasheets or a measured matmul.

`resolve_peak` is the one rule the benchmark (--peak) and the trainer
(config.peak_tflops) share, so their MFUs compare.
"""
import math
import time
from typing import Optional, Union

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


# CPU: square matmul sizes whose best rate is the peak, and the work per timed call.
CPU_PEAK_SIZES = (256, 512, 1024)
_CPU_CALL_FLOPS = 1e9


def best_rate(rates: dict[int, float], dtype: str) -> tuple[float, str]:
  """(the highest of the measured {n: FLOP/s} rates, a line saying what was measured)."""
  if not rates:
    raise ValueError('best_rate needs at least one measured rate.')
  best = max(rates, key=rates.get)
  sizes = ', '.join(f'{n}^3' for n in sorted(rates))
  return rates[best], (f'measured: best of {sizes} {jnp.dtype(dtype).name} matmuls '
                       f'(fastest {best}^3, on the threads JAX uses)')


def measure_cpu_peak(dtype: str = 'float32', device: Optional[jax.Device] = None,
                     sizes: tuple = CPU_PEAK_SIZES) -> tuple[float, str]:
  """(peak FLOP/s, how) of a CPU device: the best rate of several square matmul sizes.

  One size alone under-states the peak (a 512^3 product ran slower than the quickstart's
  own step, so its MFU read 1.04): each size is timed with about 1 GFLOP per call on
  XLA's own thread pool (the threads the step uses), best of 3 calls.
  """
  rates = {n: measure_peak_flops(dtype, n, device=device, repeats=3,
                                 inner=max(1, round(_CPU_CALL_FLOPS / (2 * n**3))))
           for n in sizes}
  return best_rate(rates, dtype)


def utilization(achieved: float, peak: float) -> tuple[float, float, bool]:
  """(MFU, the peak it is against, whether that peak was raised): achieved FLOP/s over peak.

  A measured peak is a sample, taken when other work may share the cores; should the
  step beat it, the step's own rate is the better estimate of the peak, so MFU never
  reads above 1 (and the caller says the peak was raised).
  """
  if achieved > peak:
    return 1.0, achieved, True
  return achieved / peak, peak, False


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
  datasheet on TPU, a measured 8192^3 matmul on GPU and on CPU the best of several
  matmul sizes (measure_cpu_peak); 'measure' always measures.
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
  if device.platform == 'cpu':
    return measure_cpu_peak(dtype, device)
  return (measure_peak_flops(dtype, 8192, device=device),
          f'measured 8192^3 {jnp.dtype(dtype).name} matmul')
