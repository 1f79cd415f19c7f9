"""Tests for the device mesh and the replicate/fsdp sharding rules."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import numpy as np
import optax

from vit_jax.configs import base
from vit_jax.parallel import sharding


def _config(rules='fsdp', min_size=2**16):
  config = base.get_base_config()
  config.sharding = rules
  config.fsdp_min_size = min_size
  return config


def _vit_like_params():
  """Abstract parameters with ViT-B/16 names and shapes (two blocks)."""
  f32 = jnp.float32
  params = {
      'cls': jax.ShapeDtypeStruct((1, 1, 768), f32),
      'embedding': {'kernel': jax.ShapeDtypeStruct((16, 16, 3, 768), f32),
                    'bias': jax.ShapeDtypeStruct((768,), f32)},
      'head': {'kernel': jax.ShapeDtypeStruct((768, 1000), f32),
               'bias': jax.ShapeDtypeStruct((1000,), f32)},
      'Transformer': {
          'posembed_input': {'pos_embedding': jax.ShapeDtypeStruct((1, 197, 768), f32)},
          'encoder_norm': {'scale': jax.ShapeDtypeStruct((768,), f32),
                           'bias': jax.ShapeDtypeStruct((768,), f32)},
      },
  }
  for i in range(2):
    params['Transformer'][f'encoderblock_{i}'] = {
        'LayerNorm_0': {'scale': jax.ShapeDtypeStruct((768,), f32)},
        'MultiHeadDotProductAttention_1': {
            'query': {'kernel': jax.ShapeDtypeStruct((768, 12, 64), f32),
                      'bias': jax.ShapeDtypeStruct((12, 64), f32)},
            'out': {'kernel': jax.ShapeDtypeStruct((12, 64, 768), f32)},
        },
        'MlpBlock_3': {'Dense_0': {'kernel': jax.ShapeDtypeStruct((768, 3072), f32),
                                   'bias': jax.ShapeDtypeStruct((3072,), f32)}},
    }
  return params


def _specs_by_path(tree, shardings):
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  flat = jax.tree_util.tree_leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
  return {sharding.path_str(path): s.spec for (path, _), s in zip(leaves, flat)}


class MeshTest(parameterized.TestCase):

  @parameterized.parameters(
      ({'data': -1, 'fsdp': 1}, (8, 1)),
      ({'data': 2, 'fsdp': 4}, (2, 4)),
      ({'data': -1, 'fsdp': 4}, (2, 4)),
      ({'data': 1, 'fsdp': -1}, (1, 8)),
      ({'fsdp': 8}, (1, 8)),
  )
  def test_shapes(self, mesh_config, shape):
    mesh = sharding.make_mesh(mesh_config)
    self.assertEqual(mesh.axis_names, ('data', 'fsdp'))
    self.assertEqual(tuple(mesh.devices.shape), shape)

  def test_default_config_mesh_and_subset_of_devices(self):
    mesh = sharding.make_mesh(base.get_base_config().mesh, devices=jax.devices()[:4])
    self.assertEqual(dict(mesh.shape), {'data': 4, 'fsdp': 1})

  @parameterized.parameters(
      ({'data': 3, 'fsdp': 1}, 'multiply to 3 but there are 8'),
      ({'data': -1, 'fsdp': 3}, 'not divisible'),
      ({'data': -1, 'fsdp': -1}, 'at most one axis'),
      ({'data': 0, 'fsdp': 8}, 'config.mesh.data=0'),
      ({'data': 2.0, 'fsdp': 4}, 'config.mesh.data=2.0'),
      ({'data': -1, 'model': 2}, "unknown axes ['model']"),
  )
  def test_errors(self, mesh_config, message):
    with self.assertRaisesRegex(ValueError, message.replace('[', r'\[').replace(']', r'\]')):
      sharding.make_mesh(mesh_config)

  def test_batch_spec_splits_over_both_axes(self):
    mesh = sharding.make_mesh({'data': 2, 'fsdp': 4})
    self.assertEqual(sharding.batch_spec(mesh), P(('data', 'fsdp')))
    batch = jax.device_put(np.zeros((16, 4, 4, 3), np.float32), sharding.batch_sharding(mesh))
    self.assertEqual({s.data.shape for s in batch.addressable_shards}, {(2, 4, 4, 3)})


class RulesTest(absltest.TestCase):

  def test_fsdp_shards_large_arrays_on_their_largest_divisible_dim(self):
    mesh = sharding.make_mesh({'data': 2, 'fsdp': 4})
    params = _vit_like_params()
    specs = _specs_by_path(params, sharding.tree_shardings(params, mesh, _config()))
    block = 'Transformer/encoderblock_0/'
    expected = {
        'embedding/kernel': P(None, None, None, 'fsdp'),
        'head/kernel': P(None, 'fsdp'),           # 1000 is the largest dim and 1000 % 4 == 0
        'Transformer/posembed_input/pos_embedding': P(None, None, 'fsdp'),
        block + 'MultiHeadDotProductAttention_1/query/kernel': P('fsdp', None, None),
        block + 'MultiHeadDotProductAttention_1/out/kernel': P(None, None, 'fsdp'),
        block + 'MlpBlock_3/Dense_0/kernel': P(None, 'fsdp'),
        # Below fsdp_min_size: replicated.
        'cls': P(), 'embedding/bias': P(), 'head/bias': P(),
        'Transformer/encoder_norm/scale': P(), block + 'LayerNorm_0/scale': P(),
        block + 'MlpBlock_3/Dense_0/bias': P(),
        block + 'MultiHeadDotProductAttention_1/query/bias': P(),
    }
    for name, spec in expected.items():
      self.assertEqual(specs[name], spec, name)

  def test_fsdp_falls_back_to_a_smaller_divisible_dim_or_replicates(self):
    mesh = sharding.make_mesh({'data': 1, 'fsdp': 8})
    tree = {'a': jax.ShapeDtypeStruct((1000, 4100), jnp.float32),   # 4100 % 8 != 0
            'b': jax.ShapeDtypeStruct((1001, 4100), jnp.float32),   # nothing divisible
            'c': jax.ShapeDtypeStruct((), jnp.int32)}
    specs = _specs_by_path(tree, sharding.tree_shardings(tree, mesh, _config(min_size=0)))
    self.assertEqual(specs, {'a': P('fsdp', None), 'b': P(), 'c': P()})

  def test_replicate_rules_and_fsdp_axis_of_one_replicate_everything(self):
    params = _vit_like_params()
    for rules, mesh_config in (('replicate', {'data': 1, 'fsdp': 8}),
                               ('fsdp', {'data': 8, 'fsdp': 1})):
      mesh = sharding.make_mesh(mesh_config)
      specs = _specs_by_path(params, sharding.tree_shardings(params, mesh, _config(rules)))
      self.assertEqual(set(specs.values()), {P()}, rules)

  def test_unknown_rules_name(self):
    mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
    with self.assertRaisesRegex(ValueError, "config.sharding='fdsp' is unknown"):
      sharding.tree_shardings(_vit_like_params(), mesh, _config('fdsp'))

  def test_optimizer_state_follows_parameters(self):
    mesh = sharding.make_mesh({'data': 2, 'fsdp': 4})
    params = _vit_like_params()
    opt_state = jax.eval_shape(optax.adamw(1e-3).init, params)
    specs = _specs_by_path(opt_state, sharding.tree_shardings(opt_state, mesh, _config()))
    kernel = 'Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel'
    self.assertEqual(specs[f'0/mu/{kernel}'], P(None, 'fsdp'))
    self.assertEqual(specs[f'0/nu/{kernel}'], P(None, 'fsdp'))
    self.assertEqual(specs['0/count'], P())
    self.assertLen(sharding.describe(opt_state, sharding.tree_shardings(opt_state, mesh, _config())),
                   len(jax.tree_util.tree_leaves(opt_state)))


class ShardedTrainingTest(absltest.TestCase):
  """FSDP changes where arrays live, not what the training computes."""

  def _train(self, rules, mesh_config):
    mesh = sharding.make_mesh(mesh_config)
    config = _config(rules, min_size=0)
    tx = optax.adam(1e-2)

    def init(rng):
      k1, k2 = jax.random.split(rng)
      params = {'w1': jax.random.normal(k1, (16, 64)) / 4, 'w2': jax.random.normal(k2, (64, 8)) / 8}
      return params, tx.init(params)

    abstract = jax.eval_shape(init, jax.random.PRNGKey(0))
    state_shardings = sharding.tree_shardings(abstract, mesh, config)
    state = jax.jit(init, out_shardings=state_shardings)(jax.random.PRNGKey(0))

    def step(state, x, y):
      params, opt_state = state
      def loss_fn(p):
        logits = jnp.tanh(x @ p['w1']) @ p['w2']
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, opt_state = tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss

    data = sharding.batch_sharding(mesh)
    step = jax.jit(step, in_shardings=(state_shardings, data, data),
                   out_shardings=(state_shardings, None), donate_argnums=0)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(3):
      x = rng.normal(size=(32, 16)).astype(np.float32)
      y = rng.integers(0, 8, size=(32,))
      state, loss = step(state, x, y)
      losses.append(float(loss))
    return state, losses

  def test_fsdp_matches_replicated(self):
    state_r, losses_r = self._train('replicate', {'data': -1, 'fsdp': 1})
    state_f, losses_f = self._train('fsdp', {'data': 2, 'fsdp': 4})
    self.assertEqual(state_f[0]['w1'].sharding.spec, P(None, 'fsdp'))
    self.assertEqual(state_f[1][0].mu['w2'].sharding.spec, P('fsdp', None))
    np.testing.assert_allclose(losses_f, losses_r, rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(state_f), jax.tree_util.tree_leaves(state_r)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


if __name__ == '__main__':
  absltest.main()
