"""StableHLO export: a serialized `jax.export.Exported` with a symbolic batch dimension."""
import os
from typing import Any, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax import errors
from vit_jax import fileio
from vit_jax.serving import common

# Lowered for each so one file serves on CPU, NVIDIA GPUs and TPUs.
PLATFORMS = ('cpu', 'cuda', 'tpu')


def export(model: nn.Module, params: Mapping[str, Any], resolution: int,
           path: str, platforms: Sequence[str] = PLATFORMS) -> str:
  """Writes the serialized artifact to `path`; returns how to run it."""
  batch, = jax.export.symbolic_shape('batch')
  spec = jax.ShapeDtypeStruct((batch, resolution, resolution, 3), jnp.float32)
  try:
    exported = jax.export.export(jax.jit(common.inference_fn(model, params)),
                                 platforms=tuple(platforms))(spec)
  except Exception as e:  # pylint: disable=broad-except  # lowering errors vary
    raise ValueError(f'jax.export cannot lower the model for {platforms}: '
                     f'{errors.first_line(e, None)}') from None
  data = exported.serialize()
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'Cannot write {path}: directory {directory} does not '
                            'exist; create it first.')
  fileio.atomic_write(path, data)
  return (f'jax.export.deserialize(open({path!r}, "rb").read()).call(images) with '
          f'images float32 (N, {resolution}, {resolution}, 3) in [-1, 1]; '
          f'platforms {", ".join(platforms)}')
