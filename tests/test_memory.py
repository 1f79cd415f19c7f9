"""Tests for the ahead-of-time memory analysis of the sharded train step."""
from absl.testing import absltest
import jax

from vit_jax import memory


def _tiny_config(rules):
  config = memory.pretrain_config()
  config.model_name = 'ViT-Ti_16'
  config.model.num_classes = 16
  config.pp.crop = 32
  config.batch = 16
  config.sharding = rules
  config.fsdp_min_size = 2**12
  config.mesh.data = 1 if rules == 'fsdp' else -1
  config.mesh.fsdp = -1 if rules == 'fsdp' else 1
  return config


class MemoryTest(absltest.TestCase):

  def test_fsdp_divides_state_over_devices(self):
    arch = {'num_layers': 1}
    one = memory.memory_report(_tiny_config('fsdp'), jax.devices()[:1], arch)
    eight = memory.memory_report(_tiny_config('fsdp'), jax.devices()[:8], arch)
    self.assertEqual(eight.mesh, {'data': 1, 'fsdp': 8})
    self.assertEqual(one.num_params, eight.num_params)
    # Parameters and Adam moments: 1/8 each, up to the few small replicated arrays.
    self.assertLess(eight.params, one.params / 8 * 1.15)
    self.assertLess(eight.opt_state, one.opt_state / 8 * 1.15)
    self.assertGreater(eight.params, one.params / 8)
    self.assertEqual(eight.batch * 8, one.batch)
    # The compiled inputs are the state and the batch (plus a step counter and an rng key).
    for report in (one, eight):
      held = report.params + report.opt_state + report.batch
      self.assertBetween(report.argument - held, 0, 64)
      self.assertGreater(report.temp, 0)
    self.assertLess(eight.total, one.total / 4)

  def test_replicated_state_is_whole_on_every_device(self):
    four = memory.memory_report(_tiny_config('replicate'), jax.devices()[:4],
                                {'num_layers': 1})
    self.assertEqual(four.mesh, {'data': 4, 'fsdp': 1})
    self.assertEqual(four.params, 4 * four.num_params)  # float32, whole
    # Adam's two moments, plus its int32 step counts.
    self.assertBetween(four.opt_state - 2 * four.params, 0, 16)

  def test_indivisible_batch(self):
    config = _tiny_config('fsdp')
    config.batch = 12
    with self.assertRaisesRegex(ValueError, 'config.batch=12 is not divisible by 8'):
      memory.memory_report(config, jax.devices()[:8], {'num_layers': 1})


if __name__ == '__main__':
  absltest.main()
