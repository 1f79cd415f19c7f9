"""Tests for the recipes' schedules (optax) and the optimizers chosen by name."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from tests import test_train
from vit_jax import models
from vit_jax.configs import base
from vit_jax.configs import recipes
from vit_jax.train import layer_decay
from vit_jax.train import loop
from vit_jax.train import optimizers
from vit_jax.train import schedules


def _config(**kw):
  c = base.get_base_config()
  c.update(kw)
  return c


def _tx(c):
  return optimizers.make(c, schedules.make(c))


class ScheduleTest(absltest.TestCase):

  def test_pretrain_recipe_learning_rates(self):
    c = base.get_base_config()
    recipes.apply_pretrain(c, 'imagenet21k', 'ViT-B_16')
    lr = schedules.make(c)
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
    c = base.get_base_config()
    c.model_name = 'ViT-L_16'  # 0.03; the original gives ViT-B/16 0.01 on CIFAR-10
    recipes.apply_finetune(c, 'cifar10')
    lr = schedules.make(c)
    self.assertEqual((c.optimizer, c.optimizers.sgd.momentum, c.batch),
                     ('sgd', 0.9, 512))
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

  def test_matches_the_closed_form_at_every_step(self):
    for decay in ('cosine', 'linear', 'constant'):
      for warmup in (0, 7):
        c = _config(base_lr=0.3, end_lr=0.01, warmup_steps=warmup, total_steps=40,
                    decay_type=decay)
        lr = schedules.make(c)
        for step in range(41):
          if step < warmup:
            want = 0.3 * step / warmup
          else:
            t = (step - warmup) / (40 - warmup)
            want = {'cosine': 0.01 + 0.29 * 0.5 * (1 + np.cos(np.pi * t)),
                    'linear': 0.01 + 0.29 * (1 - t), 'constant': 0.3}[decay]
          self.assertAlmostEqual(float(lr(step)), want, places=6,
                                 msg=f'{decay} warmup {warmup} step {step}')

  def test_original_end_of_decay(self):
    # end_lr=-1: the original vit_jax's train.py, 1e-5 after linear decay, 0 after cosine.
    for decay, end in (('linear', 1e-5), ('cosine', 0.0)):
      lr = schedules.make(_config(base_lr=0.03, end_lr=-1.0, warmup_steps=5,
                                  total_steps=50, decay_type=decay))
      self.assertAlmostEqual(float(lr(50)), end, places=9, msg=decay)
      self.assertAlmostEqual(float(lr(5)), 0.03, places=7, msg=decay)
    lr = schedules.make(_config(base_lr=0.03, end_lr=-1.0, warmup_steps=0,
                                total_steps=40, decay_type='linear'))
    self.assertAlmostEqual(float(lr(20)), (0.03 + 1e-5) / 2, places=7)

  def test_bad_settings(self):
    with self.assertRaisesRegex(ValueError, "decay_type='cosin'"):
      schedules.make(_config(decay_type='cosin'))
    with self.assertRaisesRegex(ValueError, 'warmup_steps=10 must be in'):
      schedules.make(_config(warmup_steps=10, total_steps=10))
    with self.assertRaisesRegex(ValueError, 'base_lr=nan'):
      schedules.make(_config(base_lr=float('nan')))
    with self.assertRaisesRegex(ValueError, r'end_lr=-0.5 must be .* \(or -1'):
      schedules.make(_config(end_lr=-0.5))


class OptimizerTest(absltest.TestCase):

  def _params(self):
    return {'head': {'kernel': jnp.ones((3, 2)), 'bias': jnp.ones((2,))},
            'LayerNorm_0': {'scale': jnp.ones((3,))},
            'posembed_input': {'pos_embedding': jnp.ones((1, 4, 3))}}

  def test_decay_mask_only_kernels(self):
    mask = optimizers.decay_mask(self._params())
    self.assertTrue(mask['head']['kernel'])
    self.assertFalse(mask['head']['bias'])
    self.assertFalse(mask['LayerNorm_0']['scale'])
    self.assertFalse(mask['posembed_input']['pos_embedding'])

  def test_adamw_decays_kernels_by_lr_times_wd(self):
    c = _config(optimizer='adam', base_lr=0.1, warmup_steps=0, total_steps=10,
                decay_type='constant', weight_decay=0.5, grad_clip_norm=0.0)
    tx = _tx(c)
    params = self._params()
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zeros, tx.init(params), params)
    # Zero gradients: only decay moves parameters, by -lr * wd * p.
    np.testing.assert_allclose(updates['head']['kernel'], -0.05)
    np.testing.assert_allclose(updates['head']['bias'], 0.0)
    np.testing.assert_allclose(updates['LayerNorm_0']['scale'], 0.0)

  def test_gradient_clipping(self):
    c = _config(optimizer='sgd', base_lr=1.0, warmup_steps=0,
                total_steps=10, decay_type='constant', grad_clip_norm=1.0)
    c.optimizers.sgd.momentum = 0.0
    tx = _tx(c)
    params = {'w': jnp.zeros((4,))}
    updates, _ = tx.update({'w': jnp.full((4,), 10.0)}, tx.init(params), params)
    self.assertAlmostEqual(float(jnp.linalg.norm(updates['w'])), 1.0, places=5)

  def test_bf16_momentum(self):
    c = _config(optimizer='sgd')
    c.optimizers.sgd.accumulator_dtype = 'bfloat16'
    tx = _tx(c)
    state = tx.init({'w': jnp.zeros((4,))})
    dtypes = {x.dtype for x in jax.tree.leaves(state) if x.ndim}
    self.assertIn(jnp.dtype(jnp.bfloat16), dtypes)

  def test_any_optax_optimizer_by_name_with_its_options(self):
    c = _config(optimizer='lion', base_lr=0.1, warmup_steps=0, total_steps=10,
                decay_type='constant', weight_decay=0.5, grad_clip_norm=0.0)
    c.optimizers.lion = {'b1': 0.5, 'b2': 0.9}
    tx = _tx(c)
    params = self._params()
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    # Lion: -lr * (sign(update) + wd * p) on the decayed kernels, -lr * sign on the rest.
    np.testing.assert_allclose(updates['head']['kernel'], -0.1 * (1 + 0.5), rtol=1e-6)
    np.testing.assert_allclose(updates['head']['bias'], -0.1, rtol=1e-6)
    c.optimizers.lion = {'b1': 0.5, 'beta': 0.9}
    with self.assertRaisesRegex(ValueError, r"optimizers\.lion\.beta is not an option"):
      _tx(c)

  def test_registered_optimizer(self):
    seen = {}

    def plain_sgd(learning_rate, weight_decay, mask, *, scale=1.0):
      seen.update(weight_decay=weight_decay, scale=scale)
      del mask
      return optax.sgd(lambda step: scale * learning_rate(step))

    optimizers.register('plain_sgd', plain_sgd)
    self.addCleanup(optimizers.OPTIMIZERS.pop, 'plain_sgd')
    c = _config(optimizer='plain_sgd', base_lr=0.5, warmup_steps=0, total_steps=10,
                decay_type='constant', grad_clip_norm=0.0, weight_decay=0.25)
    c.optimizers.plain_sgd = {'scale': 2.0}
    tx = _tx(c)
    updates, _ = tx.update({'w': jnp.ones(2)}, tx.init({'w': jnp.zeros(2)}))
    np.testing.assert_allclose(updates['w'], -1.0)
    self.assertEqual(seen, {'weight_decay': 0.25, 'scale': 2.0})

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "optimizer='adamx' is unknown"):
      _tx(_config(optimizer='adamx'))
    with self.assertRaisesRegex(ValueError, 'optax.rmsprop takes no weight decay'):
      _tx(_config(optimizer='rmsprop', weight_decay=0.1))
    c = _config(optimizer='sgd')
    c.optimizers.sgd.b1 = 0.9
    with self.assertRaisesRegex(ValueError, r"optimizers\.sgd\.b1 is not an option"):
      _tx(c)


class LayerDecayTest(absltest.TestCase):
  """config.layer_decay on a tiny ViT (3 blocks): the scale of each parameter's updates."""

  def _tiny_vit_params(self, **overrides):
    model = models.get_model('testing', num_layers=3, hidden_size=8, mlp_dim=16,
                             num_heads=2, patches={'size': (4, 4)}, num_classes=5,
                             **overrides)
    return model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)), train=False)['params']

  def test_scales_per_parameter(self):
    params = self._tiny_vit_params()
    d = 0.65
    got = layer_decay.scales(params, models.family_of('testing').layer_of, d)
    want = {'embedding': d ** 4, 'cls': d ** 4, 'posembed_input': d ** 4,
            'encoderblock_0': d ** 3, 'encoderblock_1': d ** 2, 'encoderblock_2': d,
            'encoder_norm': 1.0, 'head': 1.0}
    for path, scale in jax.tree_util.tree_leaves_with_path(got):
      keys = [k.key for k in path]
      group = keys[1] if keys[0] == 'Transformer' else keys[0]
      self.assertAlmostEqual(scale, want[group], msg='/'.join(keys))
    self.assertAlmostEqual(got['Transformer']['encoderblock_1']['MlpBlock_0']['Dense_0'][
        'kernel'], d ** 2)

  def test_groups_described_for_the_log(self):
    text = layer_decay.describe(self._tiny_vit_params(), models.family_of('testing').layer_of,
                                0.5)
    self.assertEqual(text, 'embeddings x0.0625, block 0 x0.125, block 1 x0.25, '
                     'block 2 x0.5, head and final norm x1')

  def test_a_run_with_layer_decay_trains_and_logs_its_groups(self):
    # Under FSDP on 2 devices, against the same run on one device.
    config = test_train.tiny_config(layer_decay=0.7, checkpoint_every=0, sharding='fsdp',
                                    fsdp_min_size=1)
    config.mesh = {'data': 1, 'fsdp': 2}
    sharded = self.create_tempdir().full_path
    with self.assertLogs(level='INFO') as logs:
      loop.train_and_evaluate(config, sharded, devices=jax.devices()[:2])
    self.assertTrue(any('Layer-wise lr decay 0.7: embeddings x0.' in line
                        for line in logs.output))
    self.assertTrue(any("mesh {'data': 1, 'fsdp': 2}" in line for line in logs.output))
    config.mesh = {'data': 1, 'fsdp': 1}
    single = self.create_tempdir().full_path
    loop.train_and_evaluate(config, single, devices=jax.devices()[:1])
    for a, b in zip(jax.tree.leaves(test_train.final_params(sharded)),
                    jax.tree.leaves(test_train.final_params(single))):
      np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)

  def _updates(self, optimizer, layer_decay_value, **kw):
    c = _config(model_name='testing', optimizer=optimizer, base_lr=0.1, warmup_steps=0,
                total_steps=10, decay_type='constant', grad_clip_norm=0.0,
                layer_decay=layer_decay_value, **kw)
    tx = _tx(c)
    params = self._tiny_vit_params()
    grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return params, updates

  def test_every_optimizer_and_weight_decay_scaled_alike(self):
    for optimizer, kw in (('sgd', {}), ('adam', {'weight_decay': 0.05}),
                          ('lamb', {'weight_decay': 0.05})):
      params, plain = self._updates(optimizer, 1.0, **kw)
      _, decayed = self._updates(optimizer, 0.5, **kw)
      want = layer_decay.scales(params, models.family_of('testing').layer_of, 0.5)
      for p, d, f in zip(jax.tree.leaves(plain), jax.tree.leaves(decayed),
                         jax.tree.leaves(want)):
        np.testing.assert_allclose(d, f * p, rtol=1e-6, err_msg=optimizer)

  def test_bad_values_are_one_line(self):
    for value in (0.0, 1.5, -0.3):
      with self.assertRaisesRegex(ValueError, rf'config.layer_decay={value} must be in '
                                  r'\(0, 1\]'):
        _tx(_config(model_name='testing', layer_decay=value))
    with self.assertRaisesRegex(ValueError, 'does not apply to Mixer-B_16'):
      _tx(_config(model_name='Mixer-B_16', layer_decay=0.75))
    with self.assertRaisesRegex(ValueError, "not to objective 'mae'"):
      _tx(_config(model_name='testing', layer_decay=0.75, objective='mae'))


if __name__ == '__main__':
  absltest.main()
