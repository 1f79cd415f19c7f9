"""The ready recipes pinned to the paper's Tables 3/4 and the original vit_jax, value by value.

Expected values are written out from the tables (and the original repo's configs), not
derived from vit_jax.configs.recipes.
"""
import os
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import skimage.data
import tensorflow as tf
import tensorflow_datasets as tfds

from vit_jax import configs
from vit_jax import evaluators
from vit_jax.data import pipeline
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.train import loop
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import writers
from tests import commands
from tests import tfds_testdata
from tests import tool_modules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUGREG_L16 = 'L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1'

# Shared by every fine-tuning recipe: Table 4 and the original's configs/common.py.
FINETUNE = {
    'optimizer': 'sgd', 'optimizers.sgd.momentum': 0.9,
    'optimizers.sgd.accumulator_dtype': 'bfloat16',
    'batch': 512, 'decay_type': 'cosine', 'weight_decay': 0.0, 'grad_clip_norm': 1.0,
    'end_lr': -1.0,  # the original's: 0 after cosine, 1e-5 after linear
    'pp.train': 'finetune_inception', 'pp.min_area': 0.05, 'pp.flip': True,
    'pp.crop': 384, 'pp.eval': 'resize', 'objectives.supervised.loss': 'softmax_xent',
    'evals.test.every': 0, 'evals.test.split': '',
}
# Table 3: batch 4096, 10k warm-up, Adam .9/.999, 224px.
PRETRAIN = {
    'optimizer': 'adam', 'optimizers.adam.b1': 0.9, 'optimizers.adam.b2': 0.999,
    'batch': 4096, 'warmup_steps': 10_000, 'pp.train': 'pretrain', 'pp.crop': 224,
    'pp.eval': 'central_crop', 'pp.resize': 256, 'pp.keep_aspect': True,
}
EXPECTED = {
    'vit.py:b16,cifar10': {
        **FINETUNE, 'model_name': 'ViT-B_16', 'dataset': 'cifar10',
        'base_lr': 0.01, 'total_steps': 10_000, 'warmup_steps': 500,
        'train_split': 'train[:98%]', 'evals.minival.split': 'train[98%:]',
        'evals.minival.every': 1000, 'model.dropout_rate': None,
        'pretrained_dir': 'gs://vit_models/imagenet21k'},
    'vit.py:l16,imagenet2012': {
        **FINETUNE, 'model_name': 'ViT-L_16', 'dataset': 'imagenet2012',
        'base_lr': 0.03, 'total_steps': 20_000, 'warmup_steps': 500,
        'train_split': 'train[:99%]', 'evals.minival.split': 'train[99%:]',
        'evals.minival.every': 1000, 'model.dropout_rate': None},
    f'augreg.py:{AUGREG_L16},oxford_iiit_pet': {
        **FINETUNE, 'model_name': 'ViT-L_16', 'dataset': 'oxford_iiit_pet',
        'base_lr': 0.03, 'total_steps': 500, 'warmup_steps': 100,
        'model.dropout_rate': 0.0, 'train_split': '', 'evals.minival.every': -1,
        'pretrained_path': f'gs://vit_models/augreg/{AUGREG_L16}.npz'},
    'pretrain.py:b16,imagenet21k': {
        **PRETRAIN, 'model_name': 'ViT-B_16', 'dataset': 'imagenet21k',
        'base_lr': 1e-3, 'decay_type': 'linear', 'end_lr': 1e-5, 'weight_decay': 0.03,
        'model.dropout_rate': 0.1, 'grad_clip_norm': 0.0,
        # 90 epochs of the catalog's 14,145,922 training images at batch 4096.
        'total_steps': 310_823,
        'objectives.supervised.loss': 'sigmoid_xent', 'pp.multi_hot': True,
        'model.head_bias_init': -10.0, 'model.representation_size': 768},
    'pretrain.py:l16,imagenet21k': {
        **PRETRAIN, 'model_name': 'ViT-L_16', 'dataset': 'imagenet21k',
        'base_lr': 1e-3, 'decay_type': 'linear', 'end_lr': 1e-5, 'weight_decay': 0.03,
        'model.dropout_rate': 0.1, 'grad_clip_norm': 0.0, 'total_steps': 310_823,
        'objectives.supervised.loss': 'sigmoid_xent', 'model.representation_size': 1024},
    'pretrain.py:b16,imagenet2012': {
        **PRETRAIN, 'model_name': 'ViT-B_16', 'dataset': 'imagenet2012',
        'base_lr': 3e-3, 'decay_type': 'cosine', 'end_lr': 0.0, 'weight_decay': 0.3,
        'model.dropout_rate': 0.1, 'grad_clip_norm': 1.0,
        # 300 epochs of 1,281,167 images at batch 4096.
        'total_steps': 93_835, 'objectives.supervised.loss': 'softmax_xent',
        'pp.multi_hot': False},
}

# timm's input as DeiT and MAE fine-tuning call it (rand-m9-mstd0.5-inc1, reprob 0.25).
TIMM_INPUT = {
    'pp.train': 'pretrain|randaug(2, 9, 0.5)|erase(0.25)', 'pp.min_area': 0.08,
    'pp.flip': True, 'pp.crop': 224, 'pp.resize': 256, 'pp.keep_aspect': True,
    'pp.eval': 'central_crop', 'pp.mixup': 0.8, 'pp.cutmix': 1.0,
    'pp.cutmix_switch_prob': 0.5, 'pp.label_smoothing': 0.1,
}
# AugReg (big_vision configs/vit_i1k.py): Adam 1e-3, wd 1e-4 there = 0.1 x lr here.
AUGREG_PRETRAIN = {
    **PRETRAIN, 'base_lr': 1e-3, 'weight_decay': 0.1, 'decay_type': 'cosine',
    'end_lr': 0.0, 'grad_clip_norm': 1.0, 'optimizers.adam.mu_dtype': 'bfloat16',
    'pp.min_area': 0.05, 'pp.flip': True,
}
AUGREG_LEVELS = {  # level: (pp.train, pp.mixup)
    'none': ('pretrain', 0.0), 'light1': ('pretrain|randaug(2, 0)', 0.0),
    'light2': ('pretrain|randaug(2, 10)', 0.2), 'medium1': ('pretrain|randaug(2, 15)', 0.2),
    'medium2': ('pretrain|randaug(2, 15)', 0.5), 'strong1': ('pretrain|randaug(2, 20)', 0.5),
    'strong2': ('pretrain|randaug(2, 20)', 0.8),
}
_QUICKSTART = {'dataset': 'mnist5k', 'model.hidden_size': 96, 'model.classifier': 'gap',
               'batch': 128, 'optimizer': 'adam', 'base_lr': 2e-3, 'weight_decay': 1e-4,
               'pp.label_smoothing': 0.1}
EXPECTED.update({
    # The quickstart's numbers (0.976-0.978 over seeds 0-2) and its fine-tuning
    # examples (':short', the recipe of earlier releases) were measured with these.
    'quickstart.py': {
        **_QUICKSTART, 'total_steps': 2000, 'warmup_steps': 200,
        'model.stochastic_depth': 0.1,
        'pp.train': "decode|random_affine(degrees=15, translate=0.08, scale=(0.85, 1.15), "
                    "shear=10, interpolation='bilinear')"},
    'quickstart.py:short': {
        **_QUICKSTART, 'total_steps': 930, 'warmup_steps': 100,
        'model.stochastic_depth': 0.0, 'pp.train': 'finetune'},
})
EXPECTED.update({
    'deit.py:s16,imagenet2012': {
        **TIMM_INPUT, 'model_name': 'ViT-S_16', 'dataset': 'imagenet2012',
        'optimizer': 'adam', 'optimizers.adam.b1': 0.9, 'optimizers.adam.b2': 0.999,
        'optimizers.adam.eps': 1e-8, 'batch': 1024,
        'base_lr': 1e-3,  # 5e-4 x 1024 / 512
        'weight_decay': 0.05, 'decay_type': 'cosine', 'end_lr': 1e-5,
        'grad_clip_norm': 0.0, 'layer_decay': 1.0,
        # 300 and 5 epochs of 1,281,167 images at batch 1024.
        'total_steps': 375_341, 'warmup_steps': 6_255,
        'model.stochastic_depth': 0.1, 'model.dropout_rate': 0.0,
        'model.representation_size': 0, 'objectives.supervised.loss': 'softmax_xent',
        'pp.repeats': 3},
    'mae_finetune.py:b16,imagenet2012': {
        **TIMM_INPUT, 'model_name': 'ViT-B_16', 'dataset': 'imagenet2012',
        'optimizer': 'adam', 'optimizers.adam.b1': 0.9, 'optimizers.adam.b2': 0.999,
        'batch': 1024,
        'base_lr': 2e-3,  # 5e-4 x 1024 / 256
        'layer_decay': 0.65, 'weight_decay': 0.05, 'decay_type': 'cosine', 'end_lr': 1e-6,
        'grad_clip_norm': 0.0,
        # 100 and 5 epochs of 1,281,167 images at batch 1024.
        'total_steps': 125_113, 'warmup_steps': 6_255,
        'model.stochastic_depth': 0.1, 'model.dropout_rate': 0.0,
        'model.classifier': 'gap', 'model.fc_norm': True, 'model.representation_size': 0,
        'pp.repeats': 1},
    'augreg_pretrain.py:b16,imagenet21k,light2,reg=0.1': {
        **AUGREG_PRETRAIN, 'model_name': 'ViT-B_16', 'dataset': 'imagenet21k',
        'pp.train': 'pretrain|randaug(2, 10)', 'pp.mixup': 0.2,
        'model.dropout_rate': 0.1, 'model.stochastic_depth': 0.1,
        'total_steps': 1_036_078,  # 300 epochs of 14,145,922 images at batch 4096
        'model.classifier': 'gap', 'model.representation_size': 0,
        'objectives.supervised.loss': 'sigmoid_xent', 'pp.multi_hot': True},
})
for _level, (_pp_train, _alpha) in AUGREG_LEVELS.items():
  EXPECTED[f'augreg_pretrain.py:b16,imagenet2012,{_level}'] = {
      **AUGREG_PRETRAIN, 'model_name': 'ViT-B_16', 'dataset': 'imagenet2012',
      'pp.train': _pp_train, 'pp.mixup': _alpha, 'pp.cutmix': 0.0,
      'model.dropout_rate': 0.0, 'model.stochastic_depth': 0.0,
      'total_steps': 93_835,  # 300 epochs of 1,281,167 images at batch 4096
      'model.representation_size': 768}


def _load(spec: str):
  return configs.load(os.path.join(REPO, 'configs', spec))


def _get(config, dotted: str):
  for key in dotted.split('.'):
    config = config[key]
  return config


class RecipeValuesTest(absltest.TestCase):

  def test_resolved_configs_field_by_field(self):
    for spec, expected in EXPECTED.items():
      config = _load(spec)
      for key, want in expected.items():
        got = _get(config, key)
        if isinstance(want, float):
          self.assertAlmostEqual(got, want, places=12, msg=f'{spec} {key}')
        else:
          self.assertEqual(got, want, msg=f'{spec} {key}')

  def test_augmentation_recipes_pass_the_config_check(self):
    # Every op name and argument of the new recipes parses; the same on a small dataset.
    for spec in ('quickstart.py', 'deit.py:ti16,mnist5k', 'mae_finetune.py:ti16,mnist5k',
                 'augreg_pretrain.py:ti16,mnist5k,strong2,reg=0.1'):
      config = _load(spec)
      preprocess.train_chain(config.pp)
      preprocess.eval_chain(config.pp)
      optimizers.make(config, schedules.make(config))

  def test_imagenet_runs_are_also_scored_on_v2_and_real(self):
    # big_vision's vit_i1k.py: ImageNet-v2 and ReaL beside the validation set, as often.
    for spec in ('deit.py:s16,imagenet2012', 'mae_finetune.py:b16,imagenet2012',
                 'pretrain.py:b16,imagenet2012', 'vit.py:b16,imagenet2012'):
      config = _load(spec)
      self.assertEqual(
          {k: (config.evals[k].dataset, config.evals[k].split, config.evals[k].every)
           for k in ('v2', 'real')},
          {'v2': ('imagenet_v2', 'test', config.evals.test.every),
           'real': ('imagenet2012_real', 'validation', config.evals.test.every)}, spec)
      evaluators.check(config)  # their keys and splits pass before any download
    for spec in ('deit.py:s16,cifar10', 'vit.py:b16,cifar10', 'quickstart.py'):
      self.assertNotIn('v2', _load(spec).evals, spec)

  def test_quickstart_variant_typo_is_one_line(self):
    with self.assertRaisesRegex(ValueError, 'config argument \'shrot\': use none or "short"'):
      _load('quickstart.py:shrot')

  def test_augreg_mistakes_are_one_line(self):
    with self.assertRaisesRegex(ValueError, r"^Unknown AugReg level 'medium3' \(did you mean "
                                r'medium1 or medium2\?\)\.$'):
      _load('augreg_pretrain.py:b16,imagenet2012,medium3')
    with self.assertRaisesRegex(ValueError, "Unknown AugReg level 'heavy' \\(levels: "
                                'none, light1, light2, medium1, medium2, strong1, strong2'):
      _load('augreg_pretrain.py:b16,imagenet2012,heavy')
    with self.assertRaisesRegex(ValueError, r'AugReg reg=0.2: the paper trains with'):
      _load('augreg_pretrain.py:b16,imagenet2012,light1,reg=0.2')

  def test_schedule_ends(self):
    finetune = _load('vit.py:b16,cifar10')
    self.assertEqual(float(schedules.make(finetune)(10_000)), 0.0)
    finetune.decay_type = 'linear'  # the original's linear decay ends at 1e-5
    self.assertAlmostEqual(float(schedules.make(finetune)(10_000)), 1e-5, places=10)
    i21k = _load('pretrain.py:b16,imagenet21k')
    self.assertAlmostEqual(float(schedules.make(i21k)(310_823)), 1e-5, places=10)
    self.assertAlmostEqual(float(schedules.make(i21k)(10_000)), 1e-3, places=9)

  def test_finetune_momentum_is_kept_in_bfloat16(self):
    tx = optimizers.make(_load('vit.py:b16,cifar10'), 0.01)
    state = tx.init({'kernel': jnp.zeros((3, 4), jnp.float32)})
    traces = [x for x in jax.tree.leaves(state) if getattr(x, 'shape', ()) == (3, 4)]
    self.assertEqual([t.dtype for t in traces], [jnp.bfloat16])

  def test_table4_steps_and_lrs_of_other_datasets(self):
    for spec, steps, warmup, lr in (('vit.py:b16,cifar100', 10_000, 500, 0.03),
                                    ('vit.py:b32,cifar10', 10_000, 500, 0.03),
                                    ('vit.py:b16,oxford_iiit_pet', 500, 100, 0.03),
                                    ('vit.py:b16,oxford_flowers102', 500, 100, 0.03),
                                    ('vit.py:b16,vtab/dtd', 2_500, 500, 0.01)):
      c = _load(spec)
      self.assertEqual((c.total_steps, c.warmup_steps), (steps, warmup), msg=spec)
      self.assertAlmostEqual(c.base_lr, lr, msg=spec)

  def test_lr_sweep_by_value_or_index(self):
    sweep = (0.001, 0.003, 0.01, 0.03)
    imagenet = (0.003, 0.01, 0.03, 0.06)
    for i in range(4):
      self.assertEqual(_load(f'vit.py:b16,cifar10,lr={i}').base_lr, sweep[i])
      self.assertEqual(_load(f'vit.py:b16,cifar10,lr={sweep[i]}').base_lr, sweep[i])
      self.assertEqual(_load(f'vit.py:l16,imagenet2012,lr={i}').base_lr, imagenet[i])
    self.assertEqual(_load('vit.py:b16,cifar10,lr=3e-3').base_lr, 0.003)
    self.assertEqual(_load(f'augreg.py:{AUGREG_L16},oxford_iiit_pet,lr=2').base_lr,
                     0.01)
    with self.assertRaisesRegex(ValueError, r"lr='0.02' is not in the cifar10 lr sweep "
                                r'\(0: 0.001, 1: 0.003, 2: 0.01, 3: 0.03\)'):
      _load('vit.py:b16,cifar10,lr=0.02')
    with self.assertRaisesRegex(ValueError, "lr='4'"):
      _load('vit.py:b16,cifar10,lr=4')
    with self.assertRaisesRegex(ValueError, "unknown option 'rl'"):
      _load('vit.py:b16,cifar10,rl=1')
    with self.assertRaisesRegex(ValueError, r"'b16,cifar10,0.01': expected "
                                r'MODEL,DATASET\[,lr=...\]'):
      _load('vit.py:b16,cifar10,0.01')
    with self.assertRaisesRegex(ValueError, 'expected AUGREG_FILENAME,DATASET'):
      _load('augreg.py:lr=1')

  def test_bad_lr_on_the_command_line_is_one_line_and_creates_nothing(self):
    workdir = os.path.join(tempfile.mkdtemp(), 'run')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.main',
         f'--config={REPO}/configs/vit.py:b16,cifar10,lr=0.05', f'--workdir={workdir}'],
        cwd=REPO, timeout=120, env={**os.environ, 'PYTHONPATH': REPO})
    self.assertEqual(proc.returncode, 2, proc.stderr)
    # TensorFlow's start-up lines may precede it; the error itself is one line.
    self.assertIn(
        "vit_jax: error: config argument lr='0.05' is not in the cifar10 lr sweep "
        '(0: 0.001, 1: 0.003, 2: 0.01, 3: 0.03); pick a value or its index, or set '
        '--config.base_lr\n', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)
    self.assertFalse(os.path.exists(workdir))


class RecipeTableTest(absltest.TestCase):

  def test_the_recipes_page_table_is_the_resolved_configs(self):
    tool = tool_modules.load('recipe_table')
    with open(os.path.join(REPO, 'docs', 'guides', 'recipes.md')) as f:
      page = f.read()
    self.assertIn(tool.table() + '\n', page)


class CropGeometryTest(absltest.TestCase):

  def _boxes(self, pp, n: int) -> np.ndarray:
    """(height, width) of n training crops of a 224x224 ramp image, read off the pixels."""
    rows, cols = np.meshgrid(np.arange(224), np.arange(224), indexing='ij')
    ramp = np.stack([rows, cols, np.zeros_like(rows)], -1).astype(np.uint8)
    data = tf.io.encode_png(ramp)  # lossless: pixel values are the source coordinates
    crops = tf.data.Dataset.range(n).map(
        lambda i: preprocess.train_image(data, tf.stack([i, tf.constant(7, tf.int64)]),
                                         pp))
    out = np.stack(list(crops.as_numpy_iterator())).astype(np.float64)
    size, steps = pp.crop, np.arange(pp.crop) + 0.5
    # Bilinear resizing samples source pixel (i + 0.5) * extent / size - 0.5 for output
    # pixel i: the slope of the coordinate ramp times size is the box's extent.
    h = [np.polyfit(steps, o[:, :, 0].mean(1), 1)[0] * size for o in out]
    w = [np.polyfit(steps, o[:, :, 1].mean(0), 1)[0] * size for o in out]
    return np.stack([h, w], -1)

  def test_finetune_train_crop_is_the_inception_crop(self):
    pp = _load('vit.py:b16,cifar10').pp
    pp.crop = 32   # a smaller output than the smallest box, so no sample is clamped
    pp.flip = False
    boxes = self._boxes(pp, 400)
    area = boxes[:, 0] * boxes[:, 1] / 224**2
    aspect = boxes[:, 1] / boxes[:, 0]
    # Inception crop: 5-100% of the area, aspect 3/4-4/3, spread over the ranges.
    self.assertGreaterEqual(area.min(), 0.05 - 0.005)
    self.assertLessEqual(area.max(), 1.0 + 0.005)
    self.assertGreaterEqual(aspect.min(), 3 / 4 - 0.02)
    self.assertLessEqual(aspect.max(), 4 / 3 + 0.02)
    self.assertLess(area.min(), 0.10)
    self.assertGreater(area.max(), 0.90)
    self.assertLess(aspect.min(), 0.80)
    self.assertGreater(aspect.max(), 1.25)
    # The resize-then-crop recipe would cut a fixed (crop/resize)^2 of every image.
    pp.train, pp.resize = 'finetune', 40
    fixed = self._boxes(pp, 20)
    np.testing.assert_allclose(fixed * (40 / 224), 32, atol=0.2)


class PretrainEvalTest(absltest.TestCase):

  def test_keeps_the_aspect_ratio_of_a_non_square_photo(self):
    photo = skimage.data.chelsea()  # 300 x 451
    config = _load('pretrain.py:b16,imagenet2012')
    got = pipeline.preprocess_for_eval_numpy(photo, config)
    self.assertEqual(got.shape, (224, 224, 3))
    # Shorter side 300 -> 256, longer 451 -> round(451 * 256 / 300) = 385; central 224.
    resized = tf.image.resize(photo, [256, 385]).numpy()
    window = np.clip(np.round(resized[16:240, 80:304]), 0, 255) / 127.5 - 1
    np.testing.assert_allclose(got, window, atol=1 / 127.5 + 1e-6)
    # PIL's (antialiased) bilinear resize agrees closely too.
    pil = np.asarray(Image.fromarray(photo).resize((385, 256), Image.BILINEAR))
    self.assertLess(np.abs(got - (pil[16:240, 80:304] / 127.5 - 1)).mean(), 0.03)
    # Squashing to 256x256 first, the old evaluation, is far from it.
    squashed = tf.image.resize(photo, [256, 256]).numpy()[16:240, 16:240] / 127.5 - 1
    self.assertGreater(np.abs(got - squashed).max(), 1.0)


class MinivalTest(absltest.TestCase):

  def test_minival_during_training_and_test_at_the_end_each_example_once(self):
    c = _load('vit.py:b16,cifar10')  # the recipe's evaluators and cadences
    c.model_name = 'testing'
    c.model.patches = {'size': (7, 7)}
    c.model.hidden_size = 16
    c.model.mlp_dim = 32
    c.pretrained_dir = ''
    c.dataset = 'digits'
    c.data_dir = tfds_testdata.data_dir()
    c.train_split = 'train[:90%]'
    c.evals.minival.split = 'train[90%:]'
    c.evals.minival.every = 2
    c.pp.crop = 28
    c.batch, c.batch_eval = 16, 64  # 64 divides neither split: padded, masked batches
    c.shuffle_buffer = 500
    c.total_steps, c.warmup_steps, c.log_every = 4, 1, 2
    c.checkpoint_every = 0
    c.peak_tflops = 1e-9  # below any step's rate: the trainer raises it, and says so
    builder = tfds.builder('digits', data_dir=c.data_dir)
    builder.download_and_prepare()
    sizes = {s: builder.info.splits[s].num_examples
             for s in ('train', 'train[:90%]', 'train[90%:]', 'test')}
    self.assertEqual(sizes, {'train': 1437, 'train[:90%]': 1293, 'train[90%:]': 144,
                             'test': 360})
    self.assertEqual(sources.get_dataset_info(c).num_train, 1293)

    workdir = tfds_testdata.tempdir(self, 'run')
    with self.assertLogs(level='INFO') as logs:
      final = loop.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
    self.assertTrue(any('ran faster than the measured peak' in line for line in logs.output))
    self.assertEqual(final['examples_minival'], 144)
    self.assertEqual(final['examples_test'], 360)
    records = writers.read_metrics(workdir)
    minival = [(r['step'], r['examples_minival']) for r in records
               if 'accuracy_minival' in r]
    test = [(r['step'], r['examples_test']) for r in records if 'accuracy_test' in r]
    self.assertEqual(minival, [(2, 144), (4, 144)])
    self.assertEqual(test, [(4, 360)])
    for r in records:
      self.assertLessEqual(r.get('mfu', 0.0), 1.0)
      if 'accuracy_minival' in r:
        self.assertBetween(r['accuracy_minival'], 0.0, 1.0)
        self.assertIn('loss_minival', r)

  def test_split_mistakes_are_one_line(self):
    c = tfds_testdata.config('digits', train_split='train[:90')
    with self.assertRaisesRegex(ValueError, r"Bad split 'train\[:90' for digits"):
      sources.get_dataset_info(c)
    c = tfds_testdata.config('digits', **{'evals.minival.every': 5})
    with self.assertRaisesRegex(ValueError, 'config.evals.minival.split is empty'):
      evaluators.check(c)


if __name__ == '__main__':
  absltest.main()
