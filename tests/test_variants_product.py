"""The ViT variants through the rest of the product: fine-tune, predict, visualize, export.

Three tiny perturbed variant fixtures whose token layouts differ most (tests/testdata/interop,
timm's: DINOv2 with registers and layer scale, no_embed_class; SigLIP, no class token and a
MAP head; DeiT distilled, two prefix tokens and two heads) start a 2-step fine-tune by the real
trainer on mnist5k at 21 px (the fixtures' 4x4 patch grid re-gridded to 3x3 around every
prefix token, a fresh 10-class head). The work directory each leaves, and every other variant
fixture as it is (DINOv2, CLIP, DeiT-III, MAE fine-tuned), is then read by vit_jax.inference
(predictions, figures that skip register and distillation tokens) and exported to StableHLO,
whose function gives the model's logits. One compile set per variant keeps it cheap.
"""
import json
import os

from absl.testing import absltest
import jax
import numpy as np
from PIL import Image

from tests import test_train
from tests import tfds_testdata
from vit_jax import checkpoint
from vit_jax import rundir
from vit_jax import serving
from vit_jax.inference import figures
from vit_jax.inference import load
from vit_jax.inference import predict
from vit_jax.models import formats
from vit_jax.train import loop

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata', 'interop')
RESOLUTION = 21  # 7 px patches: a 3x3 grid, the fixtures' is 4x4
# name: prefix tokens in the attention (class, distillation, registers).
FINETUNED = {'timm_dinov2_reg4': 5, 'timm_siglip': 0, 'timm_deit_distilled': 2}
AS_SAVED = {'timm_dinov2': 1, 'timm_clip': 1, 'timm_deit3': 1, 'timm_mae_finetuned': 1}


def finetune_config(fixture: str, how: dict, data_dir: str):
  """A 2-step fine-tune of `fixture` whose model is the one the checkpoint describes."""
  read = formats.read(fixture, num_heads=how.get('num_heads'), options=how.get('options'))
  overrides = dict(read.overrides)
  overrides.pop('num_classes')  # a fresh head for mnist's 10 classes
  overrides.pop('representation_size')
  c = test_train.tiny_config(total_steps=2, log_every=1, checkpoint_every=0, batch=8,
                             warmup_steps=1)
  c.model_name = read.model_name
  c.pretrained_path = fixture
  c.data_dir = data_dir
  c.pp.resize = 24
  c.pp.crop = RESOLUTION
  c.model.dropout_rate = 0.0
  c.eval_split = 'test[:16]'  # the loss only needs to be finite
  c.batch_eval = 16
  c.peak_tflops = 1.0  # no start-up matmul measurement: mfu is not checked here
  for key, value in overrides.items():
    c.model[key] = value
  return c


class VariantsThroughTheProductTest(absltest.TestCase):

  def test_finetune_predict_visualize_export(self):
    data_dir = tfds_testdata.data_dir()
    root = tfds_testdata.tempdir(self, 'variants')
    with open(os.path.join(FIXTURES, 'variants.json')) as f:
      manifest = json.load(f)
    digit = os.path.join(root, 'digit.png')
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (28, 28), np.uint8)).save(digit)
    for name, prefix in FINETUNED.items():
      with self.subTest(name):
        how = manifest[name]
        workdir = os.path.join(root, name)
        fixture = os.path.join(FIXTURES, how['path'])
        result = loop.train_and_evaluate(finetune_config(fixture, how, data_dir), workdir,
                                         devices=jax.devices()[:1])
        losses = [v for k, v in result.items() if 'loss' in k]
        self.assertTrue(losses and np.all(np.isfinite(losses)), (name, result))
        params = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
        pretrained = formats.read(fixture, num_heads=how.get('num_heads'),
                                  options=how.get('options')).params
        # Fine-tuning started from the fixture: its first block moved only a little.
        self.assertLess(np.max(np.abs(
            params['Transformer']['encoderblock_0']['MlpBlock_0']['Dense_0']['kernel'] -
            pretrained['Transformer']['encoderblock_0']['MlpBlock_0']['Dense_0']['kernel'])),
            0.05, name)
        loaded = load.load_model(None, workdir)  # from the workdir's config.json
        # The embedding was re-gridded 4x4 -> 3x3 around the prefix rows it has (none
        # with no_embed_class), and the loaded model counts the same rows.
        posemb = params['Transformer']['posembed_input']['pos_embedding']
        self.assertEqual(posemb.shape[1] - 9, figures._posemb_prefix(loaded.model), name)  # pylint: disable=protected-access
        self.assertEqual((loaded.resolution, loaded.num_classes), (RESOLUTION, 10), name)
        self._check_inference(loaded, name, prefix, (3, 3), digit, root)
    for name, prefix in AS_SAVED.items():
      with self.subTest(name):
        how = manifest[name]
        fixture = os.path.join(FIXTURES, how['path'])
        loaded = load.load_model(how.get('model'), fixture, num_heads=how.get('num_heads'),
                                 **how.get('options', {}))
        self._check_inference(loaded, name, prefix, (4, 4), digit, root)

  def _check_inference(self, loaded, name, prefix, grid, digit, root):
    """Predictions, figures that skip the prefix tokens, and a StableHLO export."""
    patches = grid[0] * grid[1]
    labels = [str(i) for i in range(loaded.num_classes)]
    if loaded.num_classes:
      top, = predict.predict_files(loaded, [digit], labels, k=3)
      self.assertLen(top, 3)
    else:  # a headless tower (DINOv2) gives features, not classes
      with self.assertRaisesRegex(ValueError, 'no classification head|has 0 outputs'):
        predict.predict_files(loaded, [digit], labels, k=3)
    written = figures.write_figures(loaded, [digit], os.path.join(root, name + '_figs'))
    names = {os.path.basename(p) for p in written}
    self.assertIn('attention_rollout_digit.png', names, name)
    self.assertIn('posemb_similarity.png', names, name)
    res = loaded.resolution
    weights = figures.attention_weights(loaded.model, loaded.params, np.zeros((1, res, res, 3)))
    self.assertEqual(weights.shape[-1], prefix + patches, name)
    self.assertEqual(figures._prefix(loaded.model), prefix, name)  # pylint: disable=protected-access
    sim = figures.posemb_similarity(figures.posemb(loaded.model, loaded.params),
                                    figures._posemb_prefix(loaded.model), grid)  # pylint: disable=protected-access
    np.testing.assert_allclose(np.diagonal(sim.reshape(patches, patches)), 1.0, atol=1e-5)

    path = os.path.join(root, name + '.stablehlo')
    serving.export(loaded.model, loaded.params, res, 'stablehlo', path)
    with open(path, 'rb') as f:
      exported = jax.export.deserialize(f.read())
    images = np.random.default_rng(1).uniform(-1, 1, (2, res, res, 3)).astype(np.float32)
    served = np.asarray(exported.call(images))
    logits = np.asarray(loaded.model.apply({'params': loaded.params}, images))
    self.assertEqual(served.shape, logits.shape)
    np.testing.assert_allclose(served, logits, rtol=1e-4, atol=1e-5, err_msg=name)

if __name__ == '__main__':
  absltest.main()
