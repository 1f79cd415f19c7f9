"""Model names that tell the truth (vit_jax.models.naming): a preset only when it is one."""
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

from vit_jax import models
from vit_jax.configs import base
from vit_jax.configs import recipes
from vit_jax.models import from_config
from vit_jax.models import naming

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMM = os.path.join(REPO, 'tests', 'testdata', 'interop', 'timm_vit.safetensors')


class NamingTest(parameterized.TestCase):

  @parameterized.parameters('ViT-Ti_16', 'ViT-B_32', 'R50+ViT-B_16', 'Mixer-B_16')
  def test_a_preset_is_named(self, preset):
    self.assertEqual(naming.label(models.get_model(preset, num_classes=10), preset), preset)

  def test_the_quickstart_model_is_described(self):
    config = base.get_base_config()
    recipes.apply_quickstart_model(config)
    model = from_config.build(config, 10)
    self.assertEqual(naming.label(model, config.model_name), 'ViT 96w x 6L, 7px patches')

  @parameterized.parameters(
      ('ViT-B_16', {'hidden_size': 16, 'num_layers': 2, 'num_heads': 2, 'mlp_dim': 32,
                    'patches': {'size': (4, 4)}}, 'ViT 16w x 2L, 4px patches'),
      ('ViT-B_16', {'num_heads': 4}, 'ViT 768w x 12L, 16px patches'),  # heads differ too
      ('Mixer-B_16', {'num_blocks': 3}, 'Mixer 768w x 3 blocks, 16px patches'),
      ('R50+ViT-B_16', {'num_layers': 3},
       'ResNet(3,4,9)+ViT 768w x 3L, 1x1 patches of its features'))
  def test_any_other_shape_is_described(self, preset, overrides, want):
    self.assertEqual(naming.label(models.get_model(preset, **overrides), preset), want)

  def test_head_and_dtype_keep_the_preset(self):
    model = models.get_model('ViT-S_16', num_classes=3, dtype='bfloat16',
                             representation_size=None)
    self.assertEqual(naming.label(model, 'ViT-S_16'), 'ViT-S_16')

  def test_convert_names_a_small_checkpoint_by_its_shape(self):
    out_dir = self.create_tempdir().full_path
    out = subprocess.run(
        [sys.executable, '-m', 'vit_jax.convert', f'--from={TIMM}', '--num_heads=2',
         f'--to={out_dir}/small.npz'], capture_output=True, text=True, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu'), timeout=300, check=False)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn('ViT 16w x 2L, 4px patches', out.stdout)
    self.assertNotIn('ViT-B_16', out.stdout)


if __name__ == '__main__':
  absltest.main()
