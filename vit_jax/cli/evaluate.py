"""`python -m vit_jax.evaluate`; its usage (--help) is vit_jax/evaluate.py's docstring."""
from typing import Any, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import ml_collections

from vit_jax import errors
from vit_jax import configs
from vit_jax.cli import common
from vit_jax.cli import early
from vit_jax.data import sources
from vit_jax.evaluators import base
from vit_jax.evaluators import classification
from vit_jax.inference import engine
from vit_jax.inference import load
from vit_jax.parallel import sharding
from vit_jax.train import objectives

FLAGS = flags.FLAGS
# The parts of a run's config.pp that decide what the model sees at evaluation.
_EVAL_PP = ('eval', 'crop', 'resize', 'keep_aspect', 'num_channels')


def eval_config(saved: Optional[dict[str, Any]], resolution: int, *,
                dataset: Optional[str], split: Optional[str], data_dir: Optional[str],
                loss: Optional[str], batch: int) -> ml_collections.ConfigDict:
  """The run config the classification evaluator reads: the run's where known, flags first."""
  config = configs.get_base_config()
  saved = saved if isinstance(saved, dict) and isinstance(saved.get('pp'), dict) else {}
  pp = saved.get('pp', {})
  if pp.get('crop') == resolution:
    config.pp.update({k: pp[k] for k in _EVAL_PP if k in pp})
  else:  # no run config, or another resolution: the original vit_jax evaluation
    config.pp.update({'eval': 'resize', 'crop': resolution, 'resize': resolution})
  config.dataset = early.evaluation_dataset(saved, dataset)
  same_data = not dataset or dataset == saved.get('dataset')
  config.eval_split = split or (saved.get('eval_split', '') if same_data else '')
  config.data_dir = data_dir or saved.get('data_dir')
  run_loss = saved.get('objectives', {}).get('supervised', {}).get('loss')
  config.objectives.supervised.loss = loss or run_loss or config.objectives.supervised.loss
  config.batch_eval = batch
  return config


def main(argv: Sequence[str]) -> None:
  """Prints accuracy, loss and the number of examples of the checkpoint on the split."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  early.check_evaluate(FLAGS)  # as the entry module did; for callers of run() alone
  checkpoint = load.resolve_checkpoint(FLAGS.checkpoint)
  loaded = load.load_model(FLAGS.model, checkpoint, FLAGS.resolution, FLAGS.num_heads)
  mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
  batch = FLAGS.batch or 32 * mesh.size
  if batch % mesh.size:
    raise ValueError(f'--batch={batch} is not divisible by the {mesh.size} devices.')
  config = eval_config(load.workdir_config(checkpoint), loaded.resolution,
                       dataset=FLAGS.dataset, split=FLAGS.split, data_dir=FLAGS.data_dir,
                       loss=FLAGS.loss, batch=batch)
  label_key = FLAGS.label_key or ''
  # Prepares it; a bad split is one line.
  info = sources.get_dataset_info(config, label_key, train=False)
  if not info.eval_split:
    raise ValueError(f'{config.dataset} has no evaluation split; name one with --split '
                     "(e.g. --split='train[98%:]').")
  if loaded.num_classes != info.num_classes:
    what = ('has no classification head (use vit_jax.fewshot for its features)'
            if not loaded.num_classes else f'has {loaded.num_classes} outputs')
    raise ValueError(f'Checkpoint {checkpoint} {what}, but {config.dataset} has '
                     f'{info.num_classes} classes; pass the dataset it was trained on.')
  evaluator = classification.Classification(
      'eval', ml_collections.ConfigDict({'split': info.eval_split, 'label_key': label_key,
                                         'real_labels': FLAGS.real_labels or ''}),
      # The compute dtype of the backend (bf16 on GPU/TPU), as predict serves it.
      base.Context(config, engine.inference_model(loaded.model, dtype='auto'), mesh,
                   objectives.LOSSES[config.objectives.supervised.loss]))
  metrics = evaluator.run(loaded.params)
  print(result_line(config.dataset, info.eval_split, metrics))


def result_line(dataset: str, split: str, metrics: dict[str, Any]) -> str:
  """The printed result: accuracy, loss and examples; ReaL: accuracy, scored, unlabelled."""
  if 'unlabelled_eval' in metrics:  # label sets: no loss, images without labels left out
    return (f'{dataset} {split}: ReaL accuracy {metrics["accuracy_eval"]:.4f}, '
            f'{int(metrics["examples_eval"])} images scored, '
            f'{int(metrics["unlabelled_eval"])} unlabelled')
  return (f'{dataset} {split}: accuracy {metrics["accuracy_eval"]:.4f}, '
          f'loss {metrics["loss_eval"]:.4f}, {int(metrics["examples_eval"])} examples')


def run() -> None:
  """Console entry point of `python -m vit_jax.evaluate`."""
  errors.run_command('vit_jax.evaluate', common.define_evaluate_flags, main,
                     (ValueError, OSError, RuntimeError))
