"""big_vision's plain ViT: model.posemb='sincos2d' and configs/plain_vit.py (issue 43 item 2)."""
import math
import os
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from tests.tiny_train_config import tiny_config
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import models
from vit_jax import rundir
from vit_jax.data import preprocess
from vit_jax.inference import load
from vit_jax.models import masking
from vit_jax.models.vit import model as vit_model
from vit_jax.train import loop
from vit_jax.train import optimizers
from vit_jax.train import schedules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# big_vision/configs/vit_s16_i1k.py, written out value by value (ours: decoupled wd 1e-4 is
# 0.1 x lr 1e-3; 90 epochs of the catalog's 1,281,167 images at batch 1024).
IMAGENET = {
    'model_name': 'ViT-S_16', 'dataset': 'imagenet2012', 'train_split': 'train[:99%]',
    'evals.minival.split': 'train[99%:]', 'batch': 1024, 'total_steps': 112_602,
    'warmup_steps': 10_000, 'decay_type': 'cosine', 'base_lr': 1e-3, 'end_lr': 0.0,
    'optimizer': 'adam', 'optimizers.adam.b1': 0.9, 'optimizers.adam.b2': 0.999,
    'optimizers.adam.mu_dtype': 'bfloat16', 'weight_decay': 0.1, 'grad_clip_norm': 1.0,
    'model.classifier': 'gap', 'model.posemb': 'sincos2d', 'model.representation_size': 384,
    'model.dropout_rate': 0.0, 'model.stochastic_depth': 0.0,
    'objectives.supervised.loss': 'softmax_xent', 'pp.train': 'pretrain|randaug(2, 10)',
    'pp.crop': 224, 'pp.min_area': 0.05, 'pp.flip': True, 'pp.mixup': 0.2,
    'pp.eval': 'central_crop', 'pp.resize': 256, 'pp.keep_aspect': True,
}
SMALL = {
    'model_name': 'ViT-Ti_16', 'model.hidden_size': 96, 'model.num_layers': 6,
    'model.patches': {'size': (7, 7)}, 'model.representation_size': 96,
    'model.classifier': 'gap', 'model.posemb': 'sincos2d', 'model.dropout_rate': 0.0,
    'dataset': 'mnist5k', 'batch': 128, 'total_steps': 600, 'warmup_steps': 100,
    'base_lr': 1e-3, 'weight_decay': 0.1, 'grad_clip_norm': 1.0, 'pp.mixup': 0.2,
    'optimizers.adam.mu_dtype': 'bfloat16', 'pp.crop': 28,
}


def _get(config, dotted):
  for key in dotted.split('.'):
    config = config[key]
  return config


def _hand_table(rows, cols, width):
  """posemb_sincos_2d written out: [sin x, cos x, sin y, cos y], omega_i = 1e4^(-i/(D/4-1))."""
  quarter = width // 4
  table = []
  for y in range(rows):
    for x in range(cols):
      omegas = [10000.0 ** (-i / (quarter - 1)) for i in range(quarter)]
      table.append([math.sin(x * w) for w in omegas] + [math.cos(x * w) for w in omegas] +
                   [math.sin(y * w) for w in omegas] + [math.cos(y * w) for w in omegas])
  return np.asarray(table)


class PlainVitConfigTest(absltest.TestCase):

  def test_resolved_values(self):
    for arg, expected in (('imagenet2012', IMAGENET), ('mnist5k', SMALL)):
      config = configs.load(os.path.join(REPO, 'configs', f'plain_vit.py:{arg}'))
      for key, want in expected.items():
        got = _get(config, key)
        got = got.to_dict() if hasattr(got, 'to_dict') else got
        self.assertEqual(got, want, msg=f'{arg} {key}')
      preprocess.train_chain(config.pp)
      optimizers.make(config, schedules.make(config))

  def test_bad_argument_is_one_line(self):
    with self.assertRaisesRegex(ValueError, 'imagenet2012'):
      configs.load(os.path.join(REPO, 'configs', 'plain_vit.py:imagenet2012,extra'))


class SincosPosembTest(absltest.TestCase):

  def test_vit_s16_has_no_position_parameter(self):
    def shapes(**kwargs):
      model = models.get_model('ViT-S_16', num_classes=1000, classifier='gap', **kwargs)
      return jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                               jnp.zeros((1, 224, 224, 3))))['params']
    self.assertNotIn('posembed_input', shapes(posemb='sincos2d')['Transformer'])
    self.assertIn('posembed_input', shapes()['Transformer'])

  def test_table_is_big_visions_formula(self):
    np.testing.assert_allclose(masking.sincos_posemb((2, 3), 8, layout='big_vision'),
                               _hand_table(2, 3, 8), atol=1e-6)

  def test_model_adds_the_table_to_the_patch_tokens(self):
    # No blocks and no final norm: the encoder returns [class token, patches + table].
    model = models.get_model('testing', num_classes=3, posemb='sincos2d', hidden_size=16)
    encoder = vit_model.encoder(model, num_layers=0, final_norm=False)
    out = encoder.apply({}, jnp.zeros((1, 1 + 2 * 3, 16)), train=False, grid=(2, 3))
    np.testing.assert_array_equal(out[0, 0], np.zeros(16))
    np.testing.assert_allclose(out[0, 1:], _hand_table(2, 3, 16), atol=1e-6)

  def test_trains_and_checkpoint_round_trips(self):
    workdir = os.path.join(tempfile.mkdtemp(), 'run')
    config = tiny_config(total_steps=4, checkpoint_every=4)
    config.model.posemb = 'sincos2d'
    config.model.classifier = 'gap'
    loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    path = os.path.join(workdir, rundir.PARAMS_FILE)
    params = checkpoint.load(path)
    self.assertNotIn('posembed_input', params['Transformer'])
    loaded = load.load_model(None, path)
    self.assertEqual(loaded.model.posemb, 'sincos2d')
    self.assertEqual(loaded.resolution, 28)
    images = jax.random.uniform(jax.random.PRNGKey(1), (2, 28, 28, 3), minval=-1.0)
    trained = models.get_model('testing', num_classes=10, posemb='sincos2d',
                               classifier='gap', patches={'size': (7, 7)}, hidden_size=16,
                               mlp_dim=32, representation_size=None)
    np.testing.assert_allclose(loaded.model.apply({'params': loaded.params}, images),
                               trained.apply({'params': params}, images), atol=1e-5)
    # Another resolution recomputes the table: nothing to interpolate.
    bigger = load.load_model(None, path, resolution=42)
    self.assertEqual(bigger.model.apply({'params': bigger.params},
                                        jnp.zeros((1, 42, 42, 3))).shape, (1, 10))


if __name__ == '__main__':
  absltest.main()
