"""Tests for the fused MLP kernels (vit_jax/models/mlp_kernel.py), interpreted on CPU."""
import contextlib
import io
import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import models
from vit_jax.configs import base
from vit_jax.models import from_config
from vit_jax.models import mlp_kernel
from vit_jax.models.vit import layers
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step
from tests import tool_modules

# 200 tokens and a 160-wide hidden layer fill no whole 64 x 64 tiles: the tokens are padded
# to 256, the hidden layer takes 32-wide tiles, and K = 64 two contraction steps of 32.
TOKENS, WIDTH, HIDDEN = 200, 64, 160
SMALL = mlp_kernel.Blocks(m=64, n=64, k=32)
# With 128 x 128 tiles both the tokens and the hidden layer are padded to 256.
PADDED = mlp_kernel.Blocks(m=128, n=128, k=64)


def _operands(dtype, seed=0):
  rng = np.random.default_rng(seed)
  shapes = [((TOKENS, WIDTH), 1.0), ((WIDTH, HIDDEN), 0.2), ((HIDDEN,), 0.5),
            ((HIDDEN, WIDTH), 0.1), ((WIDTH,), 0.1)]
  return [jnp.asarray(scale * rng.standard_normal(shape), dtype) for shape, scale in shapes]


def _xla_mlp(activation):
  """The XLA MLP: MlpBlock's math written out (dot in the dtype, then bias, then act)."""
  def f(x, w1, b1, w2, b2):
    return layers.activate(x @ w1 + b1, activation) @ w2 + b2
  return f


def _loss(f):
  # A loss whose gradient is not uniform, so every row and column matters.
  return lambda *a: jnp.sum(jnp.sin(f(*a).astype(jnp.float32)))


def _outputs_and_grads(f, operands):
  return jax.jit(lambda *a: (f(*a), jax.grad(_loss(f), argnums=range(5))(*a)))(*operands)


def _assert_close(test, got, want, rtol):
  """|got - want| within rtol of want's largest magnitude (bf16 rounds every element)."""
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  test.assertEqual(got.shape, want.shape)
  np.testing.assert_allclose(got, want, atol=rtol * np.abs(want).max() + 1e-6, rtol=0)


class FusedMlpTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('f32_gelu_tanh', jnp.float32, 'gelu_tanh', SMALL, 1e-5),
      ('bf16_gelu_tanh', jnp.bfloat16, 'gelu_tanh', SMALL, 3e-2),
      ('f32_quick_gelu_padded', jnp.float32, 'quick_gelu', PADDED, 1e-5))
  def test_output_and_every_gradient_match_xla(self, dtype, activation, blocks, rtol):
    operands = _operands(dtype)
    fused = lambda *a: mlp_kernel.mlp(*a, activation, blocks, True)  # noqa: E731
    y, grads = _outputs_and_grads(fused, operands)
    y_ref, grads_ref = _outputs_and_grads(_xla_mlp(activation), operands)
    self.assertEqual(y.dtype, dtype)
    _assert_close(self, y, y_ref, rtol)
    for name, g, g_ref, operand in zip(('x', 'w1', 'b1', 'w2', 'b2'), grads, grads_ref,
                                       operands):
      with self.subTest(name):
        self.assertEqual(g.dtype, operand.dtype)
        _assert_close(self, g, g_ref, rtol)

  def test_tiles_divide_the_sizes_or_the_sizes_are_padded(self):
    self.assertEqual(mlp_kernel.fit(256 * 197, 256), (256, 256 * 197))  # ViT-B b256 tokens
    self.assertEqual(mlp_kernel.fit(768, 64), (64, 768))
    self.assertEqual(mlp_kernel.fit(TOKENS, 64), (64, 256))   # no 64 or 32 divides 200
    self.assertEqual(mlp_kernel.fit(HIDDEN, 64), (32, HIDDEN))  # the half tile divides
    self.assertEqual(mlp_kernel.fit(100, 64), (64, 128))
    self.assertEqual(mlp_kernel.fit(10, 64), (16, 16))         # at least 16 (a Triton dot)

  def test_kernels_lower_to_triton_for_a_gpu_at_vit_b_shapes(self):
    shape = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)  # noqa: E731
    tokens, width, hidden = 256 * 197, 768, 3072
    operands = (shape(tokens, width), shape(width, hidden), shape(hidden),
                shape(hidden, width), shape(width))
    grad = jax.grad(_loss(lambda *a: mlp_kernel.mlp(*a, 'gelu_tanh',
                                                     mlp_kernel.DEFAULT_BLOCKS, False)),
                    argnums=range(5))
    text = jax.jit(grad).trace(*operands).lower(lowering_platforms=('cuda',)).as_text()
    calls = re.findall(r'custom_call @(\S+)\(', text)
    self.assertLen(calls, 2)  # the forward epilogue kernel and the gradient kernel
    self.assertIn('mlp_bias_activation', text)
    self.assertIn('mlp_activation_grad', text)


class MlpBlockTest(absltest.TestCase):

  def test_same_parameters_as_the_xla_block(self):
    x = jnp.ones((2, 5, 16))
    init = lambda kernel: layers.MlpBlock(mlp_dim=32, kernel=kernel).init(  # noqa: E731
        jax.random.PRNGKey(0), x)
    xla, fused = init('xla'), init('pallas')
    self.assertEqual(jax.tree.structure(xla), jax.tree.structure(fused))
    for a, b in zip(jax.tree.leaves(xla), jax.tree.leaves(fused)):
      np.testing.assert_array_equal(a, b)

  def test_the_config_key_reaches_every_block(self):
    c = base.get_base_config()
    c.model_name = 'ViT-Ti_16'
    self.assertEqual(c.model.mlp_kernel, 'xla')
    c.model.mlp_kernel, c.model.mlp_kernel_blocks = 'pallas', '64,128,32,4,2'
    model = from_config.build(c, 4)
    self.assertEqual(model.mlp_kernel, 'pallas')
    self.assertEqual(model.block_config().mlp_kernel, 'pallas')
    self.assertEqual(mlp_kernel.parse_blocks(model.block_config().mlp_kernel_blocks),
                     mlp_kernel.Blocks(m=64, n=128, k=32, num_warps=4, num_stages=2))
    self.assertEqual(mlp_kernel.parse_blocks(''), mlp_kernel.DEFAULT_BLOCKS)

  def test_a_block_it_cannot_run_is_refused_in_one_line(self):
    with self.assertRaisesRegex(ValueError, "mlp_kernel=pallas runs activation .*'gelu'"):
      models.get_model('ViT-Ti_16', num_classes=4, mlp_kernel='pallas', activation='gelu')
    with self.assertRaisesRegex(ValueError, 'without mlp_norm and with matmul=default'):
      models.get_model('ViT-Ti_16', num_classes=4, mlp_kernel='pallas', matmul='fp8')
    with self.assertRaisesRegex(ValueError, "Unknown mlp_kernel 'triton'; use one of xla"):
      models.get_model('ViT-Ti_16', num_classes=4, mlp_kernel='triton')
    for blocks in ('128,256,64,8', '128,100,64,8,3', '128,256,64,0,3', 'big'):
      with self.assertRaisesRegex(ValueError, f"mlp_kernel_blocks '{blocks}' must be m,n,k"):
        models.get_model('ViT-Ti_16', num_classes=4, mlp_kernel='pallas',
                         mlp_kernel_blocks=blocks)
    block = layers.MlpBlock(mlp_dim=8, kernel='pallas', dropout_rate=0.1,
                            deterministic=False)
    with self.assertRaisesRegex(ValueError, 'train with dropout_rate=0 .* or mlp_kernel=xla'):
      jax.eval_shape(block.init, jax.random.PRNGKey(0), jnp.ones((1, 4)))

  def test_a_train_step_equals_the_xla_models(self):
    c = base.get_base_config()
    c.update(dict(optimizer='sgd', base_lr=0.1, warmup_steps=0, total_steps=10,
                  decay_type='constant', grad_clip_norm=1.0))
    tx = optimizers.make(c, schedules.make(c))
    rng = np.random.RandomState(0)
    batch = {'image': jnp.asarray(rng.uniform(-1, 1, (4, 16, 16, 3)), jnp.float32),
             'label': jnp.asarray(np.eye(3)[rng.randint(0, 3, 4)], jnp.float32)}
    states, losses = [], []
    for kernel in ('xla', 'pallas'):
      model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                               dropout_rate=0.0, head_bias_init=0.1, mlp_kernel=kernel)
      objective = objectives.Supervised(model, 'softmax_xent')
      state = train_step.init_state(objective, tx, jax.random.PRNGKey(0), (1, 16, 16, 3))
      step = jax.jit(train_step.make_train_step(objective, tx))
      # Two steps: the head starts at zero, so only the second reaches the blocks.
      for _ in range(2):
        state, metrics = step(state, batch)
      states.append(state)
      losses.append(float(metrics['train_loss']))
    self.assertAlmostEqual(losses[0], losses[1], places=5)
    for a, b in zip(jax.tree.leaves(states[0].params), jax.tree.leaves(states[1].params)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


  def test_gradients_under_scan_and_remat_equal_the_xla_models(self):
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 16, 16, 3), minval=-1)
    kw = dict(num_classes=3, patches={'size': (4, 4)}, dropout_rate=0.0, head_bias_init=0.1,
              num_layers=2, scan_layers=True, remat='dots')
    xla = models.get_model('testing', **kw)
    fused = models.get_model('testing', mlp_kernel='pallas', **kw)
    # Random values everywhere (the head starts at zero, which zeroes the blocks' gradients).
    shapes = jax.eval_shape(xla.init, jax.random.PRNGKey(0), x)
    rng = np.random.default_rng(3)
    variables = jax.tree.map(
        lambda s: jnp.asarray(0.3 * rng.standard_normal(s.shape), s.dtype), shapes)
    grad = lambda m: jax.jit(jax.grad(  # noqa: E731
        lambda v: jnp.sum(jnp.sin(m.apply(v, x)))))(variables)
    for a, b in zip(jax.tree.leaves(grad(xla)), jax.tree.leaves(grad(fused))):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


class BenchToolTest(absltest.TestCase):

  def test_one_line_per_variant_and_the_first_checked_against_xla(self):
    tool = tool_modules.load('mlp_kernel_bench')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      tool.main(['--tokens=40', '--width=32', '--hidden=64', '--iters=1',
                 '--blocks=32,64,16,4,2'])
    lines = out.getvalue().splitlines()
    self.assertLen(lines, 3)  # the header, xla, the tile
    self.assertRegex(lines[1], r'^xla +[0-9.]+ ms +[0-9.]+ TFLOP/s$')
    self.assertRegex(lines[2], r'^pallas 32,64,16,4,2 +[0-9.]+ ms +[0-9.]+ TFLOP/s  max rel')
    diff = float(re.search(r'max rel diff vs xla (\S+)', lines[2]).group(1))
    self.assertLess(diff, 0.05)


if __name__ == '__main__':
  absltest.main()
