"""Tests for the k-NN and linear-probe evaluators and the shared feature extraction."""
import os
import sys

from absl.testing import absltest
import numpy as np

from tests import commands
from tests import tiny_trained
from vit_jax import evaluators
from vit_jax.evaluators import base
from vit_jax.evaluators import features
from vit_jax.evaluators import knn
from vit_jax.evaluators import linear_probe
from vit_jax.inference import load
from vit_jax.parallel import sharding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = 'mnist5k|train[:300]|test[:100]'


def _reference_knn(train_x, train_y, test_x, num_classes, k, temperature):
  """DINO's eval_knn written out row by row in numpy (float64)."""
  train_x = train_x / np.linalg.norm(train_x, axis=1, keepdims=True)
  test_x = test_x / np.linalg.norm(test_x, axis=1, keepdims=True)
  votes = np.zeros((len(test_x), num_classes))
  for q, query in enumerate(test_x):
    sims = train_x @ query
    nearest = np.argsort(-sims)[:k]
    for i in nearest:
      votes[q, train_y[i]] += np.exp(sims[i] / temperature)
  return votes


class KnnMathTest(absltest.TestCase):

  def test_matches_brute_force_reference(self):
    rng = np.random.default_rng(0)
    train_x = rng.normal(size=(90, 12)) * rng.uniform(0.5, 3, size=12)
    train_y = rng.integers(6, size=90)
    test_x = rng.normal(size=(23, 12))
    test_y = rng.integers(6, size=23)
    for k, temperature in ((20, 0.07), (5, 0.5), (200, 1.0)):  # k > N: all neighbours
      # Chunks of 7 leave a padded last chunk (23 = 3 * 7 + 2).
      votes = knn.knn_votes(train_x, train_y, test_x, 6, k, temperature, chunk=7)
      ref = _reference_knn(train_x, train_y, test_x, 6, min(k, 90), temperature)
      np.testing.assert_allclose(votes, ref, rtol=2e-4)
      acc = knn.knn_accuracy((train_x, train_y), (test_x, test_y), 6, k, temperature,
                             chunk=7)
      self.assertAlmostEqual(acc['top1'], (ref.argmax(1) == test_y).mean())
      top5 = np.argsort(-ref, axis=1, kind='stable')[:, :5]  # ties: lower class first
      self.assertAlmostEqual(acc['top5'], (top5 == test_y[:, None]).any(1).mean())
    # Cosine similarity: scaling a feature vector changes nothing.
    scaled = knn.knn_votes(train_x * 7.0, train_y, test_x * 0.1, 6, chunk=64)
    np.testing.assert_allclose(scaled, knn.knn_votes(train_x, train_y, test_x, 6),
                               rtol=2e-4)
    with self.assertRaisesRegex(ValueError, 'temperature=0'):
      knn.knn_votes(train_x, train_y, test_x, 6, temperature=0)

  def test_linear_probe_separates_separable_features(self):
    rng = np.random.default_rng(1)
    means = rng.normal(size=(10, 32)) * 3.0

    def draw(n):
      labels = rng.integers(10, size=n)
      return means[labels] + rng.normal(size=(n, 32)), labels

    acc, wd = linear_probe.linear_probe_accuracy(draw(600), draw(400), 10)
    self.assertGreaterEqual(acc, 0.98)
    self.assertIn(wd, linear_probe.DEFAULT_WEIGHT_DECAYS)
    # Labels the features do not predict: chance, whatever the weight decay.
    x, _ = draw(600)
    acc, _ = linear_probe.linear_probe_accuracy(
        (x, rng.integers(10, size=600)), (draw(400)[0], rng.integers(10, size=400)), 10)
    self.assertLess(acc, 0.2)
    with self.assertRaisesRegex(ValueError, 'labels must lie'):
      linear_probe.fit_linear(x[:3], np.array([0, 1, 10]), 10, 1e-3)


class EvaluatorTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir, cls.data_dir = tiny_trained.untrained()
    cls.loaded = load.load_model(None, cls.workdir)
    cls.mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})

  def _config(self, **evals):
    c = tiny_trained.config(self.data_dir)
    c.batch_eval = 64  # 100 test examples: a padded last batch
    for name, options in evals.items():
      c.evals[name] = options
    return c

  def test_evaluators_from_config_share_the_features(self):
    c = self._config(
        knn={'type': 'knn', 'every': 0, 'datasets': (SMALL,), 'k': 20,
             'temperature': 0.07},
        linear={'type': 'linear_probe', 'every': 0, 'datasets': (SMALL,),
                'weight_decays': (1e-3, 1e-1), 'steps': 50})
    c.evals.test.every = -1
    scheduled = evaluators.create(c, base.Context(c, self.loaded.model, self.mesh))
    metrics = {}
    for s in scheduled:
      metrics.update(s.evaluator.run(self.loaded.params))
    self.assertEqual(set(metrics), {'knn/mnist5k_top1', 'knn/mnist5k_top5',
                                    'linear/mnist5k_top1'})
    # Random features of digits still beat chance (0.1) by far with 300 neighbours.
    self.assertBetween(metrics['knn/mnist5k_top1'], 0.2, 1.0)
    self.assertBetween(metrics['linear/mnist5k_top1'], 0.2, 1.0)
    # The evaluator's number is knn_accuracy of the shared extractor's features, every
    # example of both splits counted once.
    probe = next(s.evaluator for s in scheduled if s.name == 'knn')
    data, train, test = probe.split_features(self.loaded.params, SMALL)
    self.assertEqual((len(train[0]), len(test[0])), (300, 100))
    np.testing.assert_array_equal(train[1], data.train_labels)
    self.assertEqual(knn.knn_accuracy(train, test, 10)['top1'],
                     metrics['knn/mnist5k_top1'])
    # Padding does not change features: a batch of 5 equals the unpadded forward pass.
    images = next(features.image_batches(data, data.test_split, None, probe.pp, 5))[0]
    feats, _ = probe.extractor.features(self.loaded.params, [(images, np.zeros(5))])
    head_free = {k: v for k, v in self.loaded.params.items() if k != 'head'}
    direct = self.loaded.model.clone(num_classes=0).apply({'params': head_free}, images)
    np.testing.assert_allclose(feats, direct, atol=1e-5)

  def test_config_errors_before_anything_is_built(self):
    cases = [
        ({'type': 'knn', 'datasets': ('mnist5kk',)}, "evals.knn.datasets: Unknown dataset"),
        ({'type': 'knn', 'datasets': ('mnist5k|train|nope',)}, r"evals.knn.datasets "),
        ({'type': 'knn', 'k': 0}, r'evals.knn.k=0'),
        ({'type': 'knn', 'temperature': 0.0}, r'evals.knn.temperature=0.0'),
        ({'type': 'linear_probe', 'weight_decays': (-1.0,)},
         r'evals.knn.weight_decays'),
        ({'type': 'linear_probe', 'val_fraction': 1.0}, r'evals.knn.val_fraction'),
    ]
    for options, message in cases:
      c = self._config()
      c.evals.knn = {'every': 0, 'datasets': ('mnist5k',), **options}
      with self.assertRaisesRegex(ValueError, message):
        base.check(c)

  def test_cli_probes_a_workdir_and_refuses_bad_flags_in_one_line(self):
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.fewshot', f'--checkpoint={self.workdir}',
         f'--datasets={SMALL}', '--probes=knn,linear_probe', '--weight_decays=1e-2',
         f'--data_dir={self.data_dir}'],
        env=env, cwd=REPO, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    lines = proc.stdout.strip().splitlines()
    self.assertEqual([line.split(': ')[0] for line in lines[-3:]],
                     ['knn/mnist5k_top1', 'knn/mnist5k_top5', 'linear/mnist5k_top1'])
    for flag, message in (('--probes=knn,nope', '--probes=knn,nope: use some of'),):
      proc = commands.run(
          [sys.executable, '-m', 'vit_jax.fewshot', f'--checkpoint={self.workdir}', flag],
          env=env, cwd=REPO, timeout=300)
      self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
      lines = proc.stderr.strip().splitlines()
      self.assertLen(lines, 1, proc.stderr)
      self.assertStartsWith(lines[0], f'vit_jax.fewshot: error: {message}')


if __name__ == '__main__':
  absltest.main()
