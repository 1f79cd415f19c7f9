"""Tests for vit_jax.predict: checkpoint -> model, images, label sets, the CLI and its errors."""
import importlib.resources
import json
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import skimage.data

from tests import commands
from tests import tiny_trained
from vit_jax import checkpoint
from vit_jax import models
from vit_jax.inference import images as images_lib
from vit_jax.inference import labels as labels_lib
from vit_jax.inference import load
from vit_jax.inference import predict
from vit_jax.data import mnist5k_arrays
from vit_jax.data.builders import mnist5k

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _save_random_model(path, name, resolution, num_classes, **overrides):
  model = models.get_model(name, num_classes=num_classes, **overrides)
  params = model.init(jax.random.PRNGKey(0),
                      jnp.zeros((1, resolution, resolution, 3)))['params']
  # A non-zero head so that probabilities differ between classes.
  params['head']['kernel'] = jax.random.normal(
      jax.random.PRNGKey(1), params['head']['kernel'].shape)
  checkpoint.save(params, path)
  return path


class PredictTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = tempfile.mkdtemp(prefix='vit_jax_test_')
    cls.photos = {}
    for name, fmt in (('astronaut', 'JPEG'), ('chelsea', 'PNG'), ('coffee', 'JPEG'),
                      ('camera', 'PNG')):  # camera is grayscale
      path = os.path.join(cls.dir, f'{name}.{fmt.lower()}')
      Image.fromarray(getattr(skimage.data, name)()).save(path, format=fmt)
      cls.photos[name] = path
    rgba = os.path.join(cls.dir, 'rgba.png')
    Image.fromarray(skimage.data.astronaut()[:100, :300]).convert('RGBA').save(rgba)
    cls.photos['rgba'] = rgba
    cls.imagenet = _save_random_model(os.path.join(cls.dir, 'in1k.npz'), 'testing',
                                      32, 1000)


  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    super().tearDownClass()

  def test_load_model_reads_head_and_resolution(self):
    loaded = load.load_model('testing', self.imagenet)
    self.assertEqual((loaded.num_classes, loaded.resolution), (1000, 32))
    bigger = load.load_model('testing', self.imagenet, resolution=64)
    self.assertEqual(bigger.resolution, 64)
    self.assertEqual(
        bigger.params['Transformer']['posembed_input']['pos_embedding'].shape,
        (1, 17, 10))

  def test_top5_on_skimage_photos_with_imagenet_names(self):
    loaded = load.load_model('testing', self.imagenet)
    names = labels_lib.load_label_names('imagenet1k')
    paths = list(self.photos.values())
    results = predict.predict_files(loaded, paths, names)
    self.assertLen(results, len(paths))
    probs = predict.make_predict_fn(loaded)(
        np.stack([images_lib.load_image(p, 32) for p in paths]))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    for row, best in zip(probs, results):
      self.assertLen(best, 5)
      values = [p for _, p in best]
      self.assertEqual(values, sorted(values, reverse=True))
      self.assertAlmostEqual(values[0], float(row.max()), places=6)
      self.assertEqual(best[0][0], names[int(row.argmax())])

  def test_load_image_any_size_and_mode(self):
    for path in self.photos.values():
      image = images_lib.load_image(path, 48)
      self.assertEqual(image.shape, (48, 48, 3))
      self.assertEqual(image.dtype, np.float32)
      self.assertBetween(float(image.min()), -1.0, 1.0)
      self.assertBetween(float(image.max()), -1.0, 1.0)

  def test_16_bit_png_reads_like_its_8_bit_version(self):
    # PIL's RGB conversion clips 16-bit grayscale to white; TensorFlow scales it.
    camera = skimage.data.camera()
    wide = os.path.join(self.dir, 'camera16.png')
    Image.fromarray(camera.astype(np.uint16) * 257).save(wide)
    self.assertEqual(Image.open(wide).mode, 'I;16')
    image = images_lib.load_image(wide, 64)
    np.testing.assert_allclose(image, images_lib.load_image(self.photos['camera'], 64),
                               atol=0.01)
    self.assertLess(float(image.mean()), 0.5)  # not the clipped, almost white image

  def test_checkpoint_holding_nan_is_refused_by_name(self):
    params = checkpoint.load(self.imagenet)
    params['head']['bias'] = params['head']['bias'].copy()
    params['head']['bias'][3] = np.nan
    path = os.path.join(self.dir, 'nan.npz')
    checkpoint.save(params, path)
    with self.assertRaisesRegex(ValueError, r'holds NaN or Inf in head/bias \(1 of'):
      load.load_model('testing', path)
    with self.assertRaisesRegex(ValueError, 'holds NaN or Inf in head/bias'):
      checkpoint.load_pretrained(pretrained_path=path, init_params=params,
                                 model_config=models.MODEL_CONFIGS['testing'])

  def test_trained_model_reads_mnist_digits(self):
    params_path, data_dir, _ = tiny_trained.trained()
    images, labels = mnist5k_arrays.load_arrays()
    test_rows = mnist5k.split_indices(labels)['test'][::50]  # 20 test digits
    paths = []
    for row in test_rows:
      path = os.path.join(self.dir, f'digit_{row}.png')
      Image.fromarray(images[row, ..., 0]).save(path)
      paths.append(path)
    loaded = load.load_model(None, params_path)
    names = labels_lib.load_label_names('mnist5k', data_dir)
    self.assertEqual(names, [str(i) for i in range(10)])
    results = predict.predict_files(loaded, paths, names)
    correct = sum(best[0][0] == str(labels[row])
                  for best, row in zip(results, test_rows))
    self.assertGreaterEqual(correct, 12)  # chance: 2

  def test_label_files(self):
    in1k = labels_lib.load_label_names('imagenet1k')
    in21k = labels_lib.load_label_names('imagenet21k')
    self.assertLen(in1k, 1000)
    self.assertLen(in21k, 21843)
    self.assertEqual(in1k[0], 'tench, Tinca tinca')
    self.assertEqual(in1k[281], 'tabby, tabby cat')
    self.assertTrue(all(name.strip() for name in in1k + in21k))
    tfds_ids = (importlib.resources.files('tensorflow_datasets') / 'datasets' /
                'imagenet2012' / 'labels.txt').read_text().split()
    ours = [line.split('\t')[0] for line in open(
        os.path.join(REPO, 'vit_jax', 'labels', 'imagenet1k.txt'))]
    self.assertEqual(ours, tfds_ids)
    ids21k = [line.split('\t')[0] for line in open(
        os.path.join(REPO, 'vit_jax', 'labels', 'imagenet21k.txt'))]
    self.assertEqual(ids21k, sorted(set(ids21k)))
    # All ImageNet-1k classes but one (n04399382, teddy bear) are in the fall11 release.
    self.assertEqual(set(ours) - set(ids21k), {'n04399382'})
    self.assertEqual(labels_lib.default_labels(1000), 'imagenet1k')
    self.assertEqual(labels_lib.default_labels(21843), 'imagenet21k')
    self.assertIsNone(labels_lib.default_labels(10))

  def test_bad_inputs_raise_one_line_errors(self):
    text = os.path.join(self.dir, 'notes.jpg')
    with open(text, 'w') as f:
      f.write('this is no image\n')
    truncated = os.path.join(self.dir, 'truncated.jpg')
    with open(self.photos['astronaut'], 'rb') as f:
      data = f.read()
    with open(truncated, 'wb') as f:
      f.write(data[:len(data) // 3])
    cases = [
        (lambda: images_lib.load_image(text, 32), ValueError, 'Cannot read image'),
        (lambda: images_lib.load_image(truncated, 32), ValueError, 'Cannot read image'),
        (lambda: images_lib.load_image(os.path.join(self.dir, 'nope.png'), 32),
         FileNotFoundError, 'does not exist'),
        (lambda: images_lib.load_image(self.dir, 32), IsADirectoryError, 'directory'),
        (lambda: load.load_model('ViT-B_16', self.imagenet), ValueError,
         'does not fit model'),
        (lambda: load.load_model('Mixer-B_16', self.imagenet), ValueError,
         'does not fit model'),
        (lambda: load.load_model('ViT-B_17', self.imagenet), ValueError,
         'Unknown model'),
        (lambda: load.load_model('testing', self.imagenet, resolution=40),
         ValueError, 'multiple of 16'),
        (lambda: labels_lib.load_label_names('imagenet3k'), ValueError,
         'Unknown label set'),
        (lambda: predict.predict_files(load.load_model('testing', self.imagenet),
                                       [self.photos['chelsea']], ['a', 'b']),
         ValueError, 'has 2 names but the checkpoint has 1000'),
    ]
    for fn, error, message in cases:
      with self.assertRaisesRegex(error, message):
        fn()
    # Reading a truncated file must not have changed it.
    self.assertEqual(os.path.getsize(truncated), len(data) // 3)

  def test_cli(self):
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = [sys.executable, '-m', 'vit_jax.predict', '--model=testing',
           f'--checkpoint={self.imagenet}']
    proc = commands.run(cmd + [self.photos['chelsea'], self.photos['camera']], env=env,
                        timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    self.assertLen(lines, 12)
    self.assertEqual(lines[0], self.photos['chelsea'])
    self.assertRegex(lines[1], r'^ +\d+\.\d\d%  \S')
    bad = os.path.join(self.dir, 'broken.png')
    with open(bad, 'wb') as f:
      f.write(b'\x89PNG\r\n\x1a\n garbage')
    proc = commands.run(cmd + ['--labels=imagenet1k', bad], env=env, timeout=300)
    self.assertEqual(proc.returncode, 2)
    self.assertEqual(proc.stderr.strip().splitlines(),
                     [proc.stderr.strip()], 'one line, no traceback')
    self.assertIn(f'Cannot read image {bad}', proc.stderr)

  def test_transformers_id2label_names_the_classes(self):
    hf_dir = os.path.join(self.dir, 'hf_named')
    shutil.copytree(os.path.join(REPO, 'tests', 'testdata', 'interop', 'hf_classifier'),
                    hf_dir)
    self.assertIsNone(labels_lib.transformers_label_names(hf_dir, 5))  # LABEL_0.. only
    path = os.path.join(hf_dir, 'config.json')
    with open(path) as f:
      config = json.load(f)
    names = ['cat', 'dog', 'eel', 'fox', 'gnu']
    config['id2label'] = dict(enumerate(names))
    with open(path, 'w') as f:
      json.dump(config, f)
    self.assertEqual(labels_lib.transformers_label_names(hf_dir, 5), names)
    self.assertIsNone(labels_lib.transformers_label_names(hf_dir, 6))
    self.assertIsNone(labels_lib.transformers_label_names(self.imagenet, 1000))
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.predict', f'--checkpoint={hf_dir}', '--top=5',
         self.photos['chelsea']],
        env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    printed = [line.split()[-1] for line in proc.stdout.splitlines()[1:]]
    self.assertCountEqual(printed, names)


if __name__ == '__main__':
  absltest.main()
