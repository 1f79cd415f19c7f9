"""Tests for the recipes' schedules and optimizers."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from configs import common
from configs import recipes
from vit_jax import optim


def _config(**kw):
  c = common.get_base_config()
  c.update(kw)
  return c


class ScheduleTest(absltest.TestCase):

  def test_pretrain_recipe_learning_rates(self):
    c = common.get_base_config()
    recipes.apply_pretrain(c, 'imagenet2012', 'ViT-B_16')
    lr = optim.make_schedule(c)
    self.assertEqual(c.batch, 4096)
    self.assertEqual(c.warmup_steps, 10_000)
    self.assertAlmostEqual(float(lr(0)), 0.0)
    self.assertAlmostEqual(float(lr(5_000)), 5e-4, places=9)
    self.assertAlmostEqual(float(lr(10_000)), 1e-3, places=9)
    # Linear decay to 1e-5 at the end.
    mid = 10_000 + (c.total_steps - 10_000) // 2
    self.assertAlmostEqual(float(lr(mid)), (1e-3 + 1e-5) / 2, delta=1e-7)
    self.assertAlmostEqual(float(lr(c.total_steps)), 1e-5, places=9)

  def test_finetune_recipe_learning_rates(self):
    c = common.get_base_config()
    recipes.apply_finetune(c, 'cifar10')
    lr = optim.make_schedule(c)
    self.assertEqual((c.optimizer, c.momentum, c.batch), ('sgd', 0.9, 512))
    self.assertEqual((c.total_steps, c.warmup_steps), (10_000, 500))
    self.assertAlmostEqual(float(lr(250)), 0.015, places=7)
    self.assertAlmostEqual(float(lr(500)), 0.03, places=7)
    # Cosine: halfway through the decay the rate is half the peak.
    self.assertAlmostEqual(float(lr(500 + 4_750)), 0.015, places=6)
    self.assertAlmostEqual(float(lr(10_000)), 0.0, places=9)
    self.assertEqual(c.weight_decay, 0.0)
    self.assertEqual(c.grad_clip_norm, 1.0)
    self.assertEqual(c.pp.crop, 384)
    self.assertEqual(recipes.FINETUNE_STEPS['imagenet2012'], 20_000)

  def test_bad_decay_type(self):
    with self.assertRaisesRegex(ValueError, "decay_type='cosin'"):
      optim.make_schedule(_config(decay_type='cosin'))


class OptimizerTest(absltest.TestCase):

  def _params(self):
    return {'head': {'kernel': jnp.ones((3, 2)), 'bias': jnp.ones((2,))},
            'LayerNorm_0': {'scale': jnp.ones((3,))},
            'posembed_input': {'pos_embedding': jnp.ones((1, 4, 3))}}

  def test_decay_mask_only_kernels(self):
    mask = optim.decay_mask(self._params())
    self.assertTrue(mask['head']['kernel'])
    self.assertFalse(mask['head']['bias'])
    self.assertFalse(mask['LayerNorm_0']['scale'])
    self.assertFalse(mask['posembed_input']['pos_embedding'])

  def test_adamw_decays_kernels_by_lr_times_wd(self):
    c = _config(optimizer='adam', base_lr=0.1, warmup_steps=0, total_steps=10,
                decay_type='constant', weight_decay=0.5, grad_clip_norm=0.0)
    tx = optim.make_optimizer(c)
    params = self._params()
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zeros, tx.init(params), params)
    # Zero gradients: only decay moves parameters, by -lr * wd * p.
    np.testing.assert_allclose(updates['head']['kernel'], -0.05)
    np.testing.assert_allclose(updates['head']['bias'], 0.0)
    np.testing.assert_allclose(updates['LayerNorm_0']['scale'], 0.0)

  def test_gradient_clipping(self):
    c = _config(optimizer='sgd', momentum=0.0, base_lr=1.0, warmup_steps=0,
                total_steps=10, decay_type='constant', grad_clip_norm=1.0)
    tx = optim.make_optimizer(c)
    params = {'w': jnp.zeros((4,))}
    updates, _ = tx.update({'w': jnp.full((4,), 10.0)}, tx.init(params), params)
    self.assertAlmostEqual(float(jnp.linalg.norm(updates['w'])), 1.0, places=5)

  def test_bf16_momentum(self):
    c = _config(optimizer='sgd', optim_dtype='bfloat16')
    tx = optim.make_optimizer(c)
    state = tx.init({'w': jnp.zeros((4,))})
    dtypes = {x.dtype for x in jax.tree.leaves(state) if x.ndim}
    self.assertIn(jnp.dtype(jnp.bfloat16), dtypes)

  def test_unknown_optimizer(self):
    with self.assertRaisesRegex(ValueError, "optimizer='adamw'"):
      optim.make_optimizer(_config(optimizer='adamw'))


if __name__ == '__main__':
  absltest.main()
