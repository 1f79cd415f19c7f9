"""Tests for the streaming linear evaluation protocols (DINO's and MAE's) of the linear probe."""
import os
import sys

from absl.testing import absltest
import numpy as np

from tests import commands
from tests import tiny_trained
from vit_jax import configs
from vit_jax import evaluators
from vit_jax.evaluators import base
from vit_jax.evaluators import features
from vit_jax.evaluators import linear_protocols
from vit_jax.inference import load
from vit_jax.parallel import sharding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = 'mnist5k|train[:256]|test[:128]'


def _settings(protocol: str, **options) -> linear_protocols.Settings:
  return linear_protocols.resolve('linear', {'protocol': protocol, **options})


def _blobs(n: int, dim: int = 8, classes: int = 3, seed: int = 0):
  """Separable Gaussian blobs: features [n, dim] and labels [n]."""
  rng = np.random.default_rng(seed)
  centres = rng.normal(0, 3, (classes, dim))
  labels = rng.integers(0, classes, n)
  return (centres[labels] + rng.normal(0, 1, (n, dim))).astype(np.float32), labels


def _epoch_rows(n: int, batch: int, steps: int, seed: int = 0) -> list[np.ndarray]:
  """Row batches of a shuffled order repeated over epochs."""
  rng = np.random.default_rng(seed)
  order = np.concatenate([rng.permutation(n) for _ in range(steps * batch // n + 1)])
  return [order[i * batch:(i + 1) * batch] for i in range(steps)]


class HeadTest(absltest.TestCase):

  def test_batchnorm_without_affine_uses_batch_then_running_statistics(self):
    s = _settings('mae', base_lrs=(0.1,), batch=8)
    state = linear_protocols.init_heads(s, 4, 3)
    # The heads' only parameters: the linear layer. The BatchNorm has statistics, no affine.
    self.assertEqual(set(state['params']), {'kernel', 'bias'})
    self.assertEqual(state['bn']['mean'].shape, (4,))
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (8, 4)).astype(np.float32)
    x[6:] = 1e3  # padded rows: masked out of the statistics
    mask = np.array([1] * 6 + [0] * 2, np.float32)
    y, stats = linear_protocols.batch_norm(x, mask, state['bn'], train=True)
    y = np.asarray(y)
    np.testing.assert_allclose(y[:6].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(y[:6].std(0), 1, atol=1e-3)  # biased variance, eps 1e-6
    real = x[:6]
    np.testing.assert_allclose(stats['mean'], 0.1 * real.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats['var'], 0.9 + 0.1 * real.var(0, ddof=1), rtol=1e-5)
    # Evaluation normalises with the running statistics, whatever the batch.
    z, same = linear_protocols.batch_norm(x[:2], np.ones(2, np.float32), stats, train=False)
    np.testing.assert_allclose(
        z, (x[:2] - stats['mean']) / np.sqrt(stats['var'] + 1e-6), rtol=1e-5)
    np.testing.assert_array_equal(same['mean'], stats['mean'])

  def test_lr_sweep_trains_one_head_per_lr_and_reports_each(self):
    x, y = _blobs(156)
    x, y, test = x[:96], y[:96], (x[96:], y[96:])
    for protocol in ('dino', 'mae'):
      with self.subTest(protocol):
        lrs = (1e-3, 0.1, 3.0)
        s = _settings(protocol, base_lrs=lrs, batch=32, epochs=6, warmup_epochs=1)
        steps = linear_protocols.total_steps(s, len(x))
        self.assertEqual(steps, 18)
        rows = _epoch_rows(len(x), 32, steps)
        swept = linear_protocols.train_heads(
            linear_protocols.array_batches(x, y, rows, 32), s, 8, 3, len(x))
        accs = linear_protocols.head_accuracies(
            swept, linear_protocols.array_batches(*test, [np.arange(60)], 64), s)
        self.assertLen(accs, 3)
        for i, lr in enumerate(lrs):
          alone = linear_protocols.train_heads(
              linear_protocols.array_batches(x, y, rows, 32),
              _settings(protocol, base_lrs=(lr,), batch=32, epochs=6, warmup_epochs=1),
              8, 3, len(x))
          np.testing.assert_allclose(swept['params']['kernel'][i],
                                     alone['params']['kernel'][0], rtol=1e-5, atol=1e-6)
        if protocol == 'dino':  # LARS moves its heads by 0.1% of their norm per unit lr
          # The lrs matter: the smallest barely moves, a good one separates the blobs.
          self.assertGreater(accs.max(), 0.9)
          self.assertGreater(accs.max() - accs[0], 0.05)

  def test_schedules_follow_the_papers(self):
    dino = _settings('dino', batch=100, epochs=4)
    f = linear_protocols.lr_factor(dino, 200)  # 2 steps per epoch
    # DINO: cosine stepped once per epoch.
    np.testing.assert_allclose([float(f(s)) for s in (0, 1, 2, 3, 4, 8)],
                               [1, 1, (1 + np.cos(np.pi / 4)) / 2,
                                (1 + np.cos(np.pi / 4)) / 2, 0.5, 0.0], atol=1e-6)
    mae = _settings('mae', batch=100, epochs=4, warmup_epochs=1)
    f = linear_protocols.lr_factor(mae, 200)
    # MAE: a linear warm-up over fractional epochs, then cosine per step.
    np.testing.assert_allclose([float(f(s)) for s in (0, 1, 2, 5, 8)],
                               [0, 0.5, 1, (1 + np.cos(np.pi * 1.5 / 3)) / 2, 0],
                               atol=1e-6)
    np.testing.assert_allclose(mae.learning_rates(), [0.1 * 100 / 256], rtol=1e-6)

  def test_defaults_are_the_papers_and_the_config_exposes_each_knob(self):
    dino, mae = _settings('dino'), _settings('mae')
    self.assertEqual((dino.batch, dino.epochs, dino.n_last_blocks, dino.avgpool,
                      dino.optimizer, dino.momentum, dino.weight_decay, dino.head_std),
                     (1024, 100, 4, False, 'sgd', 0.9, 0.0, 0.01))
    self.assertEqual((mae.batch, mae.epochs, mae.warmup_epochs, mae.base_lrs,
                      mae.optimizer, mae.trust_coefficient, mae.batchnorm,
                      mae.n_last_blocks),
                     (16384, 90, 10, (0.1,), 'lars', 0.001, True, 1))
    linear = configs.get_base_config().evals.linear
    knobs = set(linear) - {'type', 'every', 'datasets', 'weight_decays', 'steps',
                           'resolution', 'protocol', 'seed'}
    self.assertEqual(knobs, set(linear_protocols.PROTOCOLS['dino']))
    self.assertEqual(knobs, set(linear_protocols.PROTOCOLS['mae']))
    self.assertTrue(all(linear[k] is None for k in knobs))  # None: the protocol's


class StreamingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    params_path, cls.data_dir, _ = tiny_trained.trained()
    cls.loaded = load.load_model(None, os.path.dirname(params_path))
    cls.mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})

  def _config(self, **linear):
    c = tiny_trained.config(self.data_dir)
    c.batch_eval = 64
    c.evals.test.every = -1
    c.evals.linear.every = 0
    c.evals.linear.datasets = (SMALL,)
    for key, value in linear.items():
      c.evals.linear[key] = value
    return c

  def _probe(self, c):
    context = base.Context(c, self.loaded.model, self.mesh)
    return evaluators.create(c, context)[0].evaluator

  def test_streaming_equals_in_memory_features_fed_in_the_same_order(self):
    params = self.loaded.params
    for protocol, blocks in (('dino', 2), ('mae', 1)):
      with self.subTest(protocol):
        c = self._config(protocol=protocol, batch=32, epochs=2.0, warmup_epochs=0.5,
                         base_lrs=(0.01, 0.3), n_last_blocks=blocks, augment=False,
                         shuffle_buffer=64)
        probe = self._probe(c).streaming
        s = probe.settings
        data = features.open_dataset(SMALL, self.data_dir)
        n = len(data.train_labels)
        self.assertEqual(n, 256)
        steps = linear_protocols.total_steps(s, n)
        self.assertEqual(steps, 16)
        # Streaming: each batch's features computed on the devices as it comes.
        rows = []

        def recorded(stream):
          for images, labels, index in stream:
            rows.append(index)
            yield images, labels
        images = features.augmented_batches(data, data.train_split, probe.pp, s.batch,
                                            s.seed, s.shuffle_buffer, train=False)
        streamed = linear_protocols.train_heads(
            linear_protocols.stream_features(probe.extractor, probe.feature_fn, params,
                                             recorded(images), s.batch),
            s, 64 * blocks, 10, n, steps)
        self.assertLen(rows, steps)
        order = np.concatenate(rows)
        self.assertFalse(np.array_equal(order[:n], np.arange(n)))  # shuffled
        self.assertEqual(sorted(order[:n // 2]), sorted(set(order[:n // 2])))
        # In memory: every training feature at once (file order), fed in the same order.
        x = np.concatenate([
            np.asarray(probe.feature_fn(params, probe.extractor.shard(im, 64)))[:len(im)]
            for im, _ in features.image_batches(data, data.train_split, None, probe.pp,
                                                64)])
        self.assertEqual(x.shape, (n, 64 * blocks))
        in_memory = linear_protocols.train_heads(
            linear_protocols.array_batches(x, data.train_labels, rows, s.batch),
            s, x.shape[1], 10, n, steps)
        for key in ('kernel', 'bias'):
          np.testing.assert_allclose(streamed['params'][key], in_memory['params'][key],
                                     rtol=0, atol=1e-7)
        np.testing.assert_allclose(streamed['bn']['var'], in_memory['bn']['var'],
                                   rtol=1e-6)
        # The tolerance tells orders apart: one batch out of place moves the heads more.
        shifted = linear_protocols.train_heads(
            linear_protocols.array_batches(x, data.train_labels, rows[1:] + rows[:1],
                                           s.batch), s, x.shape[1], 10, n, steps)
        self.assertGreater(float(np.abs(np.asarray(shifted['params']['bias'])
                                        - np.asarray(in_memory['params']['bias'])).max()),
                           1e-5)

  def test_dino_features_are_the_last_blocks_class_tokens_through_the_final_norm(self):
    params = self.loaded.params
    probe = self._probe(self._config(protocol='dino', n_last_blocks=2, avgpool=True,
                                     batch=32)).streaming
    data = features.open_dataset(SMALL, self.data_dir)
    images = next(features.image_batches(data, data.test_split, None, probe.pp, 16))[0]
    tokens = probe.extractor.layer_tokens(params, images)  # [2, 16, 17, D]
    norm = params['Transformer']['encoder_norm']

    def layer_norm(t):
      mean = t.mean(-1, keepdims=True)
      var = t.var(-1, keepdims=True)
      return (t - mean) / np.sqrt(var + 1e-6) * norm['scale'] + norm['bias']
    normed = [layer_norm(t) for t in tokens]
    expected = np.concatenate([normed[0][:, 0], normed[1][:, 0],
                               normed[1][:, 1:].mean(1)], axis=-1)
    got = np.asarray(probe.feature_fn(params, probe.extractor.shard(images, 16)))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # MAE's (n=1, no avgpool) is the class token after the final norm: the model's features.
    mae = self._probe(self._config(protocol='mae', batch=32)).streaming
    own, _ = mae.extractor.features(params, [(images, np.zeros(16))])
    np.testing.assert_allclose(
        np.asarray(mae.feature_fn(params, mae.extractor.shard(images, 16))), own,
        rtol=1e-4, atol=1e-4)

  def test_each_protocol_beats_chance_on_mnist5k_and_reports_every_lr(self):
    for protocol, options in (
        ('dino', {'n_last_blocks': 2, 'base_lrs': (0.01, 0.1)}),
        ('mae', {'base_lrs': (10.0, 100.0), 'warmup_epochs': 1.0})):
      with self.subTest(protocol):
        c = self._config(protocol=protocol, batch=64, epochs=4.0, **options)
        c.evals.linear.datasets = ('mnist5k|train[:1024]|test[:256]',)
        metrics = self._probe(c).run(self.loaded.params)
        lrs = options['base_lrs']
        self.assertEqual(set(metrics), {'linear/mnist5k_top1'} | {
            f'linear/mnist5k_top1_lr{lr:g}' for lr in lrs})
        self.assertEqual(metrics['linear/mnist5k_top1'],
                         max(metrics[f'linear/mnist5k_top1_lr{lr:g}'] for lr in lrs))
        self.assertGreater(metrics['linear/mnist5k_top1'], 0.35)  # chance: 0.1

  def test_knn_runs_beside_a_streaming_probe_from_one_config(self):
    c = self._config(protocol='mae', batch=64, epochs=1.0, warmup_epochs=0.5)
    c.evals.knn = {'type': 'knn', 'every': 0, 'datasets': (SMALL,), 'k': 20,
                   'temperature': 0.07}
    scheduled = evaluators.create(c, base.Context(c, self.loaded.model, self.mesh))
    metrics = {}
    for s in scheduled:
      metrics.update(s.evaluator.run(self.loaded.params))
    self.assertContainsSubset({'knn/mnist5k_top1', 'linear/mnist5k_top1',
                               'linear/mnist5k_top1_lr0.1'}, set(metrics))
    self.assertBetween(metrics['knn/mnist5k_top1'], 0.4, 1.0)  # the trained features

  def test_bad_options_are_one_line_errors_before_training(self):
    cases = [
        ({'protocol': 'simclr'}, r"evals.linear.protocol='simclr': use one of lbfgs, "),
        ({'protocol': 'dino', 'base_lrs': (0.1, 0.0)}, r'evals.linear.base_lrs=.*> 0'),
        ({'protocol': 'mae', 'warmup_epochs': 5.0, 'epochs': 5.0},
         r'evals.linear.warmup_epochs=5.0'),
        ({'protocol': 'dino', 'optimizer': 'adam'}, r"evals.linear.optimizer='adam'"),
    ]
    for options, message in cases:
      with self.subTest(message):
        with self.assertRaisesRegex(ValueError, message):
          base.check(self._config(**options))
    built = [
        ({'protocol': 'dino'}, self.loaded.model,
         r'evals.linear: n_last_blocks=4: the model has 2 blocks; use 1..2'),
        ({'protocol': 'mae', 'batch': 12}, self.loaded.model,
         rf'evals.linear.batch=12: use a multiple of the {self.mesh.devices.size} devices'),
        ({'protocol': 'mae'}, self.loaded.model.clone(classifier='gap'),
         r'reads class tokens but the VisionTransformer has none'),
    ]
    for options, model, message in built:
      with self.subTest(message):
        c = self._config(**options)
        with self.assertRaisesRegex(ValueError, message) as caught:
          evaluators.create(c, base.Context(c, model, self.mesh))
        self.assertNotIn('\n', str(caught.exception))

  def test_cli_runs_a_protocol_and_refuses_bad_flags_in_one_line(self):
    env = dict(os.environ, PYTHONPATH=REPO)
    workdir = os.path.dirname(tiny_trained.trained()[0])
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.fewshot', f'--checkpoint={workdir}',
         f'--datasets={SMALL}', '--probes=linear_probe', '--linear_protocol=dino',
         '--linear_batch=64', '--linear_epochs=1', '--linear_lrs=0.01,0.1',
         '--linear_n_last_blocks=2', f'--data_dir={self.data_dir}'],
        env=env, cwd=REPO, timeout=300)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    keys = [line.split(': ')[0] for line in proc.stdout.strip().splitlines()]
    self.assertEqual(sorted(keys), ['linear/mnist5k_top1', 'linear/mnist5k_top1_lr0.01',
                                    'linear/mnist5k_top1_lr0.1'])
    for flag, message in (('--linear_protocol=byol', '--linear_protocol=byol: use one'),
                          ('--linear_lrs=0.1,-1', '--linear_lrs=0.1,-1: use numbers')):
      proc = commands.run(
          [sys.executable, '-m', 'vit_jax.fewshot', f'--checkpoint={workdir}',
           '--probes=linear_probe', flag], env=env, cwd=REPO, timeout=300)
      self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
      lines = proc.stderr.strip().splitlines()
      self.assertLen(lines, 1, proc.stderr)
      self.assertIn(message, lines[0])


if __name__ == '__main__':
  absltest.main()
