"""`python -m vit_jax.fewshot`; its usage (--help) is vit_jax/fewshot.py's docstring."""
from typing import Any, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import ml_collections

from vit_jax import errors
from vit_jax.cli import common
from vit_jax.evaluators import base
from vit_jax.evaluators import fewshot
from vit_jax.evaluators import knn
from vit_jax.evaluators import linear_probe
from vit_jax.evaluators import linear_protocols
from vit_jax.inference import curves
from vit_jax.inference import load
from vit_jax.parallel import sharding

FLAGS = flags.FLAGS
# --probes name -> (evaluator class, metric prefix).
PROBES = {'fewshot': (fewshot.FewShot, 'fewshot'), 'knn': (knn.KNN, 'knn'),
          'linear_probe': (linear_probe.LinearProbe, 'linear')}


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


def linear_options() -> dict[str, Any]:
  """The linear probe's protocol and the --linear_* flags that are set, checked."""
  protocol = FLAGS.linear_protocol
  if protocol not in linear_protocols.PROTOCOL_NAMES:
    raise ValueError(f'--linear_protocol={protocol}: use one of '
                     f'{", ".join(linear_protocols.PROTOCOL_NAMES)}.')
  try:
    lrs = tuple(float(v) for v in FLAGS.linear_lrs)
  except ValueError:
    raise ValueError(f'--linear_lrs={",".join(FLAGS.linear_lrs)}: use numbers > 0, '
                     'e.g. 1e-3,1e-2.') from None
  if any(lr <= 0 for lr in lrs):
    raise ValueError(f'--linear_lrs={",".join(FLAGS.linear_lrs)}: use numbers > 0.')
  given = {'batch': FLAGS.linear_batch or None, 'epochs': FLAGS.linear_epochs or None,
           'warmup_epochs': (FLAGS.linear_warmup_epochs
                             if FLAGS.linear_warmup_epochs >= 0 else None),
           'base_lrs': lrs or None, 'n_last_blocks': FLAGS.linear_n_last_blocks or None,
           'avgpool': FLAGS.linear_avgpool, 'min_area': FLAGS.linear_min_area or None,
           'augment': FLAGS.linear_augment}
  options = {'protocol': protocol, **{k: v for k, v in given.items() if v is not None}}
  if protocol != 'lbfgs':
    linear_protocols.resolve('linear', options)  # one line before the model loads
  return options


def main(argv: Sequence[str]) -> None:
  """Prints the probes' accuracies of a checkpoint."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    shots = [int(k) for k in FLAGS.shots]
  except ValueError:
    raise ValueError(f'--shots={",".join(FLAGS.shots)}: use integers, e.g. '
                     '1,5,10,25.') from None
  try:
    decays = [float(w) for w in FLAGS.weight_decays]
  except ValueError:
    raise ValueError(f'--weight_decays={",".join(FLAGS.weight_decays)}: use numbers, '
                     'e.g. 1e-4,1e-3,1e-2.') from None
  unknown = [p for p in FLAGS.probes if p not in PROBES]
  if unknown or not FLAGS.probes:
    raise ValueError(f'--probes={",".join(FLAGS.probes)}: use some of '
                     f'{", ".join(PROBES)}.')
  if FLAGS.knn_k < 1:
    raise ValueError(f'--knn_k={FLAGS.knn_k}: use an integer >= 1 (DINO: 20).')
  if FLAGS.knn_temperature <= 0:
    raise ValueError(f'--knn_temperature={FLAGS.knn_temperature}: use a number > 0 '
                     '(DINO: 0.07).')
  if any(w < 0 for w in decays) or not decays:
    raise ValueError(f'--weight_decays={",".join(FLAGS.weight_decays)}: use numbers '
                     '>= 0.')
  linear = linear_options()
  checkpoint = load.resolve_checkpoint(FLAGS.checkpoint)
  loaded = load.load_model(FLAGS.model, checkpoint, FLAGS.resolution, FLAGS.num_heads)
  if FLAGS.random_init is not None:
    loaded = load.reinitialized(loaded, FLAGS.random_init)
  mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
  run = load.workdir_dataset(checkpoint)  # a work directory's run: its data_dir by default
  config = fewshot_config(loaded.resolution, FLAGS.batch or 8 * mesh.size,
                          FLAGS.data_dir or (run[1] if run else None))
  options = ml_collections.ConfigDict({
      'datasets': list(FLAGS.datasets), 'shots': shots, 'seeds': FLAGS.seeds,
      'k': FLAGS.knn_k, 'temperature': FLAGS.knn_temperature,
      'weight_decays': decays, **linear})
  context = base.Context(config, loaded.model, mesh)
  for probe in dict.fromkeys(FLAGS.probes):  # every check before any run
    cls, prefix = PROBES[probe]
    cls.check(prefix, options, config)
  results = {}
  for probe in dict.fromkeys(FLAGS.probes):
    cls, prefix = PROBES[probe]
    results.update(cls(prefix, options, context).run(loaded.params))
  for key in sorted(results, key=curves.metric_order):  # 1shot before 10shot
    print(f'{key}: {results[key]:.4f}')


def run() -> None:
  """Console entry point of `python -m vit_jax.fewshot`."""
  errors.run_command('vit_jax.fewshot', common.define_fewshot_flags, main,
                     (ValueError, OSError, RuntimeError))
