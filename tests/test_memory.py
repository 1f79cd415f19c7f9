"""Tests for the ahead-of-time memory analysis of the sharded train step."""
from absl.testing import absltest
import jax

from vit_jax import memory


def _tiny_config(rules):
  config = memory.pretrain_config()
  config.model_name = 'ViT-Ti_16'
  config.model.representation_size = 0
  config.model.num_layers = 1
  config.model.num_classes = 10
  config.pp.crop = 32
  config.batch = 16
  config.sharding = rules
  config.fsdp_min_size = 2**12
  config.mesh.data = 1 if rules == 'fsdp' else -1
  config.mesh.fsdp = -1 if rules == 'fsdp' else 1
  return config


class MemoryTest(absltest.TestCase):

  def test_fsdp_divides_state_over_devices(self):
    report = memory.memory_report(_tiny_config('fsdp'), jax.devices()[:8])
    self.assertEqual(report.mesh, {'data': 1, 'fsdp': 8})
    whole = 4 * report.num_params  # float32 bytes of all parameters
    # Parameters and each Adam moment: 1/8 per device, up to the small replicated arrays.
    self.assertBetween(report.params, whole / 8, whole / 8 * 1.15)
    self.assertBetween(report.opt_state, 2 * whole / 8, 2 * whole / 8 * 1.15 + 16)
    self.assertEqual(report.batch * 8, 16 * (32 * 32 * 3 + 10) * 4)  # images, one-hot labels
    # The compiled inputs are the state and the batch (plus a step counter and an rng key).
    held = report.params + report.opt_state + report.batch
    self.assertBetween(report.argument - held, 0, 64)
    self.assertGreater(report.temp, 0)
    self.assertIn('| 8 | data1xfsdp8 |', memory.format_table([report]))

  def test_indivisible_batch(self):
    config = _tiny_config('fsdp')
    config.batch = 12
    with self.assertRaisesRegex(ValueError, 'config.batch=12 is not divisible by 8'):
      memory.memory_report(config, jax.devices()[:8])


if __name__ == '__main__':
  absltest.main()
