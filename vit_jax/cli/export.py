"""`python -m vit_jax.export`; its usage (--help) is vit_jax/export.py's docstring."""
import os
import tempfile
from typing import Any, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from vit_jax import errors
from vit_jax import rundir
from vit_jax import serving
from vit_jax.cli import common
from vit_jax.inference import labels as labels_lib
from vit_jax.inference import load
from vit_jax.inference import model_card
from vit_jax.models import families
from vit_jax.models import naming
from vit_jax.models.formats import hub

FLAGS = flags.FLAGS


def workdir_pp(checkpoint_path: str) -> Optional[dict[str, Any]]:
  """config.pp of the vit_jax workdir holding the checkpoint, if it is one."""
  directory = (checkpoint_path if os.path.isdir(checkpoint_path) else
               os.path.dirname(os.path.abspath(checkpoint_path)))
  config = rundir.read_config(directory) or {}
  pp = config.get('pp')
  return pp if isinstance(pp, dict) else None  # a transformers config has none


def _run_record(checkpoint: str) -> tuple[Optional[dict[str, Any]], list[dict]]:
  """(config.json, metrics.jsonl records) of the vit_jax work directory holding the checkpoint."""
  if workdir_pp(checkpoint) is None:
    return None, []  # not a vit_jax run (a timm or transformers checkpoint)
  workdir = os.path.dirname(os.path.abspath(checkpoint))
  has_metrics = os.path.isfile(os.path.join(workdir, rundir.METRICS_FILE))
  return load.workdir_config(checkpoint), rundir.read_metrics(workdir) if has_metrics else []


def _label_names(config: Optional[dict[str, Any]], num_classes: int) -> Optional[list[str]]:
  """The run's class names for config.json's id2label, where its dataset gives one per output."""
  if not config or not num_classes or not config.get('dataset'):
    return None
  try:
    names = labels_lib.load_label_names(str(config['dataset']), config.get('data_dir'))
  except (ValueError, OSError, RuntimeError) as e:
    logging.warning('No class names for id2label (%s); writing LABEL_i.', e)
    return None
  return names if len(names) == num_classes else None


def write_hub(checkpoint: str, loaded: load.LoadedModel) -> None:
  """Writes the --hub_dir folder (a temporary one for --push_to_hub alone) and uploads it."""
  config, records = _run_record(checkpoint)
  repo_id = FLAGS.push_to_hub or os.path.basename(os.path.abspath(FLAGS.hub_dir))
  card = model_card.card(repo_id, naming.label(loaded.model, loaded.name), loaded.resolution,
                         loaded.num_classes, config, records)
  fields = families.fields(loaded.model)
  options = {k: fields[k] for k in ('activation', 'layer_norm_epsilon') if k in fields}
  with tempfile.TemporaryDirectory(prefix='vit_jax-hub-') as scratch:
    folder = FLAGS.hub_dir or os.path.join(scratch, 'repo')
    hub.write_folder(loaded.params, folder, card=card, options=options,
                     label_names=_label_names(config, loaded.num_classes))
    if FLAGS.hub_dir:
      print(f'Wrote {folder} (transformers repository with README.md model card). Load it: '
            f"transformers from_pretrained('{folder}'), or --checkpoint={folder}.")
    if FLAGS.push_to_hub:
      url = hub.push(folder, FLAGS.push_to_hub, private=FLAGS.hub_private)
      print(f'Pushed {url}. Load it: --checkpoint=hf-hub:{FLAGS.push_to_hub}.')


def main(argv: Sequence[str]) -> None:
  """Loads the checkpoint, exports it and prints how to run (or load) what was written."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  # The flags were checked before TensorFlow loaded (vit_jax/export.py: early.check_export).
  checkpoint = load.resolve_checkpoint(FLAGS.checkpoint)
  # float32 whatever the training config said: 'auto' is bf16 + cuDNN on a GPU,
  # which would tie the artifact to that GPU and change its numbers.
  loaded = load.load_model(FLAGS.model, checkpoint, FLAGS.resolution,
                           FLAGS.num_heads, dtype='float32')
  if FLAGS.format:
    usage = serving.export(loaded.model, loaded.params, loaded.resolution,
                           FLAGS.format, FLAGS.output,
                           pp=workdir_pp(checkpoint))
    name = naming.label(loaded.model, loaded.name)
    print(f'Wrote {FLAGS.output} ({FLAGS.format}, {name}, '
          f'{loaded.resolution}px, {loaded.num_classes} classes). Run: {usage}')
  if FLAGS.hub_dir or FLAGS.push_to_hub:
    write_hub(checkpoint, loaded)


def run() -> None:
  """Console entry point of `python -m vit_jax.export`."""
  errors.run_command('vit_jax.export', common.define_export_flags, main, (ValueError, OSError))
