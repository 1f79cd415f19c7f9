"""Tests for vit_jax.inference.engine: the serving path of predict, evaluate and the benchmark."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from tests import tiny_trained
from vit_jax import models
from vit_jax.data import mnist5k_arrays
from vit_jax.data.builders import mnist5k
from vit_jax.inference import engine
from vit_jax.inference import load

RES = 32


def _jit_apply(model):
  return jax.jit(lambda p, x: model.apply({'params': p}, x, train=False).astype(jnp.float32))


class EngineTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = models.get_model('testing', num_classes=10)
    cls.images = np.random.default_rng(0).uniform(-1, 1, (6, RES, RES, 3)).astype(np.float32)
    params = cls.model.init(jax.random.PRNGKey(0), cls.images[:1])['params']
    # A non-zero head, so that the logits differ between classes.
    params['head']['kernel'] = jax.random.normal(jax.random.PRNGKey(1),
                                                 params['head']['kernel'].shape)
    cls.params = params

  def test_float32_logits_equal_the_models_apply_exactly(self):
    served = engine.build(self.model, self.params, RES, dtype='float32', batch=6)
    np.testing.assert_array_equal(served.run(self.images),
                                  _jit_apply(self.model)(self.params, self.images))

  def test_bfloat16_casts_once_what_the_model_casts_and_gives_its_logits(self):
    served = engine.build(self.model, self.params, RES, dtype='bfloat16', batch=6)
    flat = engine._flat(served.prepared['params'])
    # The matmul kernels are stored in bfloat16; the norms, which compute in float32, not.
    block = 'Transformer/encoderblock_0/'
    self.assertEqual(flat[block + 'MlpBlock_0/Dense_0/kernel'].dtype, jnp.bfloat16)
    self.assertEqual(flat[block + 'MultiHeadDotProductAttention_0/query/kernel'].dtype,
                     jnp.bfloat16)
    self.assertEqual(flat['head/kernel'].dtype, jnp.bfloat16)
    self.assertEqual(flat[block + 'LayerNorm_0/scale'].dtype, jnp.float32)
    reference = _jit_apply(self.model.clone(dtype=jnp.bfloat16))(self.params, self.images)
    np.testing.assert_array_equal(served.run(self.images), reference)
    # ... and those are bfloat16 logits: close to, not equal to, the float32 ones.
    np.testing.assert_allclose(reference, _jit_apply(self.model)(self.params, self.images),
                               atol=0.1 * float(np.abs(reference).max()))

  def test_a_ragged_last_batch_is_padded_to_the_compiled_shape(self):
    whole = engine.build(self.model, self.params, RES, batch=6).run(self.images)
    served = engine.build(self.model, self.params, RES, batch=4)  # 4 + 2 padded
    out = served.run(self.images)
    self.assertEqual(out.shape, (6, 10))
    np.testing.assert_array_equal(out.argmax(-1), whole.argmax(-1))
    np.testing.assert_allclose(out, whole, rtol=1e-5, atol=1e-5)

  def test_fp8_weights_are_float8_once_and_match_the_per_call_fp8_model(self):
    served = engine.build(self.model, self.params, RES, weights='fp8', batch=6)
    self.assertFalse(served.model.fused_qkv)  # each kernel its own scale
    scales = served.prepared['scales']
    flat = engine._flat(served.prepared['params'])
    self.assertLen(scales, 6)  # the block's q, k, v, out and the MLP's two
    for path in scales:
      self.assertEqual(flat[path].dtype, jnp.float8_e4m3fn, path)
    self.assertEqual(flat['head/kernel'].dtype, jnp.float32)  # outside the blocks
    per_call = self.model.clone(matmul='fp8', fused_qkv=False)
    np.testing.assert_allclose(served.run(self.images),
                               _jit_apply(per_call)(self.params, self.images),
                               rtol=1e-5, atol=1e-4)

  def test_fp8_weights_on_the_tiny_trained_model(self):
    params_path, _, _ = tiny_trained.trained()
    loaded = load.load_model(None, params_path)
    images, labels = mnist5k_arrays.load_arrays()
    rows = mnist5k.split_indices(labels)['test'][:64]
    digits = np.repeat(images[rows].astype(np.float32) / 127.5 - 1.0, 3, axis=-1)
    exact = engine.build(loaded.model, loaded.params, loaded.resolution, batch=64)
    fp8 = engine.build(loaded.model, loaded.params, loaded.resolution, weights='fp8',
                       batch=64)
    ref, out = exact.run(digits), fp8.run(digits)
    # The stated tolerance: float8 weights and activations move the logits by at most
    # 5% of their range and change at most 1 in 16 top-1 predictions.
    self.assertLess(float(np.abs(out - ref).max()), 0.05 * float(np.ptp(ref)))
    self.assertGreaterEqual(float(np.mean(out.argmax(-1) == ref.argmax(-1))), 15 / 16)

  def test_batch_from_memory_flag_and_image_count(self):
    self.assertEqual(engine.pick_batch(24), 24)
    self.assertEqual(engine.pick_batch(0), engine.HOST_BATCH)  # no device limit (CPU)
    self.assertEqual(engine.pick_batch(0, n_images=5), 8)
    self.assertEqual(engine.pick_batch(0, n_images=1), 1)
    # 80 GB, 1 GB of weights, 100 MB per image: half of 79 GB holds 395 -> 256.
    self.assertEqual(engine.pick_batch(0, None, 1e8, 1e9, 80e9), 256)
    self.assertEqual(engine.pick_batch(0, None, 1e6, 1e9, 80e9), engine.MAX_BATCH)
    self.assertEqual(engine.pick_batch(0, None, 1e12, 1e9, 80e9), 1)

  def test_unknown_or_unsupported_weights(self):
    with self.assertRaisesRegex(ValueError, "Unknown weights 'int4'; use one of default, fp8"):
      engine.inference_model(self.model, weights='int4')
    with self.assertRaisesRegex(ValueError, 'MlpMixer has no float8 matmuls'):
      engine.inference_model(models.get_model('Mixer-B_16', num_classes=2), weights='fp8')


if __name__ == '__main__':
  absltest.main()
