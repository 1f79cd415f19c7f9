"""`python -m vit_jax.export`; its usage (--help) is vit_jax/export.py's docstring."""
import os
from typing import Any, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax import fileio
from vit_jax import rundir
from vit_jax import serving
from vit_jax.cli import common
from vit_jax.inference import load
from vit_jax.models import naming

FLAGS = flags.FLAGS


def workdir_pp(checkpoint_path: str) -> Optional[dict[str, Any]]:
  """config.pp of the vit_jax workdir holding the checkpoint, if it is one."""
  directory = (checkpoint_path if os.path.isdir(checkpoint_path) else
               os.path.dirname(os.path.abspath(checkpoint_path)))
  config = rundir.read_config(directory) or {}
  pp = config.get('pp')
  return pp if isinstance(pp, dict) else None  # a transformers config has none


def main(argv: Sequence[str]) -> None:
  """Loads the checkpoint, exports it and prints how to run the artifact."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  checkpoint = load.resolve_checkpoint(FLAGS.checkpoint)
  # Before the (possibly large) checkpoint is read and the model lowered.
  fileio.check_output(FLAGS.output, '--output', [('--checkpoint', checkpoint)])
  # float32 whatever the training config said: 'auto' is bf16 + cuDNN on a GPU,
  # which would tie the artifact to that GPU and change its numbers.
  loaded = load.load_model(FLAGS.model, checkpoint, FLAGS.resolution,
                           FLAGS.num_heads, dtype='float32')
  usage = serving.export(loaded.model, loaded.params, loaded.resolution,
                         FLAGS.format, FLAGS.output,
                         pp=workdir_pp(checkpoint))
  name = naming.label(loaded.model, loaded.name)
  print(f'Wrote {FLAGS.output} ({FLAGS.format}, {name}, '
        f'{loaded.resolution}px, {loaded.num_classes} classes). Run: {usage}')


def run() -> None:
  """Console entry point of `python -m vit_jax.export`."""
  errors.run_command('vit_jax.export', common.define_export_flags, main, (ValueError, OSError))

