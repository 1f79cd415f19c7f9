"""`python -m vit_jax.fewshot`; its usage (--help) is vit_jax/fewshot.py's docstring."""
from typing import Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import ml_collections

from vit_jax import errors
from vit_jax.cli import common
from vit_jax.evaluators import base
from vit_jax.evaluators import fewshot
from vit_jax.inference import curves
from vit_jax.inference import load
from vit_jax.parallel import sharding

FLAGS = flags.FLAGS


def fewshot_config(resolution: int, batch: int,
                   data_dir: Optional[str] = None) -> ml_collections.ConfigDict:
  """The run config the few-shot evaluator reads, for a checkpoint outside training.

  Evaluation preprocessing is the original vit_jax's: resize straight to the model's
  resolution.
  """
  return ml_collections.ConfigDict({
      'pp': {'eval': 'resize', 'crop': resolution, 'resize': resolution,
             'num_channels': 3},
      'batch_eval': batch,
      'data_dir': data_dir,
      'manual_dir': None,
  })


def main(argv: Sequence[str]) -> None:
  """Prints the few-shot accuracies of a checkpoint."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    shots = [int(k) for k in FLAGS.shots]
  except ValueError:
    raise ValueError(f'--shots={",".join(FLAGS.shots)}: use integers, e.g. '
                     '1,5,10,25.') from None
  loaded = load.load_model(FLAGS.model, FLAGS.checkpoint, FLAGS.resolution,
                           FLAGS.num_heads)
  if FLAGS.random_init is not None:
    loaded = load.reinitialized(loaded, FLAGS.random_init)
  mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
  config = fewshot_config(loaded.resolution, FLAGS.batch or 8 * mesh.size,
                          FLAGS.data_dir)
  options = ml_collections.ConfigDict({
      'datasets': list(FLAGS.datasets), 'shots': shots, 'seeds': FLAGS.seeds})
  evaluator = fewshot.FewShot('fewshot', options,
                              base.Context(config, loaded.model, mesh))
  results = evaluator.run(loaded.params)
  for key in sorted(results, key=curves.metric_order):  # 1shot before 10shot
    print(f'{key}: {results[key]:.4f}')


def run() -> None:
  """Console entry point of `python -m vit_jax.fewshot`."""
  errors.run_command('vit_jax.fewshot', common.define_fewshot_flags, main,
                     (ValueError, OSError, RuntimeError))
