"""Tests for timm / transformers checkpoint interop: parity, round trips, the CLI, bad input.

The fixture tests read tiny checkpoints saved by timm and transformers
themselves (tests/testdata/interop, made by tools/make_interop_fixtures.py)
with those libraries' logits, so they need neither torch nor transformers.
The library tests build fresh random models with torch/timm/transformers and
check both directions in those libraries; they skip when the packages are
missing. Relative error: max |ours - theirs| / max |theirs|, fp32 on CPU.
"""
import fractions
import importlib.util
import json
import os
import pickle
import shutil
import sys
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from tests import commands
from tests import test_checkpoint
from tests import test_train
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import rundir
from vit_jax.inference import load
from vit_jax.inference import predict
from vit_jax.models import formats
from vit_jax.train import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
TOLERANCE = 1e-4


def _installed(name: str) -> bool:
  try:
    return importlib.util.find_spec(name) is not None
  except (ImportError, ValueError):
    return False


_HAVE = {name: _installed(name) for name in ('torch', 'timm', 'transformers')}


def _missing(*names: str) -> str:
  absent = [n for n in names if not _HAVE[n]]
  return (f'needs {" and ".join(absent)} (pip install -e ".[interop]")'
          if absent else '')


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
  return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def _apply(model, params, images) -> np.ndarray:
  return np.asarray(jax.jit(lambda p, x: model.apply({'params': p}, x))(
      params, images))


def _reference() -> dict:
  with np.load(os.path.join(FIXTURES, 'reference_logits.npz')) as f:
    return dict(f)


def _flat(tree, prefix=''):
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(_flat(v, f'{prefix}{k}/'))
    else:
      out[prefix + k] = np.asarray(v)
  return out


class _TmpDirTest(test_checkpoint.CheckpointTestCase):
  """A fresh temporary directory per test (self.dir, self.path(name))."""


class FixtureParityTest(_TmpDirTest):
  """Checkpoints saved by timm / transformers give their logits in vit_jax."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.ref = _reference()
    cls.images = cls.ref['images']

  def _check(self, ckpt: formats.Checkpoint, key: str, **overrides) -> np.ndarray:
    ours = _apply(ckpt.get_model(**overrides), ckpt.params, self.images)
    err = _rel(ours, self.ref[key])
    self.assertLessEqual(err, TOLERANCE, f'{key}: relative error {err:.2e}')
    return ours

  def test_transformers_classifier(self):
    ckpt = formats.read(os.path.join(FIXTURES, 'hf_classifier'))
    self.assertEqual(ckpt.format, 'hf')
    self.assertEqual(ckpt.overrides['num_classes'], 5)
    self.assertEqual(ckpt.overrides['num_heads'], 2)  # read from config.json
    self._check(ckpt, 'hf_classifier')

  def test_transformers_backbone_pooler_is_pre_logits(self):
    ckpt = formats.read(os.path.join(FIXTURES, 'hf_backbone'))
    self.assertEqual(ckpt.overrides['representation_size'], 16)
    self.assertEqual(ckpt.overrides['num_classes'], 0)
    self._check(ckpt, 'hf_backbone')

  def test_transformers_safetensors_file_beside_config(self):
    ckpt = formats.read(os.path.join(FIXTURES, 'hf_classifier',
                                     'model.safetensors'))
    self.assertEqual(ckpt.format, 'hf')
    self._check(ckpt, 'hf_classifier')

  def test_timm_vit_gap_and_hybrid(self):
    for name, classifier in (('timm_vit', 'token'), ('timm_gap', 'gap'),
                             ('timm_hybrid', 'token')):
      with self.subTest(name):
        ckpt = formats.read(os.path.join(FIXTURES, f'{name}.safetensors'),
                            num_heads=2)
        self.assertEqual(ckpt.format, 'timm')
        self.assertEqual(ckpt.overrides['classifier'], classifier)
        self._check(ckpt, name)
    self.assertEqual(ckpt.model_name, 'R50+ViT-B_16')
    self.assertEqual(ckpt.overrides['resnet'],
                     {'num_layers': (1,), 'width_factor': 0.5})

  def test_written_back_is_bit_identical(self):
    """Ours exported back holds exactly the tensors (so the logits) theirs saved."""
    for name in ('timm_vit', 'timm_gap', 'timm_hybrid'):
      with self.subTest(name):
        src = os.path.join(FIXTURES, f'{name}.safetensors')
        params = formats.read(src, num_heads=2).params
        # Through our .npz and back, as a user round trip would go.
        checkpoint.save(params, self.path(f'{name}.npz'))
        ckpt = formats.read(self.path(f'{name}.npz'))
        self.assertEqual(formats.write(ckpt.params, self.path(f'{name}.safetensors')),
                         'timm')
        self._assert_same_tensors(src, self.path(f'{name}.safetensors'))
    for name in ('hf_classifier', 'hf_backbone'):
      with self.subTest(name):
        ckpt = formats.read(os.path.join(FIXTURES, name))
        self.assertEqual(formats.write(ckpt.params, self.path(name), to_format='hf',
                                       options=ckpt.overrides), 'hf')
        self._assert_same_tensors(os.path.join(FIXTURES, name, 'model.safetensors'),
                                  self.path(f'{name}/model.safetensors'))
        with open(os.path.join(FIXTURES, name, 'config.json')) as f:
          theirs = json.load(f)
        with open(self.path(f'{name}/config.json')) as f:
          ours = json.load(f)
        for key in ('model_type', 'hidden_size', 'num_hidden_layers',
                    'num_attention_heads', 'intermediate_size', 'patch_size',
                    'image_size', 'hidden_act', 'architectures', 'qkv_bias',
                    'layer_norm_eps'):
          self.assertEqual(ours[key], theirs[key], key)

  def _assert_same_tensors(self, a: str, b: str) -> None:
    ta, tb = safetensors.numpy.load_file(a), safetensors.numpy.load_file(b)
    self.assertEqual(sorted(ta), sorted(tb))
    for key in ta:
      np.testing.assert_array_equal(ta[key], tb[key], err_msg=key)

  def test_sharded_transformers_checkpoint(self):
    src = os.path.join(FIXTURES, 'hf_classifier')
    dst = self.path('sharded')
    os.makedirs(dst)
    shutil.copy(os.path.join(src, 'config.json'), dst)
    tensors = safetensors.numpy.load_file(os.path.join(src, 'model.safetensors'))
    keys = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((keys[::2], keys[1::2])):
      name = f'model-0000{i + 1}-of-00002.safetensors'
      safetensors.numpy.save_file({k: tensors[k] for k in part},
                                  os.path.join(dst, name), {'format': 'pt'})
      weight_map.update({k: name for k in part})
    with open(os.path.join(dst, 'model.safetensors.index.json'), 'w') as f:
      json.dump({'metadata': {}, 'weight_map': weight_map}, f)
    self._check(formats.read(dst), 'hf_classifier')

  def test_load_pretrained_fine_tunes_hf_and_timm(self):
    """A new head and interpolated position embeddings, as for an .npz."""
    for src, heads in ((os.path.join(FIXTURES, 'hf_classifier'), None),
                       (os.path.join(FIXTURES, 'timm_vit.safetensors'), 2)):
      with self.subTest(src):
        ckpt = formats.read(src, num_heads=heads)
        overrides = {k: v for k, v in ckpt.overrides.items()
                     if k != 'num_classes'}
        model = models.get_model(ckpt.model_name, num_classes=3, **overrides)
        init = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))
        params = checkpoint.load_pretrained(
            pretrained_path=src, init_params=init['params'],
            model_config=models.get_model_config(ckpt.model_name).to_dict() | {
                'transformer': {'num_heads': 2}})
        self.assertEqual(params['head']['kernel'].shape, (16, 3))
        np.testing.assert_array_equal(params['head']['kernel'],
                                      init['params']['head']['kernel'])
        posemb = params['Transformer']['posembed_input']['pos_embedding']
        self.assertEqual(posemb.shape, (1, 65, 16))  # 4x4 grid -> 8x8 + cls
        np.testing.assert_array_equal(
            params['Transformer']['encoderblock_1']['MlpBlock_0']['Dense_0']['kernel'],
            ckpt.params['Transformer']['encoderblock_1']['MlpBlock_0']['Dense_0']['kernel'])
        self.assertTrue(np.all(np.isfinite(_apply(model, params,
                                                  np.zeros((1, 32, 32, 3))))))

  def test_trainer_fine_tunes_a_transformers_checkpoint(self):
    """--config.pretrained_path takes a transformers directory as it takes an .npz."""
    config = test_train.tiny_config(
        pretrained_path=os.path.join(FIXTURES, 'hf_classifier'), total_steps=4,
        checkpoint_every=0, optimizer='sgd', base_lr=0.01)
    config.model.hidden_size, config.model.mlp_dim = 16, 32
    config.model.num_layers, config.model.num_heads = 2, 2
    config.model.patches = {'size': (4, 4)}
    workdir = self.create_tempdir().full_path
    result = loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    self.assertBetween(result['accuracy_test'], 0.0, 1.0)
    params = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    self.assertEqual(params['head']['kernel'].shape, (16, 10))  # a new head
    self.assertEqual(params['Transformer']['posembed_input']['pos_embedding'].shape,
                     (1, 50, 16))  # 4x4 grid -> 7x7 + cls
    config.pretrained_path = FIXTURES  # a directory that is no checkpoint
    with self.assertRaisesRegex(ValueError, 'directory without config.json'):
      loop.train_and_evaluate(config, self.create_tempdir().full_path, devices=jax.devices()[:1])

  def test_predict_loads_a_transformers_directory(self):
    loaded = load.load_model(None, os.path.join(FIXTURES, 'hf_classifier'))
    self.assertEqual((loaded.resolution, loaded.num_classes), (16, 5))
    probs = predict.make_predict_fn(loaded)(self.images)
    np.testing.assert_allclose(
        probs, jax.nn.softmax(self.ref['hf_classifier']), atol=1e-5)

  def test_predict_needs_the_model_of_a_timm_file(self):
    src = os.path.join(FIXTURES, 'timm_vit.safetensors')
    with self.assertRaisesRegex(ValueError, 'number of attention heads'):
      load.load_model(None, src)
    # A size no preset has: the heads come from --num_heads (predict, visualize, ...).
    loaded = load.load_model(None, src, num_heads=2)
    probs = predict.make_predict_fn(loaded)(self.images)
    np.testing.assert_allclose(
        probs, jax.nn.softmax(self.ref['timm_vit']), atol=1e-5)

  def test_other_image_normalisation_is_folded_into_the_patch_embedding(self):
    """ImageNet mean/std in preprocessor_config.json: same logits on [-1, 1] input."""
    src = os.path.join(FIXTURES, 'hf_classifier')
    dst = self.path('hf_imagenet_norm')
    shutil.copytree(src, dst)
    pre = {'do_normalize': True, 'do_rescale': True, 'rescale_factor': 1 / 255,
           'image_mean': [0.485, 0.456, 0.406],
           'image_std': [0.229, 0.224, 0.225]}
    with open(os.path.join(dst, 'preprocessor_config.json'), 'w') as f:
      json.dump(pre, f)
    plain = formats.read(src)
    folded = formats.read(dst)
    model = plain.get_model()
    pixels = (self.images + 1) * 127.5
    hf_input = (pixels / 255 - np.array(pre['image_mean'])) / np.array(
        pre['image_std'])
    expect = _apply(model, plain.params, hf_input.astype(np.float32))
    got = _apply(model, folded.params, self.images)
    self.assertLessEqual(_rel(got, expect), 1e-5)


class ErrorTest(_TmpDirTest):
  """Bad input: one-line errors, nothing written."""

  def assertOneLineError(self, fn, regex, exc=ValueError):
    with self.assertRaisesRegex(exc, regex) as cm:
      fn()
    self.assertNotIn('\n', str(cm.exception))
    self.assertEqual(os.listdir(self.dir), [], 'something was written')

  def _hf_dir(self, **config_changes) -> str:
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path)
    shutil.copytree(os.path.join(FIXTURES, 'hf_classifier'), path,
                    dirs_exist_ok=True)
    with open(os.path.join(path, 'config.json')) as f:
      config = json.load(f)
    config.update(config_changes)
    with open(os.path.join(path, 'config.json'), 'w') as f:
      json.dump(config, f)
    return path

  def test_timm_shapes_that_fit_no_preset(self):
    src = os.path.join(FIXTURES, 'timm_vit.safetensors')
    self.assertOneLineError(
        lambda: formats.convert(src, self.path('x.npz')),
        r'does not record the number of attention heads.*fits no vit_jax preset')
    self.assertOneLineError(
        lambda: formats.convert(src, self.path('x.npz'), model='ViT-Ti_16'),
        r"does not fit model 'ViT-Ti_16': .*hidden_size 16 != 192.*--num_heads")
    self.assertOneLineError(
        lambda: formats.convert(src, self.path('x.npz'),
                                model='vit_base_patch16_224.augreg_in21k'),
        r"does not fit model 'ViT-B_16'")
    self.assertOneLineError(
        lambda: formats.convert(src, self.path('x.npz'), model='swin_tiny'),
        r"Unknown model 'swin_tiny'")

  def test_npz_that_is_no_vit(self):
    src = self.path('odd.npz')
    np.savez(src, **{'conv/kernel': np.zeros((3, 3), np.float32)})
    with self.assertRaisesRegex(ValueError, 'fits no vit_jax model'):
      formats.convert(src, self.path('x.safetensors'))
    self.assertEqual(os.listdir(self.dir), ['odd.npz'])

  def test_transformers_config_of_another_model_type(self):
    for model_type in ('swin', 'vit-hybrid'):
      with self.subTest(model_type):
        src = self._hf_dir(model_type=model_type)
        self.assertOneLineError(
            lambda: formats.convert(src, self.path('x.npz')),
            rf"transformers '{model_type}' model; vit_jax converts the model types")

  def test_exact_gelu_reads_as_exact_gelu(self):
    for act, ours in (('gelu', 'gelu'), ('gelu_pytorch_tanh', 'gelu_tanh'),
                      ('quick_gelu', 'quick_gelu')):
      with self.subTest(act):
        src = self._hf_dir(hidden_act=act, layer_norm_eps=1e-3)
        ckpt = formats.read(src)
        self.assertEqual(ckpt.overrides['activation'], ours)
        self.assertEqual(ckpt.overrides['layer_norm_epsilon'], 1e-3)
        self.assertEqual(ckpt.get_model().activation, ours)

  def test_other_unsupported_configs(self):
    for change, regex in (({'hidden_act': 'relu'}, 'hidden_act=.relu'),
                          ({'num_channels': 1}, 'num_channels=1'),
                          ({'num_hidden_layers': 3}, 'lacks .*encoder.layer.2'),
                          ({'patch_size': [4, 8]}, 'not square')):
      with self.subTest(str(change)):
        src = self._hf_dir(**change)
        self.assertOneLineError(lambda: formats.convert(src, self.path('x.npz')),
                                regex)

  def test_truncated_safetensors(self):
    with open(os.path.join(FIXTURES, 'timm_vit.safetensors'), 'rb') as f:
      data = f.read()
    src_dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, src_dir)
    for cut, name in ((len(data) - 100, 'tail'), (20, 'header')):
      src = os.path.join(src_dir, f'{name}.safetensors')
      with open(src, 'wb') as f:
        f.write(data[:cut])
      with self.subTest(name):
        self.assertOneLineError(
            lambda: formats.convert(src, self.path('x.npz'), num_heads=2),
            r'is truncated or not a safetensors file')

  def test_pth_holding_a_pickled_object(self):
    src_dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, src_dir)
    src = os.path.join(src_dir, 'model.pth')
    with open(src, 'wb') as f:
      pickle.dump({'weight': fractions.Fraction(1, 3)}, f)
    regex = ('refusing to unpickle' if _HAVE['torch'] else
             r'needs PyTorch: pip install torch')
    self.assertOneLineError(
        lambda: formats.convert(src, self.path('x.npz'), num_heads=2), regex)

  def test_formats_that_cannot_hold_the_model(self):
    gap = formats.read(os.path.join(FIXTURES, 'timm_gap.safetensors'),
                       num_heads=2).params
    hybrid = formats.read(os.path.join(FIXTURES, 'timm_hybrid.safetensors'),
                          num_heads=2).params
    backbone = formats.read(os.path.join(FIXTURES, 'hf_backbone')).params
    both = dict(backbone, head={'kernel': np.zeros((16, 3), np.float32),
                                'bias': np.zeros(3, np.float32)})
    for params, fmt, regex in (
        (gap, 'hf', 'pools by averaging'), (hybrid, 'hf', 'ResNet hybrid'),
        (both, 'hf', 'pre-logits layer and a head.*--drop_head'),
        (backbone, 'timm', 'pre-logits layer.*--drop_head')):
      with self.subTest(regex):
        out = self.path('out' if fmt == 'hf' else 'out.safetensors')
        self.assertOneLineError(
            lambda: formats.write(params, out, to_format=fmt), regex)
    # --drop_head: a ViTModel whose pooler is the pre-logits layer; timm: both go.
    formats.write(both, self.path('hf'), to_format='hf', drop_head=True)
    self.assertEqual(formats.read(self.path('hf')).overrides['num_classes'], 0)
    formats.write(backbone, self.path('t.safetensors'), drop_head=True)
    self.assertNotIn('pre_logits',
                     formats.read(self.path('t.safetensors'), num_heads=2).params)

  def test_ambiguous_or_occupied_output(self):
    params = formats.read(os.path.join(FIXTURES, 'hf_classifier')).params
    self.assertOneLineError(lambda: formats.write(params, self.path('out')),
                            r'Cannot tell the format.*--to_format')
    self.assertOneLineError(
        lambda: formats.write(params, self.path('out.npz'), to_format='hf'),
        'the hf format is a directory')
    os.makedirs(self.path('full'))
    with open(self.path('full/keep.txt'), 'w') as f:
      f.write('x')
    with self.assertRaisesRegex(FileExistsError, 'not an empty directory'):
      formats.write(params, self.path('full'), to_format='hf')
    self.assertEqual(os.listdir(self.path('full')), ['keep.txt'])

  def test_cli_one_line_error_and_nothing_written(self):
    src = self._hf_dir(model_type='swin')
    out = self.path('x.npz')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.convert', f'--from={src}', f'--to={out}'], cwd=REPO)
    self.assertEqual(proc.returncode, 2)
    self.assertRegex(proc.stderr.strip().splitlines()[-1],
                     r"^vit_jax.convert: error: .*'swin' model; vit_jax converts")
    self.assertFalse(os.path.exists(out))


class CliTest(_TmpDirTest):

  def test_timm_to_transformers_to_npz(self):
    ref = _reference()
    src = os.path.join(FIXTURES, 'timm_vit.safetensors')
    hf_dir, npz = self.path('hf'), self.path('vit.npz')
    for args in ([f'--from={src}', f'--to={hf_dir}', '--to_format=hf',
                  '--num_heads=2'],
                 [f'--from={hf_dir}', f'--to={npz}']):
      proc = commands.run([sys.executable, '-m', 'vit_jax.convert'] + args, cwd=REPO)
      self.assertEqual(proc.returncode, 0, proc.stderr)
      self.assertIn('classes) ->', proc.stdout)
    self.assertEqual(sorted(os.listdir(hf_dir)),
                     ['config.json', 'model.safetensors',
                      'preprocessor_config.json'])
    ckpt = formats.read(npz)
    ours = _apply(ckpt.get_model(), ckpt.params, ref['images'])
    self.assertLessEqual(_rel(ours, ref['timm_vit']), TOLERANCE)


class _LibraryTest(_TmpDirTest):
  """Runs torch on CPU without triton.

  torch._dynamo (imported by transformers and timm) imports triton where the
  CUDA build installed it, and loading triton's extension after TensorFlow
  (which other suites import into the same process) crashes with a
  segmentation fault (TF 2.21, triton 3.8). CPU inference never uses triton.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._blocked_triton = 'triton' not in sys.modules
    if cls._blocked_triton:
      sys.modules['triton'] = None  # import triton -> ImportError

  @classmethod
  def tearDownClass(cls):
    if cls._blocked_triton and sys.modules.get('triton', 0) is None:
      del sys.modules['triton']
    super().tearDownClass()


@absltest.skipIf(bool(_missing('torch', 'transformers')),
                 _missing('torch', 'transformers'))
class TransformersLibraryTest(_LibraryTest):
  """Fresh random transformers ViTs, both directions, in transformers itself."""

  def _model(self, cls: str, seed: int, model_kwargs=None, **config):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    torch.manual_seed(seed)
    kwargs = dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                  intermediate_size=40, image_size=24, patch_size=6,
                  hidden_act='gelu_pytorch_tanh')
    kwargs.update(config)
    model = getattr(transformers, cls)(transformers.ViTConfig(**kwargs),
                                       **(model_kwargs or {})).eval()
    with torch.no_grad():
      for p in model.parameters():
        p.add_(0.1 * torch.randn(p.shape))
    return model

  def _run(self, model, images, pooled=False, **kwargs):
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      out = model(pixel_values=torch.from_numpy(
          images.transpose(0, 3, 1, 2).copy()), **kwargs)
    if pooled:
      return out.pooler_output.numpy()
    if hasattr(out, 'logits'):
      return out.logits.numpy()
    return out.last_hidden_state[:, 0].numpy()  # our num_classes=0 output

  def _load_back(self, cls: str, path: str, **kwargs):
    import transformers  # pylint: disable=g-import-not-at-top
    model, info = getattr(transformers, cls).from_pretrained(
        path, output_loading_info=True, **kwargs)
    self.assertEqual(info['missing_keys'], type(info['missing_keys'])())
    self.assertEqual(info['unexpected_keys'], type(info['unexpected_keys'])())
    return model.eval()

  def test_both_directions(self):
    images = np.random.default_rng(1).uniform(-1, 1, (3, 24, 24, 3)).astype(
        np.float32)
    cases = (('ViTForImageClassification', dict(num_labels=7), False, {}),
             ('ViTModel', dict(pooler_output_size=10), True, {}),
             ('ViTModel', {}, False, dict(add_pooling_layer=False)))
    for i, (cls, config, pooled, load_kwargs) in enumerate(cases):
      with self.subTest(f'{cls} {config} {load_kwargs}'):
        theirs = self._model(cls, i, load_kwargs, **config)
        src, dst = self.path(f'src{i}'), self.path(f'dst{i}')
        theirs.save_pretrained(src)
        ref = self._run(theirs, images, pooled)
        ckpt = formats.read(src)
        ours = _apply(ckpt.get_model(), ckpt.params, images)
        self.assertLessEqual(_rel(ours, ref), TOLERANCE, 'transformers -> ours')
        formats.write(ckpt.params, dst, to_format='hf')
        back = self._load_back(cls, dst, **load_kwargs)
        self.assertLessEqual(_rel(self._run(back, images, pooled), ours),
                             TOLERANCE, 'ours -> transformers')

  def test_written_preprocessor_gives_our_input_scaling(self):
    """transformers' image processor reads preprocessor_config.json as [-1, 1]."""
    import transformers  # pylint: disable=g-import-not-at-top
    ckpt = formats.read(os.path.join(FIXTURES, 'hf_classifier'))
    formats.write(ckpt.params, self.path('out'), to_format='hf')
    processor = transformers.AutoImageProcessor.from_pretrained(self.path('out'))
    image = np.random.default_rng(4).integers(0, 256, (16, 16, 3), np.uint8)
    pixels = processor(images=image, return_tensors='np')['pixel_values'][0]
    np.testing.assert_allclose(pixels.transpose(1, 2, 0),
                               image / 127.5 - 1, atol=1e-6)

  def test_pytorch_model_bin(self):
    import torch  # pylint: disable=g-import-not-at-top
    src = self.path('bin')
    shutil.copytree(os.path.join(FIXTURES, 'hf_classifier'), src)
    state = safetensors.numpy.load_file(os.path.join(src, 'model.safetensors'))
    os.remove(os.path.join(src, 'model.safetensors'))
    torch.save({k: torch.from_numpy(v) for k, v in state.items()},
               os.path.join(src, 'pytorch_model.bin'))
    ref = _reference()
    for path in (src, os.path.join(src, 'pytorch_model.bin')):
      ckpt = formats.read(path)
      self.assertEqual(ckpt.format, 'hf')
      self.assertLessEqual(_rel(_apply(ckpt.get_model(), ckpt.params,
                                       ref['images']), ref['hf_classifier']),
                           TOLERANCE)

  def test_exact_gelu_and_default_epsilon_match(self):
    images = np.random.default_rng(2).uniform(-1, 1, (2, 24, 24, 3)).astype(
        np.float32)
    theirs = self._model('ViTForImageClassification', 5, num_labels=4,
                         hidden_act='gelu', layer_norm_eps=1e-12)
    theirs.save_pretrained(self.path('src'))
    ckpt = formats.read(self.path('src'))
    err = _rel(_apply(ckpt.get_model(), ckpt.params, images),
               self._run(theirs, images))
    self.assertLessEqual(err, TOLERANCE)


@absltest.skipIf(bool(_missing('torch', 'timm')), _missing('torch', 'timm'))
class TimmLibraryTest(_LibraryTest):
  """Fresh random timm ViTs (plain, gap, hybrid), both directions, in timm itself."""

  def _perturbed(self, model):
    import torch  # pylint: disable=g-import-not-at-top
    torch.manual_seed(0)
    with torch.no_grad():
      for p in model.parameters():
        p.add_(0.1 * torch.randn(p.shape))
    return model.eval()

  def _run(self, model, images):
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      return model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()

  def test_both_directions_safetensors_and_pth(self):
    import functools  # pylint: disable=g-import-not-at-top
    import safetensors.torch  # pylint: disable=g-import-not-at-top
    import timm  # pylint: disable=g-import-not-at-top
    from timm.layers import HybridEmbed  # pylint: disable=g-import-not-at-top
    from timm.layers import StdConv2dSame  # pylint: disable=g-import-not-at-top
    from timm.models.resnetv2 import ResNetV2  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    # timm's default activation (exact GELU), which reading a timm file assumes.
    common = dict(img_size=32, embed_dim=24, depth=2, num_heads=3, num_classes=6)
    backbone = ResNetV2(layers=(1, 1), num_classes=0, global_pool='',
                        preact=False, stem_type='same', width_factor=0.5,
                        conv_layer=functools.partial(StdConv2dSame, eps=1e-8))
    builders = {
        'vit': lambda: timm.models.vision_transformer.VisionTransformer(
            patch_size=8, **common),
        'gap': lambda: timm.models.vision_transformer.VisionTransformer(
            patch_size=8, class_token=False, global_pool='avg', fc_norm=False,
            **common),
        'fc_norm': lambda: timm.models.vision_transformer.VisionTransformer(
            patch_size=8, class_token=False, global_pool='avg', fc_norm=True,
            **common),
        'hybrid': lambda: timm.models.vision_transformer.VisionTransformer(
            patch_size=1, embed_layer=functools.partial(HybridEmbed,
                                                        backbone=backbone),
            **common),
    }
    images = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype(
        np.float32)
    for name, build in builders.items():
      for ext in ('.safetensors', '.pth'):
        with self.subTest(name + ext):
          theirs = self._perturbed(build())
          src = self.path(f'{name}{ext}')
          if ext == '.pth':
            torch.save(theirs.state_dict(), src)
          else:
            safetensors.torch.save_file(theirs.state_dict(), src)
          ref = self._run(theirs, images)
          ckpt = formats.read(src, num_heads=3)
          ours = _apply(ckpt.get_model(), ckpt.params, images)
          self.assertLessEqual(_rel(ours, ref), TOLERANCE, 'timm -> ours')
          dst = self.path(f'back_{name}{ext}')
          formats.write(ckpt.params, dst)
          back = build().eval()
          state = (torch.load(dst, weights_only=True) if ext == '.pth' else
                   safetensors.torch.load_file(dst))
          back.load_state_dict(state, strict=True)
          self.assertLessEqual(_rel(self._run(back, images), ours), TOLERANCE,
                               'ours -> timm')

  def test_training_checkpoint_wrappers(self):
    """{'model': state_dict, 'epoch': N} and DistributedDataParallel's 'module.' names."""
    import safetensors.torch  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    state = safetensors.torch.load_file(
        os.path.join(FIXTURES, 'timm_vit.safetensors'))
    path = self.path('train.pth')
    torch.save({'model': {'module.' + k: v for k, v in state.items()},
                'epoch': 3}, path)
    ckpt = formats.read(path, num_heads=2)
    ref = _reference()
    self.assertLessEqual(_rel(_apply(ckpt.get_model(), ckpt.params,
                                     ref['images']), ref['timm_vit']), TOLERANCE)

  def test_named_timm_model_gives_the_heads(self):
    import safetensors.torch  # pylint: disable=g-import-not-at-top
    import timm  # pylint: disable=g-import-not-at-top
    theirs = timm.create_model('vit_tiny_patch16_224', pretrained=False,
                               num_classes=4, depth=1)
    safetensors.torch.save_file(theirs.state_dict(), self.path('ti.safetensors'))
    # depth=1 fits no preset, so the preset name is refused but heads given work.
    with self.assertRaisesRegex(ValueError, "does not fit model 'ViT-Ti_16'"):
      formats.read(self.path('ti.safetensors'), model='vit_tiny_patch16_224')
    ckpt = formats.read(self.path('ti.safetensors'), num_heads=3)
    self.assertEqual(ckpt.overrides['num_layers'], 1)


if __name__ == '__main__':
  absltest.main()
