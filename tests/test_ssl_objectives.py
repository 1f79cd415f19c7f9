"""Self-supervised objectives: the masking, the targets and the losses, piece by piece."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import configs
from vit_jax import models
from vit_jax.models import mae
from vit_jax.models import masked_patch
from vit_jax.models import masking
from vit_jax.models import vit as vit_lib
from vit_jax.train import objectives


def tiny_vit(**overrides):
  """A ViT of width 16 with 7x7 patches: 16 tokens of a 28x28 image."""
  kwargs = dict(num_classes=10, patches={'size': (7, 7)}, hidden_size=16, mlp_dim=32,
                num_layers=2, num_heads=2, dropout_rate=0.0)
  kwargs.update(overrides)
  return models.get_model('testing', **kwargs)


def images(n=4, seed=0):
  return jax.random.uniform(jax.random.PRNGKey(seed), (n, 28, 28, 3), minval=-1,
                            maxval=1)


class MaskingTest(absltest.TestCase):

  def test_patchify_round_trip_and_order(self):
    x = images(2)
    patches = masking.patchify(x, (7, 7))
    self.assertEqual(patches.shape, (2, 16, 7 * 7 * 3))
    # Token 5 is row 1, column 1 of the 4x4 grid.
    np.testing.assert_array_equal(patches[:, 5].reshape(2, 7, 7, 3), x[:, 7:14, 7:14])
    np.testing.assert_array_equal(masking.unpatchify(patches, (4, 4), (7, 7)), x)

  def test_unshuffling_restores_token_order(self):
    m = masking.random_mask(jax.random.PRNGKey(1), 8, 16, 0.75)
    self.assertEqual(m.keep.shape, (8, 4))
    np.testing.assert_array_equal(m.masked.sum(axis=1), np.full(8, 12.0))
    tokens = jnp.broadcast_to(jnp.arange(16.0)[None, :, None], (8, 16, 1))
    kept = masking.take_tokens(tokens, m.keep)
    left_out = masking.take_tokens(tokens, jnp.argsort(m.restore, axis=1)[:, 4:])
    restored = masking.take_tokens(jnp.concatenate([kept, left_out], axis=1), m.restore)
    np.testing.assert_array_equal(restored, tokens)
    # The kept tokens are exactly the unmasked ones.
    for i in range(8):
      self.assertEqual(set(np.asarray(m.keep[i]).tolist()),
                       set(np.flatnonzero(np.asarray(m.masked[i]) == 0).tolist()))

  def test_masks_differ_per_image(self):
    m = masking.random_mask(jax.random.PRNGKey(2), 16, 16, 0.5)
    self.assertGreater(len({tuple(np.asarray(r).tolist()) for r in m.masked}), 8)

  def test_sincos_posemb(self):
    table = masking.sincos_posemb((4, 4), 16)
    self.assertEqual(table.shape, (16, 16))
    # Row position in the first half of the channels, column in the second.
    np.testing.assert_allclose(table[1, :8], table[2, :8])   # same row 0
    np.testing.assert_allclose(table[0, 8:], table[4, 8:])   # same column 0
    np.testing.assert_allclose(table[0, :4], 0.0)   # sin(0)
    np.testing.assert_allclose(table[0, 4:8], 1.0)  # cos(0)
    with self.assertRaisesRegex(ValueError, 'divisible by 4'):
      masking.sincos_posemb((4, 4), 18)


class MaskedPatchTest(absltest.TestCase):

  def test_corruption_fractions(self):
    c = masked_patch.corrupt(jax.random.PRNGKey(0), 512, 196)
    chosen = np.asarray(c.chosen)
    np.testing.assert_array_equal(chosen.sum(axis=1), np.full(512, 98.0))  # 50% exactly
    action = np.asarray(c.action)[chosen > 0]
    fractions = [np.mean(action == a) for a in (masked_patch.MASK, masked_patch.RANDOM,
                                                 masked_patch.KEEP)]
    np.testing.assert_allclose(fractions, [0.8, 0.1, 0.1], atol=0.01)
    self.assertTrue(np.all(np.asarray(c.action)[chosen == 0] == masked_patch.KEEP))
    source = np.asarray(c.source)
    self.assertFalse(np.any(source == np.arange(196)[None]))  # another patch
    self.assertTrue(np.all((source >= 0) & (source < 196)))

  def test_mean_color_target_on_hand_made_patches(self):
    x = np.full((1, 14, 14, 3), -1.0, np.float32)  # 2x2 patches of 7x7
    x[0, :7, 7:] = 1.0                 # patch 1: white
    x[0, 7:, :7, 0] = 1.0              # patch 2: pure red
    x[0, 7:, 7:, :] = -1.0
    x[0, 7:, 7:10, :] = 1.0            # patch 3: 3 of 7 columns white: mean -1/7
    target = np.asarray(masked_patch.mean_color_target(jnp.asarray(x), (7, 7), 3))
    # Bins of 1/4 in [-1, 1]: -1 -> 0, 1 -> 7, -1/7 -> 3; class = r*64 + g*8 + b.
    self.assertEqual(target.tolist(), [[0, 511, 7 * 64, 3 * 64 + 3 * 8 + 3]])

  def test_downsized_target(self):
    x = np.full((1, 8, 8, 3), -1.0, np.float32)
    x[0, :2, :2] = 1.0  # the top-left 2x2 cell of the one 8x8 patch
    target = np.asarray(masked_patch.downsized_target(jnp.asarray(x), (8, 8), 3, 4))
    self.assertEqual(target.shape, (1, 1, 16))
    self.assertEqual(target[0, 0].tolist(), [511] + [0] * 15)

  def test_zero_head_starts_at_log_512(self):
    objective = objectives.make(_config('masked_patch'), tiny_vit())
    params = objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))
    loss, extra = objective.loss(params, {'image': images(4)}, jax.random.PRNGKey(3))
    # The zero-initialised head predicts uniformly over the 512 colours.
    np.testing.assert_allclose(loss, np.log(512), rtol=1e-5)
    self.assertBetween(float(extra['masked_patch_accuracy']), 0.0, 1.0)

  def test_loss_counts_corrupted_patches_only(self):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(2, 16, 512)), jnp.float32)
    target = jnp.asarray(rng.integers(0, 512, (2, 16)))
    chosen = masked_patch.corrupt(jax.random.PRNGKey(0), 2, 16).chosen
    loss, extra = objectives.patch_prediction_loss(logits, target, chosen, 512)
    other = np.asarray(chosen) == 0
    changed_logits = np.asarray(logits).copy()
    changed_logits[other] += rng.normal(size=changed_logits[other].shape) * 10
    changed_target = np.where(other, 7, np.asarray(target))
    again, extra_again = objectives.patch_prediction_loss(
        jnp.asarray(changed_logits), jnp.asarray(changed_target), chosen, 512)
    np.testing.assert_allclose(again, loss, rtol=1e-6)
    np.testing.assert_allclose(extra_again['masked_patch_accuracy'],
                               extra['masked_patch_accuracy'])
    xent = -jax.nn.log_softmax(logits)[np.arange(2)[:, None], np.arange(16)[None],
                                       target]
    np.testing.assert_allclose(loss, np.asarray(xent)[np.asarray(chosen) > 0].mean(),
                               rtol=1e-5)
    # A right answer on a corrupted patch counts as accuracy.
    perfect = jax.nn.one_hot(target, 512) * 50
    _, hit = objectives.patch_prediction_loss(perfect, target, chosen, 512)
    self.assertEqual(float(hit['masked_patch_accuracy']), 1.0)

  def test_downsized_and_pixel_targets_train(self):
    for target, shape in (('downsized', (2, 16, 49)), ('pixels', (2, 16, 147))):
      with self.subTest(target=target):
        c = _config('masked_patch', target=target, downsized=7)
        objective = objectives.make(c, tiny_vit())
        params = objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))
        self.assertEqual(objective.net.targets(images(2)).shape, shape)
        loss, _ = objective.loss(params, {'image': images(2)}, jax.random.PRNGKey(0))
        self.assertTrue(np.isfinite(loss))

  def test_bad_options(self):
    for options, pattern in (({'mask_ratio': 0.0}, 'mask_ratio=0.0'),
                             ({'mask_ratio': 1.0}, 'strictly between'),
                             ({'target': 'depth'}, "target='depth'"),
                             ({'replace_mask': 0.95}, 'exceeds 1'),
                             ({'target': 'downsized', 'downsized': 5}, 'divisible')):
      with self.subTest(options=options), self.assertRaisesRegex(ValueError, pattern):
        objectives.make(_config('masked_patch', **options), tiny_vit())


class MaeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.objective = objectives.make(_config('mae'), tiny_vit())
    self.autoencoder = self.objective.net
    self.params = self.objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))

  def test_encoder_sees_exactly_the_visible_tokens(self):
    x = images(3)
    rng = jax.random.PRNGKey(5)
    encoded = self.autoencoder.encode(self.params, x, rng)
    self.assertEqual(encoded.latent.shape, (3, 1 + 4, 16))  # class token + 25% of 16
    # Reference: the ViT's own Transformer on [cls, visible patches] with positions.
    vit = self.params['model']
    model = self.autoencoder.model
    emb = vit_lib.patch_embedding(model).apply({'params': vit['embedding']}, x)
    emb = emb.reshape(3, 16, 16)
    pe = mae.posemb_table((4, 4), 16, True)
    visible = masking.take_tokens(emb + pe[:, 1:], encoded.mask.keep)
    tokens = jnp.concatenate([jnp.broadcast_to(vit['cls'] + pe[:, :1], (3, 1, 16)),
                              visible], axis=1)
    reference = vit_lib.encoder(model, add_position_embedding=False).apply(
        {'params': vit['Transformer']}, tokens, train=False)
    np.testing.assert_allclose(encoded.latent, reference, atol=1e-6)
    # The masked patches' pixels cannot reach the encoder.
    masked = np.asarray(encoded.mask.masked)
    scrambled = np.asarray(masking.patchify(x, (7, 7))).copy()
    scrambled[masked > 0] = np.random.default_rng(0).uniform(
        -1, 1, scrambled[masked > 0].shape)
    again = self.autoencoder.encode(
        self.params, masking.unpatchify(jnp.asarray(scrambled), (4, 4), (7, 7)), rng)
    np.testing.assert_allclose(again.latent, encoded.latent, atol=1e-6)

  def test_decoder_outputs_every_patch(self):
    pred, mask = self.autoencoder.predict(self.params, images(2), jax.random.PRNGKey(1))
    self.assertEqual(pred.shape, (2, 16, 7 * 7 * 3))
    self.assertEqual(mask.masked.shape, (2, 16))
    self.assertIn('mask_token', self.params['decoder'])
    self.assertNotIn('pos_embedding', self.params['decoder'])  # fixed sin-cos

  def test_sincos_positions_are_exported_in_the_vit(self):
    pe = self.params['model']['Transformer']['posembed_input']['pos_embedding']
    np.testing.assert_allclose(pe, mae.posemb_table((4, 4), 16, True))

  def test_learned_positions(self):
    objective = objectives.make(_config('mae', posemb='learn'), tiny_vit())
    params = objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))
    self.assertEqual(params['decoder']['pos_embedding'].shape, (1, 17, 64))
    loss, _ = objective.loss(params, {'image': images(2)}, jax.random.PRNGKey(0))
    self.assertTrue(np.isfinite(loss))

  def test_per_patch_normalised_targets(self):
    target = np.asarray(mae.pixel_targets(images(2), (7, 7)))
    np.testing.assert_allclose(target.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(target.var(axis=-1), 1.0, atol=1e-3)
    raw = np.asarray(mae.pixel_targets(images(2), (7, 7), normalize=False))
    np.testing.assert_array_equal(raw, masking.patchify(images(2), (7, 7)))

  def test_loss_ignores_unmasked_patches(self):
    pred, mask = self.autoencoder.predict(self.params, images(2), jax.random.PRNGKey(2))
    target = mae.pixel_targets(images(2), (7, 7))
    loss = objectives.reconstruction_loss(pred, target, mask.masked)
    visible = (1 - mask.masked)[..., None]
    worse = pred + 100.0 * visible  # wrong everywhere the encoder saw
    np.testing.assert_allclose(
        objectives.reconstruction_loss(worse, target, mask.masked), loss, rtol=1e-6)
    hidden = pred + 1.0 * mask.masked[..., None]
    self.assertGreater(float(objectives.reconstruction_loss(hidden, target,
                                                            mask.masked)), float(loss))
    per_patch = np.mean(np.square(np.asarray(pred - target)), axis=-1)
    np.testing.assert_allclose(
        loss, per_patch[np.asarray(mask.masked) > 0].mean(), rtol=1e-5)

  def test_flops_count_visible_tokens(self):
    # Encoder on 1 + 4 tokens is cheaper than on 1 + 16; matches XLA's count.
    fwd = self.autoencoder.flops_per_image(28)
    count = jax.jit(lambda p, x: self.autoencoder.predict(p, x, jax.random.PRNGKey(0))
                    ).lower(self.params, images(1)).compile().cost_analysis()
    count = count[0] if isinstance(count, (list, tuple)) else count
    self.assertBetween(fwd / count['flops'], 0.85, 1.05)

  def test_bad_options(self):
    for options, pattern in (({'mask_ratio': 1.5}, 'mask_ratio=1.5'),
                             ({'posemb': 'rope'}, "posemb='rope'"),
                             ({'decoder_heads': 5}, 'not divisible'),
                             ({'decoder_depth': 0}, 'positive')):
      with self.subTest(options=options), self.assertRaisesRegex(ValueError, pattern):
        objectives.make(_config('mae', **options), tiny_vit())

  def test_models_without_patch_pixels_are_refused(self):
    with self.assertRaisesRegex(ValueError, 'needs a ViT .patch tokens.; MlpMixer'):
      objectives.make(_config('mae'), models.get_model('Mixer-B_16', num_classes=10))
    with self.assertRaisesRegex(ValueError, 'embeds ResNet features'):
      objectives.make(_config('masked_patch'),
                      models.get_model('R+ViT-Ti_16', num_classes=10))


def _config(objective, **options):
  c = configs.get_base_config()
  c.objective = objective
  if objective == 'mae':
    c.objectives.mae.update({'decoder_width': 64, 'decoder_depth': 1,
                             'decoder_heads': 4, 'decoder_mlp_dim': 128})
  c.objectives[objective].update(options)
  return c


if __name__ == '__main__':
  absltest.main()
