"""`python -m vit_jax.convert`; its usage (--help) is vit_jax/convert.py's docstring."""
import os
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax.inference import load
from vit_jax.models import formats
from vit_jax.models import naming

FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_string('from', None, 'Checkpoint to read (.npz, .safetensors, '
                      '.pth/.bin, a transformers directory, a vit_jax work '
                      'directory or hf-hub:ORG/NAME[@REVISION]).', required=True)
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
  name = naming.label(ckpt.get_model(), ckpt.model_name)
  print(f'{ckpt.path} ({ckpt.format}, {name}, '
        f'{ckpt.overrides.get("num_classes") or "no"} classes) -> {FLAGS.to} '
        f'({fmt})')


def run() -> None:
  """Console entry point of `python -m vit_jax.convert`."""
  errors.run_command('vit_jax.convert', _define_flags, main, (ValueError, OSError))

