"""Tests for the analytic FLOP counts and the device peak table."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.models import flops
from vit_jax.parallel import peaks
from vit_jax import models


def _xla_flops(fn, *args) -> float:
  """XLA's FLOP count of fn(*args), compiled for abstract inputs (nothing runs)."""
  cost = jax.jit(fn).lower(*args).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost['flops'])


def _abstract(model, batch: int, res: int):
  images = jax.ShapeDtypeStruct((batch, res, res, 3), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)
  return variables, images


class AnalyticFlopsTest(parameterized.TestCase):

  def test_vit_b16_matches_issue_figure(self):
    # The issue's 105.4 training GFLOP per image (3x forward) at 224px.
    train = flops.model_flops_per_image('ViT-B_16', 224, train=True)
    self.assertAlmostEqual(train / 1e9, 105.38, places=1)
    fwd = flops.model_flops_per_image('ViT-B_16', 224, train=False)
    self.assertAlmostEqual(train / fwd, 3.0)

  def test_vit_b16_forward_and_train_within_5pct_of_xla(self):
    model = models.get_model('ViT-B_16', num_classes=1000)
    batch = 2
    variables, images = _abstract(model, batch, 224)
    fwd = _xla_flops(lambda v, x: model.apply(v, x), variables, images)
    grad = _xla_flops(
        jax.grad(lambda v, x: jnp.sum(model.apply(v, x))), variables, images)
    for xla, train in ((fwd, False), (grad, True)):
      analytic = flops.model_flops_per_image('ViT-B_16', 224, train=train)
      self.assertLess(abs(xla / batch / analytic - 1), 0.05,
                      f'train={train}: XLA {xla / batch:.4g} vs {analytic:.4g}')

  @parameterized.parameters(('Mixer-B_16', 224), ('R26+ViT-S_32', 128),
                            ('testing-unpooled', 64))
  def test_other_families_within_5pct_of_xla(self, name, res):
    model = models.get_model(name, num_classes=1000)
    variables, images = _abstract(model, 1, res)
    xla = _xla_flops(lambda v, x: model.apply(v, x), variables, images)
    analytic = flops.model_flops_per_image(name, res, train=False)
    self.assertLess(abs(xla / analytic - 1), 0.05)

  def test_accepts_config_module_and_name_alike(self):
    by_name = flops.model_flops_per_image('ViT-S_16', 224, train=False)
    config = models.get_model_config('ViT-S_16')
    module = models.get_model('ViT-S_16', num_classes=1000)
    self.assertEqual(flops.model_flops_per_image(config, 224, train=False),
                     by_name)
    self.assertEqual(flops.model_flops_per_image(module, 224, train=False),
                     by_name)
    # Resolution scales the token count: 384px has 577 tokens, not 197.
    self.assertGreater(
        flops.model_flops_per_image('ViT-S_16', 384, train=False),
        2.9 * by_name)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "Unknown model 'ViT-X'"):
      flops.model_flops_per_image('ViT-X', 224, train=True)
    with self.assertRaisesRegex(ValueError, 'resolution must be a positive'):
      flops.model_flops_per_image('ViT-B_16', 0, train=True)
    with self.assertRaisesRegex(ValueError, 'No model family recognises'):
      flops.model_flops_per_image({'width': 3}, 224, train=True)


class PeakTest(absltest.TestCase):

  def test_table(self):
    self.assertEqual(peaks.peak_flops_for_kind('NVIDIA H100 80GB HBM3'), 989e12)
    self.assertEqual(peaks.peak_flops_for_kind('NVIDIA H100 PCIe'), 756e12)
    self.assertEqual(peaks.peak_flops_for_kind('NVIDIA A100-SXM4-80GB'), 312e12)
    self.assertEqual(peaks.peak_flops_for_kind('TPU v4'), 275e12)
    self.assertEqual(peaks.peak_flops_for_kind('TPU v5 lite'), 197e12)
    self.assertEqual(peaks.peak_flops_for_kind('TPU v5p'), 459e12)
    self.assertEqual(peaks.peak_flops_for_kind('NVIDIA H100 80GB HBM3',
                                               'float32'), 67e12)
    self.assertIsNone(peaks.peak_flops_for_kind('Some Future Chip'))

  def test_cpu_has_no_datasheet_peak(self):
    self.assertIsNone(peaks.device_peak_flops(jax.devices('cpu')[0]))

  def test_resolve_peak_rules(self):
    cpu = jax.devices('cpu')[0]
    self.assertEqual(peaks.resolve_peak(2.5, 'float32', cpu),
                     (2.5e12, 'given 2.5 TFLOP/s'))
    self.assertEqual(peaks.resolve_peak('2.5', 'float32', cpu)[0], 2.5e12)
    peak, how = peaks.resolve_peak('table', 'bfloat16', cpu)
    self.assertIsNone(peak)
    self.assertIn('no datasheet peak', how)
    peak, how = peaks.resolve_peak('auto', 'float32', cpu)
    self.assertGreater(peak, 1e8)
    self.assertIn('best of 256^3, 512^3, 1024^3 float32 matmuls', how)
    for bad, message in (('fast', 'use one of'), (0, 'must be positive'),
                         ('-1', 'use one of')):
      with self.assertRaisesRegex(ValueError, message):
        peaks.resolve_peak(bad, 'float32', cpu)

  def test_cpu_peak_is_the_best_size_and_mfu_never_exceeds_one(self):
    rates = {256: 2e10, 512: 6e10, 1024: 5e10}
    peak, how = peaks.best_rate(rates, 'float32')
    self.assertEqual(peak, 6e10)
    self.assertIn('best of 256^3, 512^3, 1024^3 float32 matmuls (fastest 512^3', how)
    with self.assertRaisesRegex(ValueError, 'at least one'):
      peaks.best_rate({}, 'float32')
    self.assertEqual(peaks.utilization(3e10, peak), (0.5, 6e10, False))
    # A step faster than the sampled peak (cores shared while it was measured): the
    # step's rate becomes the peak, so MFU reads 1, not 1.044.
    self.assertEqual(peaks.utilization(6.264e10, peak), (1.0, 6.264e10, True))
    self.assertEqual(peaks.CPU_PEAK_SIZES, (256, 512, 1024))

  def test_measure_small_matmul(self):
    peak = peaks.measure_peak_flops('float32', 256, inner=2, repeats=2)
    self.assertTrue(np.isfinite(peak))
    self.assertGreater(peak, 1e8)


if __name__ == '__main__':
  absltest.main()
