r"""Converts checkpoints between the published .npz layout, timm and Hugging Face transformers.

  python -m vit_jax.convert --from=vit-hf/ --to=ViT-B_16.npz
  python -m vit_jax.convert --from=ViT-B_16.npz --to=vit_b16.safetensors
  python -m vit_jax.convert --from=vit_b16.safetensors --to=vit-hf/ --model=ViT-B_16

Formats are read off the paths: `.npz` (ours), `.safetensors` / `.pth` / `.bin`
(timm state dict; transformers weights when their keys are transformers'), a
directory with `config.json` (transformers ViT, ViTMAE, DeiT, DINOv2 (with
registers), CLIP and SigLIP vision models); --to_format=npz|timm|hf where the
output path does not say. timm state dicts do not record the number of heads,
the activation or the LayerNorm epsilon: name the model (--model=ViT-B_16,
--model=vit_small_patch14_dinov2, --model=vit_base_patch16_siglip_224) or pass
--num_heads (and --activation / --layer_norm_epsilon where they are not timm's
defaults, exact GELU and 1e-6).
"""
import os
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax.inference import load
from vit_jax.models import formats

FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_string('from', None, 'Checkpoint to read (.npz, .safetensors, '
                      '.pth/.bin, a transformers directory or a vit_jax work '
                      'directory).', required=True)
  flags.DEFINE_string('to', None, 'Path to write; its format is read off the '
                      'name (a directory path: transformers).', required=True)
  flags.DEFINE_enum('to_format', None, list(formats.FORMATS),
                    'Output format where the --to path does not say.')
  flags.DEFINE_string('model', None, 'vit_jax preset or timm model name the '
                      'checkpoint is (checked; needed for timm state dicts).')
  flags.DEFINE_integer('num_heads', None, 'Attention heads of a timm state dict '
                       'whose size has no preset.')
  flags.DEFINE_bool('drop_head', False, 'Leave the classification head out (and, '
                    'for timm, the pre-logits layer it does not have).')
  flags.DEFINE_enum('activation', None, ['gelu', 'gelu_tanh', 'quick_gelu'],
                    'MLP activation of a timm state dict (default timm\'s: exact gelu, '
                    'or what --model implies).')
  flags.DEFINE_float('layer_norm_epsilon', None, 'LayerNorm epsilon of a timm state '
                     'dict (default 1e-6; CLIP 1e-5, or what --model implies).')
  flags.DEFINE_bool('accept_exact_gelu', False, 'Deprecated, does nothing: exact GELU '
                    '(hidden_act=gelu) is now read as exact GELU.')


def main(argv: Sequence[str]) -> None:
  """Converts --from into --to and prints one line saying what was written."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  options = {k: FLAGS[k].value for k in ('activation', 'layer_norm_epsilon')
             if FLAGS[k].value is not None}
  ckpt, fmt = formats.convert(
      load.resolve_checkpoint(FLAGS['from'].value), os.path.expanduser(FLAGS.to),
      model=FLAGS.model, num_heads=FLAGS.num_heads,
      to_format=FLAGS.to_format, drop_head=FLAGS.drop_head, options=options)
  custom = ' with overrides' if set(ckpt.overrides) - {
      'num_classes', 'representation_size'} else ''
  print(f'{ckpt.path} ({ckpt.format}, {ckpt.model_name}{custom}, '
        f'{ckpt.overrides.get("num_classes") or "no"} classes) -> {FLAGS.to} '
        f'({fmt})')


def run() -> None:
  """Console entry point of `python -m vit_jax.convert`."""
  errors.run_command('vit_jax.convert', _define_flags, main, (ValueError, OSError))

