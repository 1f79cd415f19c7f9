"""Evaluation on any dataset, ImageNet ReaL label sets and their one-line errors.

ReaL scoring is pinned on a hand-computed case; the real.json path, the TFDS `real_label`
feature path (a small TFDS dataset built here from mnist5k digits, with ImageNet validation
file names) and evaluation of a second dataset run through the real trainer and the
`vit_jax.evaluate` command, and are checked against the model's own predictions.
"""
import json
import os
import re
import sys

from absl.testing import absltest
from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tensorflow_datasets as tfds

from tests import commands
from tests import tfds_testdata
from tests import tiny_train_config
from tests import tiny_trained
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import rundir
from vit_jax.data import mnist5k_arrays
from vit_jax.data import pipeline
from vit_jax.data import real_labels
from vit_jax.data import sources
from vit_jax.data.builders import mnist5k
from vit_jax.evaluators import classification
from vit_jax.models import from_config
from vit_jax.parallel import sharding
from vit_jax.train import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REAL_LINE = re.compile(r'^(\S+) (\S+): ReaL accuracy ([\d.]+), (\d+) images scored, '
                        r'(\d+) unlabelled$')
_NUM_REAL = 120  # images of the ReaL-style test dataset


def _val_number(i: int) -> int:
  """The ImageNet validation number of the test dataset's i-th image (scattered, 1-based)."""
  return 50000 - 397 * i


def _label_set(i: int, label: int) -> list[int]:
  """ReaL-style sets: {true}, {true, other}, {} and {a wrong class only}, in turn."""
  return [[label], [label, (label + 3) % 10], [], [(label + 1) % 10]][i % 4]


class RealDigits(tfds.core.GeneratorBasedBuilder):
  """mnist5k test digits with ReaL-style label sets and ImageNet validation file names."""

  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(28, 28, 1)),
            'label': tfds.features.ClassLabel(num_classes=10),
            'real_label': tfds.features.Sequence(tfds.features.ClassLabel(num_classes=10)),
            'file_name': tfds.features.Text(),
        }))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'test': self._generate_examples()}

  def _generate_examples(self):
    images, labels = mnist5k_arrays.load_arrays()
    rows = mnist5k.split_indices(labels)['test'][:_NUM_REAL]
    for i, row in enumerate(rows):
      yield i, {'image': mnist5k.encode(images[row]), 'label': int(labels[row]),
                'real_label': _label_set(i, int(labels[row])),
                'file_name': f'ILSVRC2012_val_{_val_number(i):08d}.JPEG'}


def _write_json(path: str, value) -> str:
  with open(path, 'w') as f:
    json.dump(value, f)
  return path


def _predictions(params_path: str, config, dataset: str, split: str):
  """(top-1 classes, the examples as read in file order) of a params.npz on a split."""
  spec = sources.resolve(dataset)
  builder = sources.make_builder(spec, config.data_dir)
  examples = list(builder.as_dataset(split=split, shuffle_files=False).as_numpy_iterator())
  images = np.stack([pipeline.preprocess_for_eval_numpy(ex['image'], config)
                     for ex in examples])
  model = models.get_model(config.model_name, **from_config.model_kwargs(
      config.model_name, config.model, num_classes=10))
  logits = model.apply({'params': checkpoint.load(params_path)}, images, train=False)
  return np.asarray(logits).argmax(-1), examples


def _real_accuracy(predicted, sets) -> tuple[float, int, int]:
  """(accuracy over the non-empty sets, their number, the number of empty sets), by hand."""
  scored = [p in s for p, s in zip(predicted, sets) if len(s)]
  return float(np.mean(scored)), len(scored), len(sets) - len(scored)


class _Logits(nn.Module):
  """A model whose logits are its input: the scoring test chooses them."""

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    return x


class ScoringTest(absltest.TestCase):

  def test_real_scoring_matches_a_hand_computed_case(self):
    # Five images and three padding rows; ReaL counts top-1 in the set, empty sets apart.
    logits = np.full((8, 5), -1.0, np.float32)
    top1 = [2, 0, 3, 1, 4, 0, 2, 1]
    logits[np.arange(8), top1] = 1.0
    sets = [{2}, {0, 1}, {1}, set(), {0, 2, 4}]  # right, right, wrong, unlabelled, right
    labels = np.zeros((8, 5), np.float32)
    for i, s in enumerate(sets):
      labels[i, sorted(s)] = 1.0
    mask = np.array([1, 1, 1, 1, 1, 0, 0, 0], np.float32)
    labels[5:] = 0.0  # the pipeline zeroes padding rows
    batch = {'image': logits, 'label': labels, 'mask': mask}
    for devices in (1, 8):  # the batch split over devices as the evaluator does
      mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]).reshape(devices, 1),
                               ('data', 'fsdp'))
      step = jax.jit(classification.eval_step(_Logits(), None, sets=True),
                     in_shardings=(None, sharding.batch_sharding(mesh)))
      out = jax.device_get(step({}, batch))
      with self.subTest(devices=devices):
        self.assertEqual({k: float(v) for k, v in out.items()},
                         {'correct': 3.0, 'count': 4.0, 'unlabelled': 1.0})
    # The single-label step is unchanged: every unmasked row counts, with a loss.
    one_hot = np.eye(5, dtype=np.float32)[[2, 1, 3, 1, 0, 0, 0, 0]] * mask[:, None]
    xent = lambda lg, lb: -jnp.sum(lb * jax.nn.log_softmax(lg), axis=-1)
    out = jax.device_get(jax.jit(classification.eval_step(_Logits(), xent))(
        {}, dict(batch, label=one_hot)))
    self.assertEqual((float(out['correct']), float(out['count'])), (3.0, 5.0))

  def test_label_rows_of_a_real_file_stay_exact_across_padded_slots(self):
    # 50 images of mnist5k's test split cut into 4 device slots, two simulated processes.
    config = tfds_testdata.config('mnist5k', batch_eval=24, eval_split='test[:50]')
    sets = [[i % 10, (i * 7) % 10] if i % 3 else [] for i in range(50)]
    path = _write_json(os.path.join(self.create_tempdir().full_path, 'real.json'), sets)
    rows = {}
    for slots in ([0, 1], [2, 3]):
      ds, _ = pipeline.eval_dataset(config, None, slots, 4, real_labels_path=path)
      for b in ds.as_numpy_iterator():
        for index, label, mask in zip(b['index'], b['label'], b['mask']):
          if index < 0:
            self.assertEqual((mask, label.sum()), (0.0, 0.0))  # padding: nothing scored
          else:
            rows[int(index)] = (mask, sorted(np.flatnonzero(label)))
    self.assertEqual(sorted(rows), list(range(50)))
    for i, (mask, classes) in rows.items():
      self.assertEqual((mask, classes), (1.0, sorted(set(sets[i]))), i)


class TrainerTest(absltest.TestCase):
  """A run on mnist5k evaluates a second dataset and ReaL label sets beside its own."""

  def test_evals_of_other_data_match_the_models_predictions(self):
    root = self.create_tempdir().full_path
    workdir = os.path.join(root, 'run')
    # The ReaL-style dataset (TFDS real_label feature) and its labels as real.json files:
    # by ImageNet file name (50,000 entries) and, for mnist5k, by position.
    config = tiny_train_config.tiny_config(total_steps=40, checkpoint_every=0)
    builder = sources.prepare(sources.resolve('tfds:real_digits'), config.data_dir)
    stored = list(builder.as_dataset(split='test', shuffle_files=False).as_numpy_iterator())
    by_name = [[] for _ in range(50000)]
    for ex in stored:
      number = int(re.search(r'val_(\d{8})', ex['file_name'].decode())[1])
      by_name[number - 1] = [int(x) for x in ex['real_label']]
    by_name_path = _write_json(os.path.join(root, 'real_by_name.json'), by_name)
    _, mnist_labels = mnist5k_arrays.load_arrays()
    test_labels = mnist_labels[mnist5k.split_indices(mnist_labels)['test']]
    positions = [_label_set(i, int(y)) for i, y in enumerate(test_labels[:200])]
    positions_path = _write_json(os.path.join(root, 'real.json'), positions)
    config.evals.digits = {'type': 'classification', 'every': 0, 'dataset': 'digits',
                           'split': 'test[:100]', 'pp': 'resize(28)'}
    config.evals.real = {'type': 'classification', 'every': 0,
                         'dataset': 'tfds:real_digits', 'split': 'test'}
    config.evals.real.label_key = 'real_label'
    config.evals.real_file = {'type': 'classification', 'every': 0,
                              'dataset': 'tfds:real_digits', 'real_labels': by_name_path}
    config.evals.real_mnist = {'type': 'classification', 'every': 0, 'split': 'test[:200]',
                               'real_labels': positions_path}
    result = loop.train_and_evaluate(config, workdir, devices=jax.devices()[:2])
    params = os.path.join(workdir, rundir.PARAMS_FILE)

    # The run's own data and info are unchanged by its other evaluators.
    self.assertEqual(int(result['examples_test']), 200)
    with open(os.path.join(workdir, loop.CONFIG_FILE)) as f:
      saved = json.load(f)
    self.assertEqual((saved['dataset'], saved['model']['num_classes']), ('mnist5k', 10))
    # Another dataset with its own pp: accuracy and loss over its 100 test digits.
    self.assertEqual(int(result['examples_digits']), 100)
    self.assertIn('loss_digits', result)
    digits_config = tiny_train_config.tiny_config(dataset='digits')
    digits_config.pp.eval = 'resize(28)'
    predicted, examples = _predictions(params, digits_config, 'digits', 'test[:100]')
    self.assertAlmostEqual(result['accuracy_digits'],
                           np.mean(predicted == [ex['label'] for ex in examples]), places=6)
    # ReaL from the TFDS feature and from the file matched by name: the same sets.
    predicted, examples = _predictions(params, config, 'tfds:real_digits', 'test')
    want = _real_accuracy(predicted, [set(ex['real_label']) for ex in examples])
    self.assertEqual((want[1], want[2]), (90, 30))
    for name in ('real', 'real_file'):
      with self.subTest(name):
        self.assertAlmostEqual(result[f'accuracy_{name}'], want[0], places=6)
        self.assertEqual((int(result[f'examples_{name}']),
                          int(result[f'unlabelled_{name}'])), want[1:])
        self.assertNotIn(f'loss_{name}', result)
    # real.json by position on the run's own dataset.
    predicted, _ = _predictions(params, config, 'mnist5k', 'test[:200]')
    want = _real_accuracy(predicted, positions)
    self.assertAlmostEqual(result['accuracy_real_mnist'], want[0], places=6)
    self.assertEqual((int(result['examples_real_mnist']),
                      int(result['unlabelled_real_mnist'])), (150, 50))


class ConfigErrorTest(absltest.TestCase):
  """Mistakes in an eval's data are one line before the work directory exists."""

  def test_mistakes_are_one_line_before_training(self):
    root = self.create_tempdir().full_path
    real = _write_json(os.path.join(root, 'real.json'), [[1]] * 199)
    garbage = os.path.join(root, 'garbage.json')
    with open(garbage, 'w') as f:
      f.write('[[1], [2')
    eval_of = lambda **options: {'evals': {'extra': {'type': 'classification', 'every': 0,
                                                     **options}}}
    cases = {
        'unknown dataset': (eval_of(dataset='imagenet_v3'),
                            r"config.evals.extra.dataset: Unknown dataset 'imagenet_v3'. "
                            r"Did you mean 'imagenet_v2'"),
        'class count': (eval_of(dataset='synthetic/16px_5cls_8train_40test'),
                        r"config.evals.extra: synthetic/16px_5cls_8train_40test has 5 "
                        r"classes but the model's head has 10"),
        'label key': (eval_of(label_key='digit'),
                      r"feature 'digit' is not a class label"),
        'length': (eval_of(split='test[:200]', real_labels=real),
                   rf'config.evals.extra.real_labels: The ReaL labels {real} have 199 '
                   r"entries but mnist5k split 'test\[:200\]' has 200 images"),
        'garbage': (eval_of(real_labels=garbage),
                    rf'config.evals.extra.real_labels: The ReaL labels {garbage} are not '
                    'JSON'),
        'missing': (eval_of(real_labels=os.path.join(root, 'nope.json')),
                    'Cannot read the ReaL labels .*nope.json'),
        'not a string': (eval_of(pp=3), r"config.evals.extra.pp=3: use a string"),
        'random pp': (eval_of(pp='random_crop(28)'), r'config.evals.extra.pp: '),
        'evaluation-only training data': (
            {'dataset': 'imagenet_v2'}, r'imagenet_v2 is for evaluation only'),
    }
    for name, (overrides, message) in cases.items():
      with self.subTest(name):
        config = tiny_train_config.tiny_config()
        config.update(overrides)
        workdir = os.path.join(root, 'run')
        with self.assertRaisesRegex((ValueError, OSError), message) as caught:
          loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
        self.assertNotIn('\n', str(caught.exception))
        self.assertFalse(os.path.exists(workdir))


def _evaluate(*args: str):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  return commands.run([sys.executable, '-m', 'vit_jax.evaluate', *args], env=env,
                      timeout=600, cwd='/')


class EvaluateCommandTest(absltest.TestCase):

  def test_real_labels_flag_scores_label_sets(self):
    params, data_dir, _ = tiny_trained.trained()
    root = self.create_tempdir().full_path
    _, mnist_labels = mnist5k_arrays.load_arrays()
    test_labels = mnist_labels[mnist5k.split_indices(mnist_labels)['test']]
    sets = [_label_set(i, int(y)) for i, y in enumerate(test_labels[:200])]
    path = _write_json(os.path.join(root, 'real.json'), sets)
    proc = _evaluate(f'--checkpoint={params}', '--split=test[:200]', f'--real_labels={path}',
                     '--batch=64')  # 200 = 3 x 64 + 8: the last batch padded
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    m = _REAL_LINE.match(proc.stdout.strip())
    self.assertIsNotNone(m, proc.stdout)
    config = tiny_trained.config(data_dir)
    predicted, _ = _predictions(params, config, 'mnist5k', 'test[:200]')
    accuracy, scored, unlabelled = _real_accuracy(predicted, sets)
    self.assertEqual((m[1], m[2], int(m[4]), int(m[5])),
                     ('mnist5k', 'test[:200]', scored, unlabelled))
    self.assertAlmostEqual(float(m[3]), accuracy, places=4)
    # The TFDS feature path: --label_key names the list feature of a prepared dataset.
    sources.prepare(sources.resolve('tfds:real_digits'), data_dir)
    proc = _evaluate(f'--checkpoint={params}', '--dataset=tfds:real_digits',
                     '--label_key=real_label')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    m = _REAL_LINE.match(proc.stdout.strip())
    self.assertIsNotNone(m, proc.stdout)
    predicted, examples = _predictions(params, config, 'tfds:real_digits', 'test')
    accuracy, scored, unlabelled = _real_accuracy(
        predicted, [set(ex['real_label']) for ex in examples])
    self.assertEqual((m[1], m[2], int(m[4]), int(m[5])),
                     ('tfds:real_digits', 'test', scored, unlabelled))
    self.assertAlmostEqual(float(m[3]), accuracy, places=4)
    # Mistakes: one line, exit 2 (a missing or garbage file before TensorFlow loads).
    garbage = os.path.join(root, 'garbage.json')
    with open(garbage, 'w') as f:
      f.write('not json')
    cases = {
        'missing': ([f'--real_labels={root}/nope.json'], 'Cannot read the ReaL labels'),
        'garbage': ([f'--real_labels={garbage}'], 'are not JSON'),
        'length': ([f'--real_labels={path}', '--split=test[:100]'],
                   "have 200 entries but mnist5k split 'test[:100]' has 100 images"),
    }
    for name, (flags, message) in cases.items():
      with self.subTest(name):
        proc = _evaluate(f'--checkpoint={params}', *flags)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual((proc.returncode, len(lines)), (2, 1), proc.stderr[-2000:])
        self.assertIn(message, lines[0])


class RealLabelsFileTest(absltest.TestCase):

  def test_file_checks_and_padding(self):
    root = self.create_tempdir().full_path
    self.assertEqual(real_labels.read(_write_json(f'{root}/a.json', [[3, 1], [], [0]])),
                     [[3, 1], [], [0]])
    np.testing.assert_array_equal(real_labels.padded([[3, 1], [], [0]]),
                                  [[3, 1], [-1, -1], [0, -1]])
    for value, message in (({'a': 1}, 'not a non-empty JSON list'), ([], 'non-empty'),
                           ([[1], [-2]], r'entry 1 is \[-2\]'), ([[1], 2], 'entry 1 is 2')):
      with self.subTest(value=value):
        with self.assertRaisesRegex(ValueError, message):
          real_labels.read(_write_json(f'{root}/b.json', value))
    with self.assertRaisesRegex(ValueError, 'name class 10, but the dataset has 10 classes'):
      real_labels.check_classes([[1], [10]], 'x.json', 10)


if __name__ == '__main__':
  absltest.main()
