"""`python -m vit_jax.analyze`; its usage (--help) is vit_jax/analyze.py's docstring."""
import json
import os
from typing import Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np

from vit_jax import errors
from vit_jax import fileio
from vit_jax import rundir
from vit_jax.cli import common
from vit_jax.cli import fewshot as fewshot_cli
from vit_jax.data import sources
from vit_jax.evaluators import features
from vit_jax.evaluators import layer_analysis
from vit_jax.inference import analysis_figures
from vit_jax.inference import figures
from vit_jax.inference import load
from vit_jax.parallel import sharding

FLAGS = flags.FLAGS
RESULTS_FILE = 'analysis.json'


def _labels(paths: Sequence[str], labels: Sequence[str]) -> list[str]:
  if labels:
    return list(labels)
  names = []
  for path in paths:
    path = os.path.normpath(os.path.expanduser(path))
    base = os.path.basename(path)
    names.append(os.path.basename(os.path.dirname(path)) if base == rundir.PARAMS_FILE
                 else os.path.splitext(base)[0])
  return names if len(set(names)) == len(names) else [
      f'{n} ({i + 1})' for i, n in enumerate(names)]


def _check_flags(checkpoints: Sequence[str], models: Sequence[str],
                 labels: Sequence[str]) -> None:
  if not 1 <= len(checkpoints) <= 2:
    raise ValueError(f'--checkpoint given {len(checkpoints)} times: give one or two '
                     'checkpoints.')
  if models and len(models) not in (1, len(checkpoints)):
    raise ValueError(f'--model given {len(models)} times for {len(checkpoints)} '
                     'checkpoints: give one for all, or one each.')
  if labels and len(labels) != len(checkpoints):
    raise ValueError(f'--label given {len(labels)} times for {len(checkpoints)} '
                     'checkpoints: give one each.')
  if FLAGS.images < 1:
    raise ValueError(f'--images={FLAGS.images}: use an integer >= 1.')
  if FLAGS.batch < 1:
    raise ValueError(f'--batch={FLAGS.batch}: use an integer >= 1.')
  unknown = [p for p in FLAGS.probes if p not in layer_analysis.PROBES]
  if unknown:
    raise ValueError(f'--probes={",".join(FLAGS.probes)}: use some of '
                     f'{", ".join(layer_analysis.PROBES)} (or nothing).')


def main(argv: Sequence[str]) -> None:
  """Writes the analysis figures and analysis.json of one or two checkpoints."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  checkpoints, models = list(FLAGS.checkpoint), list(FLAGS.model or [])
  _check_flags(checkpoints, models, FLAGS.label or [])
  fileio.check_output_dir(FLAGS.out, '--out')
  paths = [load.resolve_checkpoint(c) for c in checkpoints]
  models = models * len(paths) if len(models) == 1 else models or [None] * len(paths)
  loaded = []
  for path, model in zip(paths, models):
    model_ = load.load_model(model, path, None, FLAGS.num_heads)
    layer_analysis.check_model(model_, f'Checkpoint {path}')
    if FLAGS.pooling == 'token' and not features.has_class_token(model_.model):
      raise ValueError(f'--pooling=token: checkpoint {path} has no class token; use '
                       '--pooling=patches (or auto).')
    loaded.append(model_)
  dataset, data_dir = FLAGS.dataset, FLAGS.data_dir
  if not dataset:
    saved = load.workdir_dataset(paths[0])
    if saved is None:
      raise ValueError('--dataset is needed: the first checkpoint is not the params.npz '
                       'of a vit_jax work directory, which would name its dataset.')
    dataset, data_dir = saved[0], data_dir or saved[1]
  name, train_split, test_split = features.parse_dataset(dataset)
  spec = sources.resolve(name)
  for split in (train_split or spec.train_split, test_split or spec.eval_split):
    sources.check_split(spec, data_dir, split, f'--dataset {dataset!r}: split')
  mesh = sharding.make_mesh({'data': -1, 'fsdp': 1})
  batch = -(-FLAGS.batch // mesh.size) * mesh.size
  data = features.open_dataset(dataset, data_dir)
  options = layer_analysis.Options(images=FLAGS.images, pooling=FLAGS.pooling,
                                   probes=tuple(FLAGS.probes), batch_size=batch)
  labels, seeds = _labels(checkpoints, FLAGS.label), [None] * len(paths)
  if FLAGS.random_init is not None:  # the control: the first architecture, untrained
    labels.append(f'random init (seed {FLAGS.random_init})')
    seeds.append(FLAGS.random_init)
    paths.append(paths[0])
    loaded.append(load.reinitialized(loaded[0], FLAGS.random_init))
  results = {}
  for label, path, model, seed in zip(labels, paths, loaded, seeds):
    pp = fewshot_cli.fewshot_config(model.resolution, batch).pp
    results[label] = {'checkpoint': path, 'random_init': seed, 'model': model.name,
                      'resolution': model.resolution,
                      **layer_analysis.analyze(model, data, pp, mesh, options)}
  pictures = {
      'attention_distance.png': analysis_figures.per_head_plot(
          {k: v['attention_distance'] for k, v in results.items()},
          'Mean attention distance (Park et al. 2023, Fig. 3)',
          'Mean attention distance (pixels)',
          'Dots: heads; line: their mean. Distance from a patch to the patches it '
          'attends to, weighted by attention (class/register tokens dropped).',
          (0, max(m.resolution for m in loaded))),
      'nmi.png': analysis_figures.per_head_plot(
          {k: v['nmi'] for k, v in results.items()},
          'Query-key normalised mutual information (Park et al. 2023, Fig. 4)',
          'Normalised mutual information', 'I(Q; K) / sqrt(H(Q) H(K)) of each head\'s '
          'attention map, queries uniform; near 0: every query attends alike '
          '(attention collapse).', (0, 1)),
      'fourier.png': analysis_figures.fourier_plot(
          {k: v['fourier_log_amplitude'] for k, v in results.items()},
          np.asarray(next(iter(results.values()))['fourier_frequencies'])),
  }
  accuracies = {k: {p: v[f'{p}_top1'] for p in ('knn', 'linear') if f'{p}_top1' in v}
                for k, v in results.items()}
  if any(accuracies.values()):
    pictures['layer_accuracy.png'] = analysis_figures.accuracy_plot(
        accuracies, 1.0 / data.num_classes)
  os.makedirs(FLAGS.out, exist_ok=True)
  for file_name, picture in pictures.items():
    figures.write_png(picture, os.path.join(FLAGS.out, file_name))
    print(os.path.join(FLAGS.out, file_name))
  summary = {'dataset': dataset, 'train_split': data.train_split,
             'test_split': data.test_split, 'pooling': FLAGS.pooling,
             'models': results}
  fileio.atomic_write(os.path.join(FLAGS.out, RESULTS_FILE),
                      json.dumps(summary, indent=1).encode())
  print(os.path.join(FLAGS.out, RESULTS_FILE))


def run() -> None:
  """Console entry point of `python -m vit_jax.analyze`."""
  errors.run_command('vit_jax.analyze', common.define_analyze_flags, main,
                     (ValueError, OSError, RuntimeError))
