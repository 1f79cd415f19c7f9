"""Tests for the ahead-of-time memory analysis of the sharded train step."""
import re

from absl.testing import absltest
import jax
import jax.numpy as jnp

from vit_jax.perf import memory
from vit_jax.parallel import sharding


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

  def test_fsdp_gathers_weights_not_activations(self):
    config = _tiny_config('fsdp')
    config.model.update(hidden_size=128, num_heads=4, mlp_dim=512)
    config.batch = 80  # a size no weight dimension has
    config.fsdp_min_size = 0
    mesh = sharding.make_mesh(config.mesh, jax.devices()[:8])
    init, step = memory.build_state_and_step(config)
    abstract = jax.eval_shape(init, jax.random.PRNGKey(0))
    state_shardings = sharding.tree_shardings(abstract, mesh, config)
    batch_sharding = sharding.batch_sharding(mesh)
    batch = {'image': jax.ShapeDtypeStruct((80, 32, 32, 3), jnp.float32),
             'label': jax.ShapeDtypeStruct((80, 10), jnp.float32)}
    hlo = jax.jit(sharding.with_activation_constraints(step, mesh),
                  in_shardings=(state_shardings, batch_sharding),
                  out_shardings=(state_shardings, None)).lower(abstract, batch).compile().as_text()
    gathered = re.findall(r'(\w+\[[\d,]*\])\S* all-gather', hlo)
    self.assertNotEmpty(gathered)  # the FSDP weight gathers
    # Without the constraints XLA gathers whole-batch [80, tokens, width] activations here.
    self.assertEmpty([g for g in gathered if re.search(r'\[80,\d+,\d+', g)])

  def test_indivisible_batch(self):
    config = _tiny_config('fsdp')
    config.batch = 12
    with self.assertRaisesRegex(ValueError, 'config.batch=12 is not divisible by 8'):
      memory.memory_report(config, jax.devices()[:8])


if __name__ == '__main__':
  absltest.main()
