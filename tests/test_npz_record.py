"""An .npz keeps the model options its layout lacks (activation, LayerNorm epsilon, ...).

Converted to .npz and loaded back, a quick_gelu CLIP, a timm ViT with exact GELU and an MAE
fc_norm model give their source's logits; the record sits under a key the original
loader and timm's pass by, and a file without it loads as before.
"""
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from vit_jax import checkpoint
from vit_jax.models import formats
from vit_jax.models.formats import npz

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
_IMAGES = {16: np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32),
           28: np.random.default_rng(0).uniform(-1, 1, (2, 28, 28, 3)).astype(np.float32)}


def _logits(ckpt, size):
  return np.asarray(ckpt.get_model().apply({'params': ckpt.params}, _IMAGES[size]))


class ModelRecordTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('clip_quick_gelu', 'timm_clip_quickgelu.safetensors', 28,
       {'activation': 'quick_gelu', 'layer_norm_epsilon': 1e-5},
       {'activation': 'quick_gelu', 'layer_norm_epsilon': 1e-5}),
      ('timm_exact_gelu', 'timm_vit.safetensors', 16, {},
       {'activation': 'gelu', 'layer_norm_epsilon': 1e-6}),
      ('mae_fc_norm', 'timm_mae_finetuned.safetensors', 28, {},
       {'activation': 'gelu', 'layer_norm_epsilon': 1e-6}),
  )
  def test_converted_npz_loads_back_as_its_source(self, name, size, options, recorded):
    src = os.path.join(FIXTURES, name)
    out = os.path.join(self.create_tempdir().full_path, 'model.npz')
    from_source = _logits(formats.read(src, num_heads=2, options=options), size)
    checkpoint.convert(src, out, num_heads=2, options=options)
    loaded = checkpoint.load_any(out)
    for key, value in recorded.items():
      self.assertEqual(loaded.overrides[key], value, key)
    np.testing.assert_allclose(_logits(loaded, size), from_source, atol=1e-6)
    with np.load(out) as f:  # what the original loader sees: the parameters and the record
      self.assertIn(npz.MODEL_RECORD, f.files)
    self.assertNotIn(npz.MODEL_RECORD, checkpoint.load(out))

  def test_npz_without_a_record_loads_as_before(self):
    src = os.path.join(FIXTURES, 'timm_vit.safetensors')
    params = checkpoint.load_any(src, num_heads=2).params
    out = os.path.join(self.create_tempdir().full_path, 'plain.npz')
    checkpoint.save(params, out)
    with np.load(out) as f:
      self.assertNotIn(npz.MODEL_RECORD, f.files)
    self.assertEqual(npz.load_with_options(out)[1], {})


if __name__ == '__main__':
  absltest.main()
