"""Tests for few-shot linear evaluation: the closed-form probe, sampling, the evaluator, the CLI."""
import os
import sys

from absl.testing import absltest
import jax
import ml_collections
import numpy as np

from tests import commands
from tests import tiny_trained
from vit_jax.evaluators import base
from vit_jax.evaluators import features
from vit_jax.evaluators import fewshot
from vit_jax.inference import curves
from vit_jax.inference import load
from vit_jax.parallel import sharding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RidgeTest(absltest.TestCase):

  def test_matches_direct_solution_primal_and_dual(self):
    rng = np.random.default_rng(0)
    for n, d in ((40, 8), (8, 40)):  # more points than dims, and fewer
      x = rng.normal(size=(n, d)) * rng.uniform(0.5, 3, size=d) + 1.0
      y = rng.integers(3, size=n)
      probe = fewshot.fit_ridge(x, y, 3, [0.5, 8.0])
      xw = (x - x.mean(0)) / (x.std(0) + 1e-6)
      t = 2.0 * np.eye(3)[y] - 1.0
      for i, reg in enumerate((0.5, 8.0)):
        w = np.linalg.solve(xw.T @ xw + reg * np.eye(d), xw.T @ (t - t.mean(0)))
        np.testing.assert_allclose(probe.weights[i], w, rtol=1e-6, atol=1e-9)
      np.testing.assert_allclose(probe.bias, t.mean(0))

  def test_separable_features_are_classified_perfectly(self):
    rng = np.random.default_rng(1)
    means = rng.normal(size=(10, 64)) * 4.0

    def draw(labels):
      return means[labels] + rng.normal(size=(len(labels), 64)), labels

    test = draw(rng.integers(10, size=2000))
    for shots in (1, 5, 25):
      train = draw(np.repeat(np.arange(10), shots))
      val = draw(np.arange(10))
      acc, _ = fewshot.fewshot_accuracy(train, val, test, 10,
                                        fewshot.DEFAULT_L2_REGS)
      self.assertEqual(acc, 1.0, f'{shots}-shot')

  def test_random_labels_give_chance(self):
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(250, 32)), rng.integers(10, size=250)
    test = rng.normal(size=(4000, 32)), rng.integers(10, size=4000)
    val = rng.normal(size=(100, 32)), rng.integers(10, size=100)
    acc, l2 = fewshot.fewshot_accuracy((x, y), val, test, 10,
                                       fewshot.DEFAULT_L2_REGS)
    self.assertBetween(acc, 0.07, 0.13)
    self.assertIn(l2, fewshot.DEFAULT_L2_REGS)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, 'labels must lie'):
      fewshot.fit_ridge(np.zeros((3, 2)), np.array([0, 1, 5]), 3, [1.0])
    with self.assertRaisesRegex(ValueError, 'l2_regs'):
      fewshot.fit_ridge(np.zeros((3, 2)), np.array([0, 1, 2]), 3, [0.0])


class SampleShotsTest(absltest.TestCase):

  def test_classes_nesting_validation_and_seeds(self):
    labels = np.repeat(np.arange(4), [30, 30, 3, 30])
    shots, val = fewshot.sample_shots(labels, 4, 5, 10, seed=0)
    self.assertEqual(shots.shape, (4, 5))
    for c in range(4):
      rows = shots[c][shots[c] >= 0]
      np.testing.assert_array_equal(labels[rows], c)
    self.assertEqual(list(shots[2]).count(-1), 2)  # class 2 has only 3 examples
    self.assertEmpty(set(val) & set(shots.ravel()))
    self.assertLen(val, 30)  # class 2 has none left for validation
    again, _ = fewshot.sample_shots(labels, 4, 5, 10, seed=0)
    other, _ = fewshot.sample_shots(labels, 4, 5, 10, seed=1)
    np.testing.assert_array_equal(shots, again)
    self.assertFalse(np.array_equal(shots, other))


class EvaluatorTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.params_path, cls.data_dir, _ = tiny_trained.trained()
    cls.config = tiny_trained.config(cls.data_dir)
    cls.loaded = load.load_model(None, cls.params_path)
    cls.mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})

  def _evaluator(self, config=None, **options):
    config = config or tiny_trained.config(self.data_dir)
    opts = ml_collections.ConfigDict(config.evals.fewshot.to_dict())
    opts.datasets = ('mnist5k',)
    opts.update(options)
    return fewshot.FewShot('fewshot', opts,
                           base.Context(config, self.loaded.model, self.mesh))

  def test_trained_features_beat_chance_by_far(self):
    evaluator = self._evaluator()
    metrics = evaluator.run(self.loaded.params)
    self.assertEqual(set(metrics), {f'fewshot/mnist5k_{k}shot'
                                    for k in (1, 5, 10, 25)})
    self.assertGreater(metrics['fewshot/mnist5k_1shot'], 0.3)
    self.assertGreater(metrics['fewshot/mnist5k_10shot'], 0.6)
    self.assertGreater(metrics['fewshot/mnist5k_25shot'],
                       metrics['fewshot/mnist5k_1shot'])
    # Same parameters, same draws: the evaluator is deterministic.
    self.assertEqual(evaluator.run(self.loaded.params), metrics)

  def test_untrained_features_are_worse(self):
    evaluator = self._evaluator(shots=(10,), seeds=1)
    trained = evaluator.run(self.loaded.params)['fewshot/mnist5k_10shot']
    shuffled = jax.tree.map(
        lambda x: np.random.default_rng(0).permutation(x.ravel()).reshape(x.shape),
        self.loaded.params)
    untrained = evaluator.run(shuffled)['fewshot/mnist5k_10shot']
    self.assertGreater(trained, untrained + 0.1)

  def test_config_errors(self):
    with self.assertRaisesRegex(ValueError, r'evals\.fewshot\.datasets'):
      self._evaluator(datasets=('',))
    with self.assertRaisesRegex(ValueError, r'evals\.fewshot\.shots'):
      self._evaluator(shots=(0, 5))
    with self.assertRaisesRegex(ValueError, r'evals\.fewshot\.seeds'):
      self._evaluator(seeds=0)
    c = tiny_trained.config(self.data_dir)
    c.batch_eval = 7
    with self.assertRaisesRegex(ValueError, 'batch_eval=7'):
      self._evaluator(c)
    with self.assertRaisesRegex(ValueError, "Unknown dataset 'mnist5kk'"):
      self._evaluator(datasets=('mnist5kk',)).run(self.loaded.params)
    with self.assertRaisesRegex(ValueError, 'Bad split'):
      self._evaluator(datasets=('mnist5k|train|nope',)).run(self.loaded.params)
    with self.assertRaisesRegex(ValueError, 'name|train_split|test_split'):
      features.parse_dataset('mnist5k|train')

  def test_metric_names(self):
    self.assertEqual(fewshot.metric_name('fewshot', 'synthetic/small', 5),
                     'fewshot/synthetic_small_5shot')
    self.assertEqual(
        fewshot.metric_name('fs', 'imagenet2012|train[:9]|validation', 1),
        'fs/imagenet2012_1shot')
    names = [fewshot.metric_name('fewshot', 'mnist5k', k) for k in (25, 10, 5, 1)]
    self.assertEqual(sorted(names + ['accuracy_test'], key=curves.metric_order),
                     ['accuracy_test'] + names[::-1])

  def test_cli_on_a_workdir_prints_shots_in_numeric_order(self):
    # No --data_dir: a work directory's run names it (its config.json). TFDS's default under
    # HOME is unusable here (a file), so a fallback to it would fail.
    home = self.create_tempdir().full_path
    with open(os.path.join(home, 'tensorflow_datasets'), 'w') as f:
      f.write('not a directory')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.fewshot',
         f'--checkpoint={os.path.dirname(self.params_path)}',
         '--datasets=mnist5k', '--shots=10,1,5', '--seeds=1'],
        env=dict(os.environ, PYTHONPATH=REPO, HOME=home), cwd=REPO, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    lines = proc.stdout.strip().splitlines()
    self.assertEqual([line.split(': ')[0] for line in lines[-3:]],
                     ['fewshot/mnist5k_1shot', 'fewshot/mnist5k_5shot',
                      'fewshot/mnist5k_10shot'])
    self.assertGreater(float(lines[-2].split(': ')[-1]), 0.4)


if __name__ == '__main__':
  absltest.main()
