"""Tests for the pure train/eval steps: losses, accumulation, evaluation sums."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import models
from vit_jax.configs import base
from vit_jax.evaluators import classification
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step


def _config(**kw):
  c = base.get_base_config()
  c.update(dict(optimizer='sgd', base_lr=0.1, warmup_steps=0,
                total_steps=10, decay_type='constant', grad_clip_norm=0.0))
  c.update(kw)
  return c


def _tx(c):
  return optimizers.make(c, schedules.make(c))


def _batch(n=8, res=16, classes=3, seed=0):
  rng = np.random.RandomState(seed)
  images = rng.uniform(-1, 1, (n, res, res, 3)).astype(np.float32)
  labels = np.eye(classes, dtype=np.float32)[rng.randint(0, classes, n)]
  return {'image': jnp.asarray(images), 'label': jnp.asarray(labels)}


class TrainStepTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                                  dropout_rate=0.0)
    self.objective = objectives.Supervised(self.model, 'softmax_xent')

  def _state(self, tx):
    return train_step.init_state(self.objective, tx, jax.random.PRNGKey(0),
                                 (1, 16, 16, 3))

  def test_loss_decreases(self):
    c = _config()
    tx = _tx(c)
    step = jax.jit(train_step.make_train_step(self.objective, tx, 1,
                                              schedules.make(c)))
    state, batch = self._state(tx), _batch()
    losses = []
    for _ in range(10):
      state, m = step(state, batch)
      losses.append(float(m['train_loss']))
    self.assertEqual(int(state.step), 10)
    self.assertLess(losses[-1], losses[0] * 0.8)
    self.assertAlmostEqual(float(m['learning_rate']), 0.1, places=6)
    self.assertGreater(float(m['grad_norm']), 0.0)

  def test_accumulation_equals_large_batch(self):
    tx = _tx(_config())
    s1 = jax.jit(train_step.make_train_step(self.objective, tx, 1))
    s4 = jax.jit(train_step.make_train_step(self.objective, tx, 4))
    a = b = self._state(tx)
    for i in range(3):
      batch = _batch(seed=i)
      a, ma = s1(a, batch)
      b, mb = s4(b, batch)
      np.testing.assert_allclose(ma['train_loss'], mb['train_loss'], rtol=1e-5)
      np.testing.assert_allclose(ma['grad_norm'], mb['grad_norm'], rtol=1e-4)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
      np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)

  def test_losses(self):
    logits = jnp.array([[0.0, 0.0]])
    labels = jnp.array([[1.0, 0.0]])
    np.testing.assert_allclose(
        objectives.sigmoid_xent(logits, labels), [2 * np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(
        objectives.softmax_xent(logits, labels), [np.log(2)], rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "loss='hinge' is unknown"):
      objectives.Supervised(self.model, 'hinge')

  def test_eval_step_masks_padding(self):
    ev = classification.eval_step(self.model, objectives.softmax_xent)
    state = self._state(_tx(_config()))
    batch = _batch(n=4)
    batch['mask'] = jnp.array([1.0, 1.0, 1.0, 0.0])
    out = ev(state.params, batch)
    self.assertEqual(float(out['count']), 3.0)
    # Zero-initialised head: uniform logits, loss log(3) per real example.
    np.testing.assert_allclose(out['loss'], 3 * np.log(3), rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
