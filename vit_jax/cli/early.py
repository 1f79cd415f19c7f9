"""The checks of the TensorFlow commands' flags that need no TensorFlow, run before it loads.

The entry modules (vit_jax/evaluate.py, fewshot.py, analyze.py, export.py) pass these to
vit_jax.errors.check_early, so a wrong path, a missing --dataset or an unknown dataset name is
one line in about two seconds; the commands check the same again when they run. vit_jax/main.py
calls check_training, the trainer's own checks that need no devices or data.
"""
import sys
from typing import Any, Optional

from absl import flags
import ml_collections

from vit_jax import errors
from vit_jax import fileio
from vit_jax.cli import train_flags
from vit_jax.data import catalog
from vit_jax.data import real_labels
from vit_jax.inference import load
from vit_jax.models.formats import hub
from vit_jax.train import precheck


def _check_dataset_entries(entries) -> None:
  """Each 'name' or 'name|train_split|test_split' names a known dataset."""
  for entry in entries or ():
    catalog.check_name(entry.split('|')[0])


def evaluation_dataset(saved: Optional[dict[str, Any]], dataset: Optional[str]) -> str:
  """The dataset vit_jax.evaluate reads: --dataset, else the run's (config.json beside it)."""
  saved = saved if isinstance(saved, dict) and isinstance(saved.get('pp'), dict) else {}
  name = dataset or saved.get('dataset') or ''
  if not name:
    raise ValueError('--dataset is needed: the checkpoint is not the params.npz of a '
                     'vit_jax work directory, which would name its dataset.')
  return name


def check_evaluate(fv: flags.FlagValues) -> None:
  """vit_jax.evaluate: --batch, a dataset the flags or the work directory name, --real_labels."""
  if fv.batch < 0:
    raise ValueError(f'--batch={fv.batch} must be positive (0: 32 per device).')
  checkpoint = load.resolve_checkpoint(fv.checkpoint)
  _check_dataset_entries([evaluation_dataset(load.workdir_config(checkpoint), fv.dataset)])
  if fv.real_labels:
    real_labels.read(fv.real_labels)  # exists, JSON, label-id lists


def _check_hub_names(checkpoints) -> None:
  """Each hf-hub: name resolves (malformed, not cached offline, no such revision: one line)."""
  for checkpoint in checkpoints:
    if hub.is_hub_name(checkpoint):
      load.resolve_checkpoint(checkpoint)


def check_fewshot(fv: flags.FlagValues) -> None:
  """vit_jax.fewshot: a hub name in --checkpoint, the --datasets names."""
  _check_hub_names([fv.checkpoint])
  _check_dataset_entries(fv.datasets)


def check_analyze(fv: flags.FlagValues) -> None:
  """vit_jax.analyze: hub names in --checkpoint, the --dataset name and where --out goes."""
  _check_hub_names(fv.checkpoint or [])
  _check_dataset_entries([fv.dataset] if fv.dataset else [])
  fileio.check_output_dir(fv.out, '--out')


def check_export(fv: flags.FlagValues) -> None:
  """vit_jax.export: what to write (--format/--output, --hub_dir, --push_to_hub) and where."""
  checkpoint = load.resolve_checkpoint(fv.checkpoint)
  if bool(fv.format) != bool(fv.output):
    raise ValueError('--format and --output go together: pass both for a serving artifact.')
  if not (fv.output or fv.hub_dir or fv.push_to_hub):
    raise ValueError('Nothing to write: pass --format and --output (a serving artifact), '
                     'or --hub_dir=DIR / --push_to_hub=ORG/NAME (a Hub repository).')
  if fv.output:
    fileio.check_output(fv.output, '--output', [('--checkpoint', checkpoint)])
  if fv.hub_dir:
    fileio.check_output(fv.hub_dir, '--hub_dir', [('--checkpoint', checkpoint)])
    hub.check_folder(fv.hub_dir)
  if fv.push_to_hub:
    hub.check_push(fv.push_to_hub)


def check_training(config: ml_collections.ConfigDict) -> None:
  """vit_jax.main: train.precheck on the parsed config; a mistake is one line and exit 2.

  It starts neither JAX's backend nor TensorFlow: jax.distributed must start first.
  """
  if config is None:  # vit_jax.main's own usage error names it
    return
  train_flags.expand_home(config)
  try:
    precheck.check(config)
  except (ValueError, OSError) as e:
    if train_flags.DEBUG.value:
      raise
    print(f'vit_jax: error: {e}', file=sys.stderr)
    sys.exit(errors.USER_ERROR)
