"""Tests for serving export: each artifact runs in its own runtime with the JAX model's logits.

Models: the tiny timm ViT and R+ViT hybrid fixtures (tests/testdata/interop)
and a tiny MLP-Mixer. Relative error: max |runtime - JAX| / max |JAX|, fp32.
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np
import tensorflow as tf

from tests import commands
from vit_jax import models
from vit_jax import serving
from vit_jax.cli import export as export_cli
from vit_jax.data import preprocess
from vit_jax.models import formats
from vit_jax.serving import common
from vit_jax.serving import onnx as onnx_export
from vit_jax.serving import saved_model as saved_model_export

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
TOLERANCE = 1e-4
RESOLUTION = 16
_ONNX = all(importlib.util.find_spec(n) is not None
            for n in ('jax2onnx', 'onnxruntime'))


def _models() -> dict:
  """name -> (model, params): the fixtures and a random Mixer."""
  out = {}
  for name in ('timm_vit', 'timm_hybrid'):
    ckpt = formats.read(os.path.join(FIXTURES, f'{name}.safetensors'),
                        num_heads=2)
    out[name] = (ckpt.get_model(), ckpt.params)
  mixer = models.get_model('Mixer-B_16', num_classes=4, hidden_dim=16,
                           num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=32,
                           patches={'size': (4, 4)})
  abstract = jax.eval_shape(mixer.init, jax.random.PRNGKey(0),
                            jax.ShapeDtypeStruct((1, 16, 16, 3), np.float32))
  rng = np.random.default_rng(0)
  out['mixer'] = (mixer, jax.tree.map(
      lambda s: rng.normal(0, 0.3, s.shape).astype(np.float32),
      abstract['params']))
  return out


def _jax_logits(model, params, images) -> np.ndarray:
  return np.asarray(jax.jit(common.inference_fn(model, params))(images))


class ServingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.models = _models()
    rng = np.random.default_rng(1)
    cls.images = rng.uniform(-1, 1, (3, RESOLUTION, RESOLUTION, 3)).astype(
        np.float32)
    cls.expected = {name: _jax_logits(m, p, cls.images)
                    for name, (m, p) in cls.models.items()}

  def setUp(self):
    super().setUp()
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    self.dir = tmp.name

  def assertClose(self, got, want, what):
    err = common.relative_error(got, want)
    self.assertLessEqual(err, TOLERANCE, f'{what}: relative error {err:.2e}')

  def test_stablehlo_runs_without_vit_jax_or_flax(self):
    paths = {}
    for name, (model, params) in self.models.items():
      paths[name] = os.path.join(self.dir, f'{name}.stablehlo')
      serving.export(model, params, RESOLUTION, 'stablehlo', paths[name])
    inputs = os.path.join(self.dir, 'inputs.npy')
    np.save(inputs, self.images)
    # A fresh interpreter in which vit_jax and flax cannot be imported.
    script = textwrap.dedent(f"""
        import sys
        sys.modules.update(vit_jax=None, flax=None)
        import numpy as np
        from jax import export
        x = np.load({inputs!r})
        out = {{}}
        for name, path in {paths!r}.items():
          exported = export.deserialize(open(path, 'rb').read())
          out[name] = np.asarray(exported.call(x))
          out[name + '_one'] = np.asarray(exported.call(x[:1]))
        np.savez({os.path.join(self.dir, 'out.npz')!r}, **out)
        """)
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True,
                          text=True, cwd=self.dir, check=False,
                          env=dict(os.environ, JAX_PLATFORMS='cpu'))
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    with np.load(os.path.join(self.dir, 'out.npz')) as out:
      for name in self.models:
        self.assertClose(out[name], self.expected[name], name)
        self.assertClose(out[name + '_one'], self.expected[name][:1],
                         name + ' batch 1')

  def _saved_model(self, model, params, path, **kwargs):
    """serving.export to a SavedModel; skips where this TensorFlow cannot run jax's output."""
    try:
      serving.export(model, params, RESOLUTION, 'saved_model', path, **kwargs)
    except ValueError as e:
      if 'cannot run the model as jax' in str(e):  # jax 0.12 with TensorFlow 2.21
        self.skipTest(str(e))
      raise
    return path

  def test_a_model_tensorflow_cannot_run_is_one_line(self):
    # What TensorFlow 2.21 raises for jax 0.12's StableHLO (shortened), and any op error.
    newer = ('Graph execution error:\n\nDetected at node XlaCallModule defined at (most '
             'recent call last):\n<stack traces unavailable>\nCannot deserialize '
             "computation: UNKNOWN: vit.py:169:11: error: unregistered operation "
             "'vhlo.composite_v2' found in dialect ('vhlo')\n\t [[{{node XlaCallModule}}]]")

    def unreadable(images):
      raise tf.errors.InvalidArgumentError(None, None, newer)

    @tf.function(autograph=False)
    def asserting(images):
      tf.debugging.assert_equal(tf.shape(images)[0], 2, message='needs a batch of 2')
      return images

    for fn, problem in (
        (unreadable, 'its XlaCallModule does not know the StableHLO op vhlo.composite_v2'),
        (asserting, 'needs a batch of 2')):
      with self.assertRaisesRegex(
          ValueError, r'^TensorFlow \S+ cannot run the model as jax \S+ converted it \(.*'
          + re.escape(problem) + r'.*\); export --format=stablehlo or onnx, or install a '
          r'jax release as old as the TensorFlow one\.$') as caught:
        saved_model_export.check_runs(fn, RESOLUTION)
      self.assertNotIn('\n', str(caught.exception))
    saved_model_export.check_runs(tf.function(lambda images: images), RESOLUTION)

  def test_saved_model_serves_uint8_images_of_any_size_and_converts_to_tflite(self):
    rng = np.random.default_rng(2)
    batches = [rng.integers(0, 256, (2, 23, 31, 3), dtype=np.uint8),
               rng.integers(0, 256, (1, 9, 12, 3), dtype=np.uint8)]
    for name in ('timm_vit', 'timm_hybrid', 'mixer'):
      with self.subTest(name):
        model, params = self.models[name]
        path = self._saved_model(model, params, os.path.join(self.dir, name))
        loaded = tf.saved_model.load(path)
        got = loaded.signatures['predict_preprocessed'](
            images=tf.constant(self.images))['logits'].numpy()
        self.assertClose(got, self.expected[name], 'predict_preprocessed')
        pp = common.eval_pp(RESOLUTION)
        for images in batches:
          # The training pipeline's own evaluation preprocessing, then JAX.
          want = _jax_logits(model, params, np.stack(
              [preprocess.eval_image(tf.constant(im), pp).numpy()
               for im in images]))
          got = loaded.signatures['serving_default'](
              images=tf.constant(images))['logits'].numpy()
          self.assertClose(got, want, f'serving_default {images.shape}')
        converter = tf.lite.TFLiteConverter.from_saved_model(
            path, signature_keys=['tflite'])
        runner = tf.lite.Interpreter(
            model_content=converter.convert()).get_signature_runner('tflite')
        image = batches[0][:1]
        want = _jax_logits(model, params, preprocess.eval_image(
            tf.constant(image[0]), pp).numpy()[None])
        self.assertClose(runner(images=image)['logits'], want, 'tflite')

  def test_saved_model_bakes_in_a_workdir_central_crop(self):
    model, params = self.models['timm_vit']
    pp = common.eval_pp(RESOLUTION, {'eval': 'central_crop', 'resize': 20})
    path = self._saved_model(model, params, os.path.join(self.dir, 'sm'),
                             pp={'eval': 'central_crop', 'resize': 20})
    image = np.random.default_rng(3).integers(0, 256, (1, 40, 30, 3),
                                              dtype=np.uint8)
    want = _jax_logits(model, params, preprocess.eval_image(
        tf.constant(image[0]), pp).numpy()[None])
    got = tf.saved_model.load(path).signatures['serving_default'](
        images=tf.constant(image))['logits'].numpy()
    self.assertClose(got, want, 'central_crop')

  def test_preprocessing_comes_from_a_workdir_config(self):
    with open(os.path.join(self.dir, 'config.json'), 'w') as f:
      f.write('{"model_name": "ViT-Ti_16", "pp": {"eval": "central_crop", '
              '"crop": 28, "resize": 32}}')
    pp = export_cli.workdir_pp(os.path.join(self.dir, 'params.npz'))
    self.assertEqual(pp['eval'], 'central_crop')
    self.assertEqual(common.eval_pp(28, pp).resize, 32)
    self.assertEqual(common.eval_pp(56, pp).resize, 64)  # scaled with the crop
    # A transformers directory's config.json has no pp: the default resize.
    self.assertIsNone(export_cli.workdir_pp(os.path.join(FIXTURES,
                                                         'hf_classifier')))
    self.assertEqual(common.eval_pp(16).eval, 'resize')

  @absltest.skipIf(not _ONNX, 'needs jax2onnx and onnxruntime '
                   '(pip install jax2onnx onnxruntime)')
  def test_onnx_in_onnxruntime(self):
    import onnxruntime  # pylint: disable=g-import-not-at-top
    for name, (model, params) in self.models.items():
      with self.subTest(name):
        path = os.path.join(self.dir, f'{name}.onnx')
        serving.export(model, params, RESOLUTION, 'onnx', path)
        session = onnxruntime.InferenceSession(
            path, providers=['CPUExecutionProvider'])
        self.assertEqual(session.get_inputs()[0].shape,
                         ['batch', RESOLUTION, RESOLUTION, 3])
        got = session.run(None, {'images': self.images})[0]
        self.assertClose(got, self.expected[name], name)
        one = session.run(None, {'images': self.images[:1]})[0]
        self.assertClose(one, self.expected[name][:1], name + ' batch 1')

  @absltest.skipIf(not _ONNX, 'needs jax2onnx and onnxruntime')
  def test_onnx_refuses_a_wrong_conversion(self):
    """Without the kernel standardisation jax2onnx skips, the check catches it."""
    model, params = self.models['timm_hybrid']
    path = os.path.join(self.dir, 'bad.onnx')
    with mock.patch.object(onnx_export, '_standardise_kernels', lambda p: p):
      with self.assertRaisesRegex(ValueError, r'jax2onnx converted the model '
                                  r'wrongly: .* differ from JAX by'):
        serving.export(model, params, RESOLUTION, 'onnx', path)
    self.assertEqual(os.listdir(self.dir), [])

  def test_missing_converter_is_one_line(self):
    model, params = self.models['timm_vit']
    with mock.patch.dict(sys.modules, {'jax2onnx': None}):
      with self.assertRaisesRegex(
          ValueError, r'^ONNX export needs jax2onnx and onnxruntime \(jax2onnx '
          r'is missing\): pip install jax2onnx onnxruntime\.$'):
        serving.export(model, params, RESOLUTION, 'onnx',
                       os.path.join(self.dir, 'x.onnx'))
    self.assertEqual(os.listdir(self.dir), [])

  def test_cli(self):
    out = os.path.join(self.dir, 'hf.stablehlo')
    cmd = [sys.executable, '-m', 'vit_jax.export',
           f'--checkpoint={os.path.join(FIXTURES, "hf_classifier")}',
           '--format=stablehlo']
    proc = commands.run(cmd + [f'--output={out}'], cwd=REPO)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn('16px, 5 classes', proc.stdout)
    exported = jax.export.deserialize(open(out, 'rb').read())
    ckpt = formats.read(os.path.join(FIXTURES, 'hf_classifier'))
    self.assertClose(exported.call(self.images),
                     _jax_logits(ckpt.get_model(), ckpt.params, self.images),
                     'cli stablehlo')
    # A timm file without --model: one line, nothing written.
    bad = os.path.join(self.dir, 'bad.stablehlo')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.export',
         f'--checkpoint={os.path.join(FIXTURES, "timm_vit.safetensors")}',
         '--format=stablehlo', f'--output={bad}'], cwd=REPO)
    self.assertEqual(proc.returncode, 2)
    self.assertRegex(proc.stderr.strip().splitlines()[-1],
                     '^vit_jax.export: error: .*number of attention heads')
    self.assertFalse(os.path.exists(bad))


if __name__ == '__main__':
  absltest.main()
