"""Export a model with its parameters for serving outside the training framework.

Formats:
  stablehlo    `jax.export` artifact (float32 NHWC images in [-1, 1], any batch);
               reload with `jax.export.deserialize` and `.call`, nothing of
               vit_jax needed.
  saved_model  TensorFlow SavedModel (jax2tf) whose `serving_default` takes
               uint8 images of any size and applies the evaluation preprocessing.
  onnx         ONNX model via jax2onnx (float32 NHWC in [-1, 1], any batch),
               checked against JAX in onnxruntime before it is written.
Every format takes (model, params, resolution) and writes atomically; a model
trained with fp8 matmuls is written with the default ones (common.serving_model).
"""
from typing import Any, Mapping, Optional

import flax.linen as nn

from vit_jax.serving import common
from vit_jax.serving import onnx
from vit_jax.serving import saved_model
from vit_jax.serving import stablehlo

FORMATS = ('stablehlo', 'saved_model', 'onnx')


def export(model: nn.Module, params: Mapping[str, Any], resolution: int,
           fmt: str, path: str, *, pp: Optional[Mapping[str, Any]] = None) -> str:
  """Writes `model` with `params` to `path` in serving format `fmt`; returns a usage line."""
  if fmt not in FORMATS:
    raise ValueError(f'Unknown export format {fmt!r}; use one of '
                     f'{", ".join(FORMATS)}.')
  model = common.serving_model(model)
  if fmt == 'stablehlo':
    return stablehlo.export(model, params, resolution, path)
  if fmt == 'saved_model':
    return saved_model.export(model, params, resolution, path,
                              common.eval_pp(resolution, pp))
  return onnx.export(model, params, resolution, path)
