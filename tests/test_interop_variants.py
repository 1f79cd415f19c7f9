"""Tests for the ViT variants' checkpoints: timm / transformers families in and out, and their refusals.

The fixtures (tests/testdata/interop, tools/make_interop_fixtures.py) are tiny
perturbed DINOv2 (+registers, SwiGLU), CLIP, SigLIP, DeiT (distilled), DeiT-III,
MAE and qk-norm models saved by timm and transformers with those libraries'
own activations and epsilons, and their logits or pooled features; read here
without torch. Checkpoints of families vit_jax cannot hold yet are refused in
one line that names the feature (no "not a ViT" or "inconsistent" guesses),
nothing written.
"""
import importlib.util
import json
import os

from absl.testing import absltest
import jax
import numpy as np
import safetensors.numpy

from tests import test_checkpoint
from tests import test_interop
from vit_jax.models import formats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
TOLERANCE = 1e-4


_flat = test_interop._flat  # pylint: disable=protected-access


class VariantParityTest(test_checkpoint.CheckpointTestCase):
  """Every variant fixture gives its library's output; written back, it reads back the same."""

  def test_every_family_matches_its_library_and_round_trips(self):
    with open(os.path.join(FIXTURES, 'variants.json')) as f:
      manifest = json.load(f)
    with np.load(os.path.join(FIXTURES, 'reference_logits.npz')) as f:
      refs = dict(f)
    images = refs['variant_images']
    errors = {}
    for name, how in sorted(manifest.items()):
      with self.subTest(name):
        src = os.path.join(FIXTURES, how['path'])
        ckpt = formats.read(src, num_heads=how.get('num_heads'), options=how.get('options'))
        # ViTMAEModel has no head or pooler: its features are the mean patch token.
        model = ckpt.get_model(num_classes=0) if how.get('output') == 'mae' else (
            ckpt.get_model())
        ours = np.asarray(jax.jit(lambda p, x, m=model: m.apply({'params': p}, x))(
            ckpt.params, images))
        ref = refs[name]
        self.assertEqual(ours.shape, ref.shape)
        errors[name] = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
        self.assertLessEqual(errors[name], TOLERANCE, name)
        # Back into the file's own format (and .npz): the same tree comes back.
        fmt = ckpt.format
        back = os.path.join(self.dir, name + ('.safetensors' if fmt == 'timm' else ''))
        if name not in ('hf_vit_mae', 'hf_deit'):  # written as ViTModel / DeiT WithTeacher
          formats.write(ckpt.params, back, to_format=fmt, options=ckpt.overrides)
          again = formats.read(back, num_heads=how.get('num_heads'),
                               options=how.get('options'))
          a, b = _flat(ckpt.params), _flat(again.params)
          self.assertEqual(sorted(a), sorted(b), name)
          for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f'{name} {key}')
          self.assertEqual(again.overrides, ckpt.overrides, name)
    print('relative errors:', {k: f'{v:.1e}' for k, v in errors.items()})


def _installed(*names: str) -> bool:
  try:
    return all(importlib.util.find_spec(n) is not None for n in names)
  except (ImportError, ValueError):
    return False


def _perturb(model, seed: int):
  import torch  # pylint: disable=g-import-not-at-top
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn(p.shape, generator=gen))
  return model.eval()


def _rel(ours, ref) -> float:
  return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


_IMAGES = np.random.default_rng(4).uniform(-1, 1, (2, 28, 28, 3)).astype(np.float32)


def _ours(ckpt, **overrides) -> np.ndarray:
  model = ckpt.get_model(**overrides)
  return np.asarray(model.apply({'params': ckpt.params}, _IMAGES))


def _pixels():
  import torch  # pylint: disable=g-import-not-at-top
  return torch.from_numpy(_IMAGES.transpose(0, 3, 1, 2).copy())


@absltest.skipUnless(_installed('torch', 'timm'), 'needs torch and timm (.[interop])')
class TimmVariantsLibraryTest(test_checkpoint.CheckpointTestCase):
  """Fresh perturbed timm variants: timm -> ours -> timm, logits equal both ways."""

  def test_every_variant_both_directions(self):
    import functools  # pylint: disable=g-import-not-at-top
    import safetensors.torch  # pylint: disable=g-import-not-at-top
    import timm.models.deit as deit  # pylint: disable=g-import-not-at-top
    import timm.models.vision_transformer as vt  # pylint: disable=g-import-not-at-top
    from timm.layers import SwiGLUPacked  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    common = dict(img_size=28, patch_size=7, embed_dim=32, depth=2, num_heads=2,
                  mlp_ratio=2, num_classes=5)
    eps5 = functools.partial(torch.nn.LayerNorm, eps=1e-5)
    cases = {  # name: (class, kwargs, read options)
        'dinov2_reg4': (vt.VisionTransformer, dict(init_values=1e-5, reg_tokens=4,
                                                   no_embed_class=True), {}),
        'clip': (vt.VisionTransformer, dict(pre_norm=True, norm_layer=eps5,
                                            act_layer='quick_gelu'),
                 {'activation': 'quick_gelu', 'layer_norm_epsilon': 1e-5}),
        'siglip': (vt.VisionTransformer, dict(class_token=False, global_pool='map',
                                              act_layer='gelu_tanh'),
                   {'activation': 'gelu_tanh'}),
        'deit_distilled': (deit.VisionTransformerDistilled, {}, {}),
        'deit3': (vt.VisionTransformer, dict(init_values=1e-6, no_embed_class=True), {}),
        'mae': (vt.VisionTransformer, dict(global_pool='avg', fc_norm=True), {}),
        'qk_norm_swiglu': (vt.VisionTransformer, dict(
            qk_norm=True, qkv_bias=False, mlp_layer=SwiGLUPacked,
            act_layer=torch.nn.SiLU), {}),
    }
    for seed, (name, (cls, kwargs, options)) in enumerate(cases.items()):
      with self.subTest(name):
        theirs = _perturb(cls(**common, **kwargs), seed)
        with torch.no_grad():
          ref = theirs(_pixels())
          ref = (ref[0] + ref[1]) / 2 if isinstance(ref, tuple) else ref
          ref = ref.numpy()
        src = self.path(f'{name}.safetensors')
        safetensors.torch.save_file(theirs.state_dict(), src)
        ckpt = formats.read(src, num_heads=2, options=options)
        ours = _ours(ckpt)
        self.assertLessEqual(_rel(ours, ref), 1e-4, f'{name}: timm -> ours')
        dst = self.path(f'back_{name}.safetensors')
        formats.write(ckpt.params, dst)
        back = cls(**common, **kwargs).eval()
        back.load_state_dict(safetensors.torch.load_file(dst), strict=True)
        with torch.no_grad():
          again = back(_pixels())
        again = (again[0] + again[1]) / 2 if isinstance(again, tuple) else again
        self.assertLessEqual(_rel(again.numpy(), ours), 1e-4, f'{name}: ours -> timm')


@absltest.skipUnless(_installed('torch', 'transformers'),
                     'needs torch and transformers (.[interop])')
class TransformersVariantsLibraryTest(test_checkpoint.CheckpointTestCase):
  """Fresh perturbed transformers models: theirs -> ours -> theirs, outputs equal."""

  def test_every_model_type_both_directions(self):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers as t  # pylint: disable=g-import-not-at-top
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 image_size=28, patch_size=7)
    mlp = dict(intermediate_size=64)
    cases = {  # name: (class, config, output)
        'vit_exact_gelu': ('ViTForImageClassification',
                           t.ViTConfig(**small, **mlp, num_labels=5), 'logits'),
        'vit_mae': ('ViTMAEModel', t.ViTMAEConfig(**small, **mlp, mask_ratio=0.0), 'mae'),
        'deit': ('DeiTForImageClassification',
                 t.DeiTConfig(**small, **mlp, num_labels=5), 'logits'),
        'deit_teacher': ('DeiTForImageClassificationWithTeacher',
                         t.DeiTConfig(**small, **mlp, num_labels=5), 'logits'),
        'dinov2_swiglu': ('Dinov2Model', t.Dinov2Config(**small, mlp_ratio=4,
                                                        use_swiglu_ffn=True), 'pooler'),
        'dinov2_reg': ('Dinov2WithRegistersModel', t.Dinov2WithRegistersConfig(
            **small, mlp_ratio=2, num_register_tokens=2), 'pooler'),
        'clip_projection': ('CLIPVisionModelWithProjection', t.CLIPVisionConfig(
            **small, **mlp, projection_dim=8), 'image_embeds'),
        'siglip': ('SiglipVisionModel', t.SiglipVisionConfig(**small, **mlp), 'pooler'),
    }

    def run(model, output):
      with torch.no_grad():
        if output == 'mae':
          noise = torch.arange(16, dtype=torch.float32)[None].repeat(2, 1)
          return model(pixel_values=_pixels(), noise=noise).last_hidden_state[
              :, 1:].mean(1).numpy()
        return getattr(model(pixel_values=_pixels()),
                       {'pooler': 'pooler_output'}.get(output, output)).numpy()

    for seed, (name, (cls, config, output)) in enumerate(cases.items()):
      with self.subTest(name):
        theirs = _perturb(getattr(t, cls)(config), seed)
        ref = run(theirs, output)
        theirs.save_pretrained(self.path(name))
        ckpt = formats.read(self.path(name))
        ours = _ours(ckpt, **({'num_classes': 0} if output == 'mae' else {}))
        self.assertLessEqual(_rel(ours, ref), 1e-4, f'{name}: transformers -> ours')
        if name in ('vit_mae', 'deit'):  # written as other classes; read-only here
          continue
        formats.write(ckpt.params, self.path(f'back_{name}'), to_format='hf',
                      options=ckpt.overrides)
        with open(self.path(f'back_{name}/config.json')) as f:
          written = json.load(f)['architectures'][0]
        self.assertEqual(written, cls)
        back = getattr(t, cls).from_pretrained(self.path(f'back_{name}')).eval()
        self.assertLessEqual(_rel(run(back, output), ours), 1e-4,
                             f'{name}: ours -> transformers')


class BadInputTest(test_checkpoint.CheckpointTestCase):
  """BEiT / EVA02 files, inexpressible variants, wrong models: one line naming the feature."""

  def _timm_state(self) -> dict:
    return dict(safetensors.numpy.load_file(
        os.path.join(FIXTURES, 'timm_vit.safetensors')))

  def _save(self, name: str, state: dict) -> str:
    src = os.path.join(self.dir, 'in', name)
    os.makedirs(os.path.dirname(src), exist_ok=True)
    safetensors.numpy.save_file(state, src)
    return src

  def _refused(self, src: str, regex: str, **kwargs) -> None:
    out = self.path('out.npz')
    kwargs = {'num_heads': None if 'model' in kwargs else 2, **kwargs}
    self.assertOneLineError(ValueError, regex, formats.convert, src, out, **kwargs)
    self.assertFalse(os.path.exists(out), 'something was written')

  def test_beit_eva02_and_hf_beit_name_the_feature(self):
    state = self._timm_state()
    width = state['pos_embed'].shape[-1]
    # BEiT: no absolute position embedding, q/v biases, a relative bias table per block.
    beit = {k: v for k, v in state.items() if k != 'pos_embed'}
    for i in range(2):
      beit[f'blocks.{i}.attn.relative_position_bias_table'] = np.ones((12, 2), np.float32)
    self._refused(self._save('beit.safetensors', beit), r'relative position bias \(BEiT\)')
    # EVA02: separate q/k/v projections and a SwiGLU MLP with a norm inside.
    eva = dict(state)
    for i in range(2):
      b = f'blocks.{i}.'
      qkv = eva.pop(b + 'attn.qkv.weight')
      eva.pop(b + 'attn.qkv.bias')
      for j, n in enumerate('qkv'):
        eva[f'{b}attn.{n}_proj.weight'] = qkv[j * width:(j + 1) * width]
      fc1 = eva.pop(b + 'mlp.fc1.weight')
      eva[b + 'mlp.fc1_g.weight'] = eva[b + 'mlp.fc1_x.weight'] = fc1
      eva[b + 'mlp.norm.weight'] = np.ones(fc1.shape[0], np.float32)
    self._refused(self._save('eva.safetensors', eva),
                  r'2D rotary position embedding \(RoPE\) and SwiGLU.*EVA02')
    # transformers BEiT.
    hf_dir = os.path.join(self.dir, 'in', 'hf_beit')
    os.makedirs(hf_dir)
    with open(os.path.join(FIXTURES, 'hf_backbone', 'config.json')) as f:
      config = {**json.load(f), 'model_type': 'beit'}
    with open(os.path.join(hf_dir, 'config.json'), 'w') as f:
      json.dump(config, f)
    safetensors.numpy.save_file(
        dict(safetensors.numpy.load_file(
            os.path.join(FIXTURES, 'hf_backbone', 'model.safetensors'))),
        os.path.join(hf_dir, 'model.safetensors'))
    self._refused(hf_dir, r"'beit' model with relative position bias")

  def test_variants_a_format_cannot_express_mismatched_models_and_unknown_options(self):
    deit = formats.read(os.path.join(FIXTURES, 'timm_deit_distilled.safetensors'),
                        num_heads=2).params
    qk = formats.read(os.path.join(FIXTURES, 'timm_qk_norm.safetensors')).params
    reg = formats.read(os.path.join(FIXTURES, 'timm_dinov2_reg4.safetensors'),
                       num_heads=2).params
    width = reg['cls'].shape[-1]
    both = dict(deit, registers=reg['registers'])
    cases = (
        (both, 'x.safetensors', {}, r'distillation token and register tokens'),
        (deit, 'hf', {'drop_head': True}, r'distilled but has no heads.*DeiTModel'),
        (qk, 'hf', {}, r'query/key normalisation \(qk_norm\).*timm format'),
        (dict(reg, head={'kernel': np.zeros((width, 3), np.float32),
                         'bias': np.zeros(3, np.float32)}), 'hf', {},
         r'DINOv2-like with a head.*--drop_head'),
    )
    for params, name, kwargs, regex in cases:
      with self.subTest(regex):
        out = self.path(name)
        self.assertOneLineError(ValueError, regex, formats.write, params, out,
                                to_format='hf' if name == 'hf' else None, **kwargs)
        self.assertFalse(os.path.exists(out), 'something was written')
    src = os.path.join(FIXTURES, 'timm_dinov2.safetensors')
    self._refused(src, r"does not fit model 'vit_small_patch14_dinov2': width 32 != 384",
                  model='vit_small_patch14_dinov2')
    self._refused(src, r"Unknown checkpoint option 'activaton'",
                  options={'activaton': 'gelu'})
    # The timm name gives heads, activation and epsilon the state dict lacks.
    clip = formats.read(os.path.join(FIXTURES, 'timm_clip_quickgelu.safetensors'),
                        num_heads=2, options={'activation': 'quick_gelu'})
    self.assertEqual(clip.overrides['activation'], 'quick_gelu')
    self.assertEqual(clip.overrides['layer_norm_epsilon'], 1e-6)  # not named: timm's


if __name__ == '__main__':
  absltest.main()
