r"""Writes the tiny timm / transformers checkpoints and reference logits tests/test_interop.py reads.

  python tools/make_interop_fixtures.py [--out=tests/testdata/interop]

Every model is built with random weights (then every parameter perturbed, so
no zero bias or unit scale hides a layout bug) and saved with its own
library's save function; the logits are those libraries' outputs in fp32 on
CPU for the images stored beside them. The tests then need neither torch,
timm nor transformers. Needs torch, timm, transformers and safetensors.
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


def _perturb(model, seed: int) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn(p.shape, generator=gen))


def _timm_vit(**kwargs):
  import timm.models.vision_transformer as vt  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  args = dict(img_size=IMAGE, patch_size=PATCH, embed_dim=WIDTH, depth=LAYERS,
              num_heads=HEADS, mlp_ratio=MLP / WIDTH, num_classes=CLASSES,
              act_layer=functools.partial(torch.nn.GELU, approximate='tanh'))
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
      intermediate_size=MLP, image_size=IMAGE, patch_size=PATCH,
      hidden_act='gelu_pytorch_tanh', **kwargs)
  return getattr(transformers, cls)(config).eval()


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
