"""TensorFlow SavedModel export (jax2tf) with the evaluation preprocessing inside.

Signatures, each returning {'logits': float32 (N, classes)}:
  serving_default       uint8 images (N, H, W, 3) of any size; the same TF ops
                        as the vit_jax evaluation pipeline
                        (vit_jax.data.preprocess.eval_image) run inside (TF Serving).
  tflite                the same for one image (1, H, W, 3): a static batch
                        keeps every gather static, which the TFLite converter
                        needs (tf.lite.TFLiteConverter.from_saved_model(PATH,
                        signature_keys=['tflite'])).
  predict_preprocessed  float32 (N, R, R, 3) in [-1, 1], what the model sees.
Parameters are tf.Variables (the variables/ folder), not constants, so large
models stay under protobuf's 2 GB limit.
"""
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
from jax.experimental import jax2tf
import ml_collections
import numpy as np
import tensorflow as tf

from vit_jax import errors
from vit_jax import fileio
from vit_jax.data import preprocess


def export(model: nn.Module, params: Mapping[str, Any], resolution: int,
           path: str, pp: ml_collections.ConfigDict) -> str:
  """Writes the SavedModel directory `path`; returns how to run it."""
  given = path
  path = os.path.abspath(path.rstrip('/'))
  parent = os.path.dirname(path)
  if not os.path.isdir(parent):
    raise FileNotFoundError(f'Cannot write {path}: directory {parent} does not '
                            'exist; create it first.')
  if os.path.exists(path):
    raise FileExistsError(f'Cannot write {path}: it exists; remove it or pick a '
                          'new path.')

  def apply(p, images):
    return model.apply({'params': p}, images, train=False)

  converted = jax2tf.convert(
      apply, with_gradient=False,
      polymorphic_shapes=[None, f'(b, {resolution}, {resolution}, 3)'])
  # Static shapes: TFLite cannot convert the gathers of a symbolic batch.
  converted_one = jax2tf.convert(apply, with_gradient=False)
  module = tf.Module()
  module.params = tf.nest.map_structure(
      lambda x: tf.Variable(np.asarray(x, np.float32), trainable=False),
      jax.tree.map(np.asarray, dict(params)))
  image_spec = tf.TensorSpec([resolution, resolution, 3], tf.float32)

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None, resolution, resolution, 3], tf.float32, name='images')])
  def predict_preprocessed(images):
    return {'logits': converted(module.params, images)}

  def preprocess_one(image):
    # Resizing uint8 computes in float32 anyway; casting first gives the same
    # pixels and keeps TFLite's RESIZE_BILINEAR (it has no uint8 -> float op).
    return preprocess.eval_image(tf.cast(image, tf.float32), pp)

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None, None, None, 3], tf.uint8, name='images')])
  def serve(images):
    x = tf.map_fn(preprocess_one, images, fn_output_signature=image_spec)
    return {'logits': converted(module.params, x)}

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([1, None, None, 3], tf.uint8, name='images')])
  def serve_one(images):
    x = preprocess_one(images[0])[None]
    return {'logits': converted_one(module.params, x)}

  module.serve = serve
  module.serve_one = serve_one
  module.predict_preprocessed = predict_preprocessed
  check_runs(predict_preprocessed, resolution)  # before anything is written
  with fileio.writing(given):
    _save(module, path, parent, {'serving_default': serve, 'tflite': serve_one,
                                 'predict_preprocessed': predict_preprocessed})
  return (f"tf.saved_model.load({path!r}).signatures['serving_default']"
          "(images=uint8 (N, H, W, 3))['logits']; preprocessing: "
          f'{pp.eval} to {resolution}px')


def check_runs(fn: Callable[[tf.Tensor], Any], resolution: int) -> None:
  """Runs the converted model once in TensorFlow: a jax/TensorFlow pair that cannot is one line.

  jax embeds the model as StableHLO in TensorFlow's XlaCallModule op; jax 0.12 writes ops
  (composite, custom_call_v2) newer than the StableHLO of TensorFlow 2.21's op, which saves
  without complaint and fails only when the SavedModel is run.
  """
  try:
    fn(tf.zeros([1, resolution, resolution, 3], tf.float32))
  except tf.errors.OpError as e:
    raise ValueError(
        f'TensorFlow {tf.__version__} cannot run the model as jax {jax.__version__} '
        f'converted it ({_op_problem(e.message)}); export --format=stablehlo or onnx, '
        'or install a jax release as old as the TensorFlow one.') from None


def _op_problem(message: str) -> str:
  """What a TensorFlow op error says, without its 'Graph execution error' and node trace."""
  unknown = re.search(r"unregistered operation '([^']+)'", message)
  if unknown:
    return f'its XlaCallModule does not know the StableHLO op {unknown.group(1)}'
  lines = [line.strip() for line in message.splitlines()]
  said = [line for line in lines if line and not line.startswith(
      ('Graph execution error', 'Detected at node', 'File ', '[[', 'Stack trace'))]
  return errors.first_line(said[-1] if said else message, 160)


def _save(module: Any, path: str, parent: str, signatures: dict) -> None:
  """Saves into a temporary directory beside `path`, then renames it into place."""
  tmp = tempfile.mkdtemp(dir=parent, prefix='.tmp-' + os.path.basename(path))
  try:
    try:
      tf.saved_model.save(module, tmp, signatures=signatures)
    except (ValueError, TypeError, NotImplementedError, tf.errors.OpError) as e:
      raise ValueError('jax2tf cannot convert this model to a SavedModel: '
                       f'{type(e).__name__}: {errors.first_line(e, None)}') from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    os.rename(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
