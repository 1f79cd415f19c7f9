r"""Writes the tiny timm / transformers checkpoints and reference logits tests/test_interop.py reads.

  python tools/make_interop_fixtures.py [--out=tests/testdata/interop]

Every model is built with random weights (then every parameter perturbed, so
no zero bias, unit scale, 1e-6 layer scale or zero head hides a layout bug),
with its library's own default activation and LayerNorm epsilon, and saved
with its own library's save function; the logits (or pooled features of
headless towers) are those libraries' outputs in fp32 on CPU for the images
stored beside them. `variants.json` says how to read each variant file (heads
and options a timm state dict lacks, which output it holds). The tests then
need neither torch, timm nor transformers. Needs torch, timm, transformers and
safetensors.
"""
import functools
import json
import os
import shutil

from absl import app
from absl import flags
import numpy as np

_OUT = flags.DEFINE_string(
    'out', os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), 'tests', 'testdata', 'interop'), 'Output directory.')

# The tiny architecture: 16x16 images, 4x4 patches, width 16, 2 heads, 2 layers.
IMAGE, PATCH, WIDTH, HEADS, MLP, LAYERS, CLASSES = 16, 4, 16, 2, 32, 2, 5
# The variant families: 28x28 images, 7x7 patches, width 32, MLP 32, stored as
# float16 (the weights are rounded to it before the references are computed).
V_IMAGE, V_PATCH, V_WIDTH, V_MLP = 28, 7, 32, 32


def _perturb(model, seed: int) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn(p.shape, generator=gen))


def _timm_vit(**kwargs):
  import timm.models.vision_transformer as vt  # pylint: disable=g-import-not-at-top
  args = dict(img_size=IMAGE, patch_size=PATCH, embed_dim=WIDTH, depth=LAYERS,
              num_heads=HEADS, mlp_ratio=MLP / WIDTH, num_classes=CLASSES)
  args.update(kwargs)
  return vt.VisionTransformer(**args).eval()


def _timm_hybrid():
  """A one-unit BiT stem+stage hybrid laid out as timm's vit_*_r50_* models."""
  from timm.layers import HybridEmbed  # pylint: disable=g-import-not-at-top
  from timm.layers import StdConv2dSame  # pylint: disable=g-import-not-at-top
  from timm.models.resnetv2 import ResNetV2  # pylint: disable=g-import-not-at-top
  backbone = ResNetV2(layers=(1,), num_classes=0, global_pool='', preact=False,
                      stem_type='same', width_factor=0.5,
                      conv_layer=functools.partial(StdConv2dSame, eps=1e-8))
  return _timm_vit(patch_size=1, depth=1,
                   embed_layer=functools.partial(HybridEmbed, backbone=backbone))


def _hf(cls, **kwargs):
  import transformers  # pylint: disable=g-import-not-at-top
  config = transformers.ViTConfig(
      hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
      intermediate_size=MLP, image_size=IMAGE, patch_size=PATCH, **kwargs)
  return getattr(transformers, cls)(config).eval()


def _timm_variants() -> dict:
  """name -> (timm model, how to read it: num_heads / model and options)."""
  import timm.models.deit as deit  # pylint: disable=g-import-not-at-top
  import timm.models.vision_transformer as vt  # pylint: disable=g-import-not-at-top
  from timm.layers import SwiGLUPacked  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  common = dict(img_size=V_IMAGE, patch_size=V_PATCH, embed_dim=V_WIDTH, depth=LAYERS,
                num_heads=HEADS, mlp_ratio=V_MLP / V_WIDTH, num_classes=CLASSES)
  build = lambda cls=vt.VisionTransformer, **kw: cls(**{**common, **kw}).eval()  # noqa: E731
  eps5 = functools.partial(torch.nn.LayerNorm, eps=1e-5)
  return {
      'timm_dinov2': (build(init_values=1e-5, num_classes=0),
                      {'num_heads': HEADS}),
      'timm_dinov2_reg4': (build(init_values=1e-5, reg_tokens=4,
                                 no_embed_class=True, num_classes=0), {'num_heads': HEADS}),
      'timm_dinov2_swiglu': (build(init_values=1e-5, num_classes=0,
                                   mlp_layer=SwiGLUPacked, act_layer=torch.nn.SiLU,
                                   mlp_ratio=2 * V_MLP / V_WIDTH), {'num_heads': HEADS}),
      'timm_clip_quickgelu': (build(pre_norm=True, norm_layer=eps5, act_layer='quick_gelu',
                                    num_classes=0),
                              {'num_heads': HEADS, 'options': {
                                  'activation': 'quick_gelu', 'layer_norm_epsilon': 1e-5}}),
      'timm_clip': (build(pre_norm=True, norm_layer=eps5),
                    {'num_heads': HEADS, 'options': {'layer_norm_epsilon': 1e-5}}),
      'timm_siglip': (build(class_token=False, global_pool='map', act_layer='gelu_tanh',
                            num_classes=0),
                      {'num_heads': HEADS, 'options': {'activation': 'gelu_tanh'}}),
      'timm_deit_distilled': (build(deit.VisionTransformerDistilled), {'num_heads': HEADS}),
      'timm_deit3': (build(init_values=1e-6, no_embed_class=True), {'num_heads': HEADS}),
      'timm_mae_finetuned': (build(global_pool='avg', fc_norm=True), {'num_heads': HEADS}),
      'timm_qk_norm': (build(qk_norm=True, qkv_bias=False), {}),
  }


def _hf_variants() -> dict:
  """name -> (transformers model, what its reference output is)."""
  import transformers  # pylint: disable=g-import-not-at-top
  t = transformers
  small = dict(hidden_size=V_WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               image_size=V_IMAGE, patch_size=V_PATCH)
  mlp = dict(intermediate_size=V_MLP)
  dino = dict(small, mlp_ratio=V_MLP // V_WIDTH)
  return {
      'hf_vit_mae': (t.ViTMAEModel(t.ViTMAEConfig(**small, **mlp, mask_ratio=0.0)), 'mae'),
      'hf_deit': (t.DeiTForImageClassification(t.DeiTConfig(**small, **mlp,
                                                            num_labels=CLASSES)), 'logits'),
      'hf_deit_teacher': (t.DeiTForImageClassificationWithTeacher(
          t.DeiTConfig(**small, **mlp, num_labels=CLASSES)), 'logits'),
      'hf_dinov2': (t.Dinov2Model(t.Dinov2Config(**dino)), 'pooler'),
      'hf_dinov2_reg': (t.Dinov2WithRegistersModel(t.Dinov2WithRegistersConfig(
          **dino, num_register_tokens=2)), 'pooler'),
      'hf_clip': (t.CLIPVisionModel(t.CLIPVisionConfig(**small, **mlp)), 'pooler'),
      'hf_clip_projection': (t.CLIPVisionModelWithProjection(t.CLIPVisionConfig(
          **small, **mlp, projection_dim=8)), 'image_embeds'),
      'hf_siglip': (t.SiglipVisionModel(t.SiglipVisionConfig(**small, **mlp)), 'pooler'),
  }


def _round_to_half(model) -> None:
  """Rounds every parameter and buffer to float16 values, so the half file is exact."""
  import torch  # pylint: disable=g-import-not-at-top
  with torch.no_grad():
    for t in list(model.parameters()) + list(model.buffers()):
      if t.is_floating_point():
        t.copy_(t.half().float())


def _save_variants(out: str, refs: dict) -> None:
  """The variant families' fixtures, their reference outputs and variants.json."""
  import safetensors.torch  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  images = rng.uniform(-1, 1, (2, V_IMAGE, V_IMAGE, 3)).astype(np.float32)
  refs['variant_images'] = images
  pixels = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
  manifest = {}
  for seed, (name, (model, how)) in enumerate(_timm_variants().items(), 10):
    _perturb(model, seed)
    _round_to_half(model)
    safetensors.torch.save_file({k: v.half() for k, v in model.state_dict().items()},
                                os.path.join(out, f'{name}.safetensors'))
    with torch.no_grad():
      refs[name] = model(pixels).numpy()
    manifest[name] = {'path': f'{name}.safetensors', **how}
  grid = (V_IMAGE // V_PATCH) ** 2
  for seed, (name, (model, kind)) in enumerate(_hf_variants().items(), 30):
    model.eval()
    _perturb(model, seed)
    _round_to_half(model)
    with torch.no_grad():
      if kind == 'mae':  # no shuffling: the noise keeps the patch order
        noise = torch.arange(grid, dtype=torch.float32)[None].repeat(len(images), 1)
        hidden = model(pixel_values=pixels, noise=noise).last_hidden_state
        refs[name] = hidden[:, 1:].mean(1).numpy()  # ViTMAE features: mean patch token
      else:
        result = model(pixel_values=pixels)
        refs[name] = {'logits': lambda r: r.logits, 'pooler': lambda r: r.pooler_output,
                      'image_embeds': lambda r: r.image_embeds}[kind](result).numpy()
    model.half().save_pretrained(os.path.join(out, name))
    manifest[name] = {'path': name, 'output': kind}
  with open(os.path.join(out, 'variants.json'), 'w') as f:
    json.dump(manifest, f, indent=2, sort_keys=True)
    f.write('\n')


def main(argv):
  del argv
  import safetensors.torch  # pylint: disable=g-import-not-at-top
  import timm  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.manual_seed(0)
  out = _OUT.value
  if os.path.exists(out):
    shutil.rmtree(out)
  os.makedirs(out)
  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (2, IMAGE, IMAGE, 3)).astype(np.float32)
  # HF's ViTImageProcessor (mean = std = 0.5) maps pixels to exactly these.
  pixels = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
  refs = {'images': images}

  def save_timm(name, model, seed):
    _perturb(model, seed)
    safetensors.torch.save_file(model.state_dict(),
                                os.path.join(out, f'{name}.safetensors'))
    with torch.no_grad():
      refs[name] = model(pixels).numpy()

  save_timm('timm_vit', _timm_vit(), 1)
  save_timm('timm_gap', _timm_vit(class_token=False, global_pool='avg',
                                  fc_norm=False), 2)
  save_timm('timm_hybrid', _timm_hybrid(), 3)

  processor = transformers.ViTImageProcessor(size={'height': IMAGE,
                                                   'width': IMAGE})
  classifier = _hf('ViTForImageClassification', num_labels=CLASSES)
  _perturb(classifier, 4)
  classifier.save_pretrained(os.path.join(out, 'hf_classifier'))
  processor.save_pretrained(os.path.join(out, 'hf_classifier'))
  backbone = _hf('ViTModel')
  _perturb(backbone, 5)
  backbone.save_pretrained(os.path.join(out, 'hf_backbone'))
  with torch.no_grad():
    refs['hf_classifier'] = classifier(pixel_values=pixels).logits.numpy()
    refs['hf_backbone'] = backbone(pixel_values=pixels).pooler_output.numpy()

  _save_variants(out, refs)
  np.savez(os.path.join(out, 'reference_logits.npz'), **refs)
  versions = {'torch': torch.__version__, 'timm': timm.__version__,
              'transformers': transformers.__version__}
  with open(os.path.join(out, 'versions.json'), 'w') as f:
    json.dump(versions, f, indent=2, sort_keys=True)
    f.write('\n')
  total = sum(os.path.getsize(os.path.join(d, n))
              for d, _, names in os.walk(out) for n in names)
  print(f'Wrote {out} ({total / 1024:.0f} KiB) with {versions}')


if __name__ == '__main__':
  app.run(main)
