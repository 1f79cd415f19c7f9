"""Tests for the speed levers of the ViT: each keeps the parameter tree and the function."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import models
from vit_jax.models import attention
from vit_jax.models import vit

KW = dict(num_layers=2, num_classes=4)


def _images(batch=2, size=32):
  return jax.random.uniform(jax.random.PRNGKey(1), (batch, size, size, 3),
                            minval=-1)


def _random_variables(model, x):
  """Random variables of the model's tree, without compiling its init."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  rng = np.random.default_rng(3)

  def leaf(path, s):
    value = 0.05 * rng.standard_normal(s.shape)
    if getattr(path[-1], 'key', '') == 'scale':  # norms start near identity
      value += 1.0
    return jnp.asarray(value, s.dtype)

  return jax.tree_util.tree_map_with_path(leaf, shapes)


def _structure(model, x):
  return jax.tree.structure(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                           x))


def _outputs_and_grads(model, variables, x):
  """Jitted logits and gradients of a scalar loss (op-by-op is slow on CPU)."""
  loss = lambda v: jnp.sum(model.apply(v, x)**2)  # noqa: E731
  return jax.jit(lambda v: (model.apply(v, x), jax.grad(loss)(v)))(variables)


class LeverEquivalenceTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.x = _images()
    cls.base = models.get_model('ViT-Ti_16', **KW)
    cls.variables = _random_variables(cls.base, cls.x)
    cls.reference = _outputs_and_grads(cls.base, cls.variables, cls.x)

  @parameterized.named_parameters(
      ('matmul_patches', dict(patch_embedding='matmul')),
      ('scan', dict(scan_layers=True)),
      ('scan_remat_dots', dict(scan_layers=True, remat='dots')),
      ('remat_dots', dict(remat='dots')),
      ('remat_full_named', dict(remat='full')),
      ('three_qkv_matmuls', dict(fused_qkv=False)),
      ('three_qkv_matmuls_scan', dict(fused_qkv=False, scan_layers=True)),
  )
  def test_same_tree_values_and_grads(self, overrides):
    x, variables = self.x, self.variables
    model = models.get_model('ViT-Ti_16', **KW, **overrides)
    self.assertEqual(_structure(model, x), jax.tree.structure(variables))
    out1, g1 = self.reference
    out2, g2 = _outputs_and_grads(model, variables, x)
    np.testing.assert_allclose(out2, out1, rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
      np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)

  def test_scan_trains_with_stochastic_depth_and_dropout(self):
    x = _images(4)
    kw = dict(KW, stochastic_depth=0.5, dropout_rate=0.1)
    plain = models.get_model('ViT-Ti_16', **kw)
    scan = models.get_model('ViT-Ti_16', scan_layers=True, **kw)
    variables = _random_variables(plain, x)
    rngs = {'dropout': jax.random.PRNGKey(5)}
    train = jax.jit(lambda v: scan.apply(v, x, train=True, rngs=rngs))(
        variables)
    self.assertTrue(np.all(np.isfinite(train)))
    evaluate = jax.jit(lambda v: scan.apply(v, x))(variables)
    self.assertGreater(float(jnp.abs(train - evaluate).max()), 1e-3)
    # Evaluation is deterministic and equal to the unscanned model.
    np.testing.assert_allclose(evaluate, jax.jit(plain.apply)(variables, x),
                               rtol=1e-4, atol=1e-5)

  def test_padded_tokens_are_masked(self):
    # The cuDNN path pads tokens once per encoder and passes valid_tokens; the
    # XLA kernel honours the same mask, so it is checked here on CPU.
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 16))
    layer = attention.MultiHeadDotProductAttention(num_heads=2)
    variables = _random_variables(layer, x)
    padded = jnp.concatenate([x, 7 * jnp.ones((2, 3, 16))], axis=1)
    masked = attention.MultiHeadDotProductAttention(num_heads=2,
                                                    valid_tokens=5)
    np.testing.assert_allclose(
        jax.jit(masked.apply)(variables, padded)[:, :5],
        jax.jit(layer.apply)(variables, x), rtol=1e-5, atol=1e-5)

  def test_padded_length(self):
    self.assertEqual(attention.padded_length(197, 8), 200)
    self.assertEqual(attention.padded_length(197, 1), 198)  # made even
    self.assertEqual(attention.padded_length(197, 64), 256)
    self.assertEqual(attention.padded_length(200, 8), 200)


class LeverErrorTest(absltest.TestCase):

  def _init(self, **overrides):
    model = models.get_model('testing', **overrides)
    return jax.eval_shape(model.init, jax.random.PRNGKey(0),
                          jnp.zeros((1, 32, 32, 3)))

  def test_unknown_remat(self):
    with self.assertRaisesRegex(ValueError, "Unknown remat 'dot'"):
      self._init(remat='dot')

  def test_remat_from_the_command_line(self):
    # --config.model.remat=True reaches the string field as 'True' (the original's bool).
    self.assertEqual([vit.remat_policy(v) for v in ('True', 'true', 'False', True, False)],
                     ['full', 'full', 'none', 'full', 'none'])
    self._init(remat='True')

  def test_fused_qkv_must_be_a_bool(self):
    with self.assertRaisesRegex(ValueError, "Unknown fused_qkv 'no'; use one of None, True, False"):
      models.get_model('ViT-Ti_16', num_classes=4, fused_qkv='no')

  def test_unknown_patch_embedding(self):
    with self.assertRaisesRegex(ValueError, "Unknown patch_embedding 'fft'"):
      self._init(patch_embedding='fft')

  def test_bad_pad_multiple(self):
    with self.assertRaisesRegex(ValueError, 'pad multiple must be an int'):
      attention.padded_length(197, 0)

  def test_cudnn_where_it_cannot_run(self):
    if jax.default_backend() == 'gpu':
      self.skipTest('cuDNN may run here')
    with self.assertRaisesRegex(ValueError, "attention='cudnn' needs a GPU"):
      self._init(attention='cudnn', dtype='bfloat16')


if __name__ == '__main__':
  absltest.main()
