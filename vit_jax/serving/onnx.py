"""ONNX export via jax2onnx, checked in onnxruntime against JAX before it is written.

jax2onnx's flax.linen Conv plugin reads a conv's `kernel` variable directly,
bypassing the weight standardisation vit_jax's StdConv applies when it reads
its parameter; the hybrid's kernels are therefore standardised here, as
StdConv would at every call, before conversion. The check against JAX (fp32,
relative error <= 1e-4 on a probe batch) refuses any model the converter gets
wrong, including if that plugin changes.
"""
import logging as std_logging
import os
import re
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import errors
from vit_jax import fileio
from vit_jax.models import resnet
from vit_jax.models.formats import MissingDependencyError
from vit_jax.serving import common

TOLERANCE = 1e-4
_STD_CONV = re.compile(r'^(conv_root|block\d+/unit\d+/conv(\d+|_proj))/kernel$')


def _standardise_kernels(params: Mapping[str, Any]) -> dict:
  """The hybrid's conv kernels as StdConv uses them (no-op for plain ViTs)."""
  def fix(path, leaf):
    name = '/'.join(str(getattr(k, 'key', k)) for k in path)
    if _STD_CONV.match(name):
      return resnet.weight_standardize(jnp.asarray(leaf, jnp.float32),
                                       axis=(0, 1, 2), eps=1e-5)
    return leaf
  return jax.tree_util.tree_map_with_path(fix, dict(params))


def _imports():
  try:
    # pylint: disable=g-import-not-at-top
    import jax2onnx
    import onnxruntime
  except ImportError as e:
    raise MissingDependencyError(
        f'ONNX export needs jax2onnx and onnxruntime ({e.name} is missing): '
        'pip install jax2onnx onnxruntime.') from None
  # jax2onnx logs every optional plugin it cannot import at WARNING.
  std_logging.getLogger('jax2onnx').setLevel(std_logging.ERROR)
  return jax2onnx, onnxruntime


def export(model: nn.Module, params: Mapping[str, Any], resolution: int,
           path: str) -> str:
  """Writes the .onnx file `path`; returns how to run it."""
  jax2onnx, ort = _imports()
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'Cannot write {path}: directory {directory} does not '
                            'exist; create it first.')
  onnx_params = _standardise_kernels(params) if 'conv_root' in params else params
  fn = common.inference_fn(model, onnx_params)
  try:
    proto = jax2onnx.to_onnx(fn, [('batch', resolution, resolution, 3)],
                             model_name='vit_jax', input_names=['images'],
                             output_names=['logits'])
    data = proto.SerializeToString()
  except Exception as e:  # pylint: disable=broad-except  # converter errors vary
    raise ValueError(f'jax2onnx cannot convert this model: '
                     f'{type(e).__name__}: {errors.first_line(e, None)}') from None
  probe = np.random.default_rng(0).uniform(
      -1, 1, (2, resolution, resolution, 3)).astype(np.float32)
  session = ort.InferenceSession(data, providers=['CPUExecutionProvider'])
  got = session.run(None, {'images': probe})[0]
  want = np.asarray(jax.jit(common.inference_fn(model, params))(probe))
  err = common.relative_error(got, want)
  if not err <= TOLERANCE:
    raise ValueError(f'jax2onnx converted the model wrongly: onnxruntime logits '
                     f'differ from JAX by {err:.1e} (relative); not written.')
  fileio.atomic_write(path, data)
  return (f'onnxruntime.InferenceSession({path!r}).run(None, {{"images": x}}) '
          f'with x float32 (N, {resolution}, {resolution}, 3) in [-1, 1]; '
          f'checked against JAX: {err:.1e}')
