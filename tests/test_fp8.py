"""Tests for the fp8 matmul option (vit_jax/models/fp8.py) and how the benchmark reports it."""
import os

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from tests import test_model_contract
from tests import tool_modules
from vit_jax import models
from vit_jax import serving
from vit_jax.models import fp8
from vit_jax.perf import benchmark

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
DENSE = (((1,), (0,)), ((), ()))


def _f32(x):
  return np.asarray(jnp.asarray(x, jnp.float32))


def _normal(seed, shape, scale=1.0, dtype=jnp.bfloat16):
  return (jax.random.normal(jax.random.PRNGKey(seed), shape) * scale).astype(dtype)


class QuantizeTest(absltest.TestCase):

  def test_largest_value_maps_to_the_format_maximum(self):
    x = _normal(0, (64, 32), 1000.0)
    for dtype in (E4M3, E5M2):
      q, scale = fp8.quantize(x, dtype)
      self.assertEqual(q.dtype, jnp.dtype(dtype))
      largest = float(jnp.finfo(dtype).max)
      self.assertEqual(float(jnp.max(jnp.abs(q.astype(jnp.float32)))), largest)
      np.testing.assert_allclose(float(scale), float(jnp.max(jnp.abs(x))) / largest,
                                 rtol=1e-6)

  def test_round_trip_error_is_float8_rounding(self):
    x = _normal(1, (256, 64), 3.0, jnp.float32)
    back = _f32(fp8.round_trip(x, E4M3))
    big = np.abs(_f32(x)) > 0.05 * np.abs(_f32(x)).max()  # away from the subnormals
    rel = np.abs(back - _f32(x))[big] / np.abs(_f32(x))[big]
    self.assertLessEqual(rel.max(), 2.0**-4 + 1e-6)  # 3 mantissa bits: half an ulp
    self.assertGreater(rel.max(), 1e-3)  # and it does round

  def test_zeros_keep_a_unit_scale(self):
    q, scale = fp8.quantize(jnp.zeros((4, 4), jnp.bfloat16), E4M3)
    self.assertEqual(float(scale), 1.0)
    self.assertEqual(float(jnp.abs(q.astype(jnp.float32)).max()), 0.0)


class Fp8DotTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.x = _normal(2, (48, 32))
    self.w = _normal(3, (32, 40), 0.1)

  def test_forward_is_the_product_of_rounded_operands(self):
    y = fp8.fp8_dot_general(self.x, self.w, DENSE)
    self.assertEqual(y.dtype, jnp.bfloat16)
    ref = _f32(fp8.round_trip(self.x, E4M3)) @ _f32(fp8.round_trip(self.w, E4M3))
    np.testing.assert_allclose(_f32(y), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    exact = _f32(self.x) @ _f32(self.w)
    err = np.abs(_f32(y) - exact).max() / np.abs(exact).max()
    self.assertLess(err, 0.1)
    self.assertGreater(err, 1e-3)  # float8, not the bf16 product

  def test_gradients_use_e5m2_cotangents_and_the_rounded_operands(self):
    g = _normal(4, (48, 40), 5.0)
    _, pullback = jax.vjp(lambda a, b: fp8.fp8_dot_general(a, b, DENSE), self.x, self.w)
    dx, dw = pullback(g)
    self.assertEqual((dx.dtype, dw.dtype), (self.x.dtype, self.w.dtype))
    gq = _f32(fp8.round_trip(g, E5M2))
    xq, wq = _f32(fp8.round_trip(self.x, E4M3)), _f32(fp8.round_trip(self.w, E4M3))
    for got, ref in ((dx, gq @ wq.T), (dw, xq.T @ gq)):
      np.testing.assert_allclose(_f32(got), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())

  def test_einsum_layouts_of_the_attention_projections(self):
    x = _normal(5, (2, 6, 16))
    w = _normal(6, (16, 3, 2, 8), 0.2)
    out = _normal(7, (2, 6, 2, 8))
    w_out = _normal(8, (2, 8, 16), 0.2)
    rt = lambda a: fp8.round_trip(a, E4M3).astype(jnp.float32)  # noqa: E731
    for spec, a, b in (('bsd,dthk->tbshk', x, w), ('bshk,hkd->bsd', out, w_out)):
      got = jnp.einsum(spec, a, b, _dot_general=fp8.fp8_dot_general)
      ref = jnp.einsum(spec, rt(a), rt(b))
      self.assertEqual(got.shape, ref.shape)
      np.testing.assert_allclose(_f32(got), _f32(ref), rtol=1e-2,
                                 atol=1e-2 * float(jnp.abs(ref).max()))

  def test_batch_dimensions_are_refused(self):
    with self.assertRaisesRegex(ValueError, 'no batch dimensions'):
      fp8.fp8_dot_general(jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5)),
                          (((2,), (1,)), ((0,), (0,))))

  def test_unknown_option(self):
    with self.assertRaisesRegex(ValueError, "Unknown matmul 'fp4'"):
      fp8.dot_general('fp4')


class ModelOptionTest(absltest.TestCase):

  def test_same_tree_close_logits_and_float8_survives_compilation(self):
    kw = dict(num_classes=10, dtype='bfloat16')
    base = models.get_model('ViT-Ti_16', **kw)
    quant = models.get_model('ViT-Ti_16', matmul='fp8', **kw)
    x = _normal(9, (2, 32, 32, 3), 1.0, jnp.float32)
    params = base.init(jax.random.PRNGKey(0), x)
    self.assertEqual(jax.tree.map(jnp.shape, params),
                     jax.tree.map(jnp.shape, quant.init(jax.random.PRNGKey(0), x)))
    params = test_model_contract.perturbed(params)
    ref = _f32(base.apply(params, x))
    got = _f32(quant.apply(params, x))
    self.assertLess(np.abs(got - ref).max() / np.abs(ref).max(), 0.15)
    self.assertGreater(np.abs(got - ref).max(), 0.0)
    loss = lambda p: quant.apply(p, x, train=True).astype(jnp.float32).sum()  # noqa: E731
    hlo = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    # Rounding written as widen-after-round before a bf16 dot can be folded away as
    # excess precision; the float8 operands must reach the compiled program.
    self.assertIn('f8e4m3fn', hlo)
    self.assertIn('f8e5m2', hlo)

  def test_scan_and_remat_round_the_same_way(self):
    x = _normal(10, (2, 32, 32, 3), 1.0, jnp.float32)
    kw = dict(num_layers=2, num_classes=4, matmul='fp8')
    plain = models.get_model('ViT-Ti_16', **kw)
    params = plain.init(jax.random.PRNGKey(0), x)
    params = test_model_contract.perturbed(params)

    def outputs_and_grads(model):
      loss = lambda v: jnp.sum(model.apply(v, x) ** 2)  # noqa: E731
      return jax.jit(lambda v: (model.apply(v, x), jax.grad(loss)(v)))(params)

    out1, g1 = outputs_and_grads(plain)
    out2, g2 = outputs_and_grads(
        models.get_model('ViT-Ti_16', scan_layers=True, remat='dots', **kw))
    np.testing.assert_allclose(out2, out1, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
      np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-6)

  def test_exports_serve_with_the_default_matmuls(self):
    # Serving runtimes (ONNX, TFLite) have no float8 matmuls: an fp8-trained model's
    # parameters export through the default ones.
    model = models.get_model('ViT-Ti_16', num_layers=1, num_classes=4, matmul='fp8')
    x = _normal(11, (2, 32, 32, 3), 1.0, jnp.float32)
    params = model.init(jax.random.PRNGKey(0), x)['params']
    params = test_model_contract.perturbed(params)
    path = os.path.join(self.create_tempdir().full_path, 'm.stablehlo')
    serving.export(model, params, 32, 'stablehlo', path)
    with open(path, 'rb') as f:
      served = np.asarray(jax.export.deserialize(f.read()).call(x))
    exact = model.clone(matmul='default').apply({'params': params}, x)
    np.testing.assert_allclose(served, exact, rtol=1e-4, atol=1e-5)
    fp8_logits = _f32(model.apply({'params': params}, x))
    self.assertGreater(np.abs(served - fp8_logits).max(), 1e-3)

  def test_unknown_value_is_one_line(self):
    with self.assertRaisesRegex(ValueError, r"Unknown matmul 'fp4'; use one of default, fp8"):
      models.get_model('ViT-Ti_16', num_classes=10, matmul='fp4')


class BenchmarkReportTest(absltest.TestCase):

  def test_counts_float8_matmuls_of_compiled_text(self):
    gpu = ('  %custom-call.7 = (bf16[64,16]{1,0}, s8[4]{0}) custom-call(%a, %b, %s, %t), '
           'custom_call_target="__cublas$lt$matmul$f8"\n'
           '  %custom-call.8 = (bf16[64,16]{1,0}, s8[4]{0}) custom-call(%a, %b), '
           'custom_call_target="__cublas$lt$matmul"\n')
    self.assertEqual(benchmark.fp8_matmuls(gpu), 1)
    direct = '  %dot.3 = f32[16,16]{1,0} dot(f8e4m3fn[16,32]{1,0} %x, f8e4m3fn[32,16]{1,0} %y)\n'
    self.assertEqual(benchmark.fp8_matmuls(direct), 1)
    self.assertEqual(benchmark.fp8_matmuls('  %dot.3 = f32[16,16]{1,0} dot(%x, %y)\n'), 0)


class CurveToolTest(absltest.TestCase):

  def test_batches_are_upsampled_digits_and_curves_are_averaged(self):
    tool = tool_modules.load('fp8_curve')
    images = np.zeros((3, 28, 28, 1), np.uint8)
    images[1, :14] = 255
    make = tool.batch_maker(images, np.array([0, 7, 2], np.int32), 56, None)
    batch = make(np.array([1, 0]))
    self.assertEqual(batch['image'].shape, (2, 56, 56, 3))
    # Within an ulp: newer XLA turns the division into a multiplication by 1/127.5.
    self.assertAlmostEqual(float(batch['image'][0, 0, 0, 0]), 1.0, delta=1e-6)  # 255 -> 1
    self.assertAlmostEqual(float(batch['image'][0, 55, 0, 2]), -1.0, delta=1e-6)  # 0 -> -1
    self.assertEqual(int(jnp.argmax(batch['label'][0])), 7)
    out = tool.summarize([{'matmul': 'default', 'img_s': 1.0, 'loss': [4, 2] * 100},
                          {'matmul': 'fp8', 'img_s': 1.0, 'loss': [5, 3] * 100}], 2)
    self.assertEqual(out['runs'][0]['curve'], [3.0] * 100)
    self.assertAlmostEqual(out['final_gap'], 1.0)
    self.assertEqual([r['gap'] for r in out['runs']], [0.0, 1.0])


if __name__ == '__main__':
  absltest.main()
