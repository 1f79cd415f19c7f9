"""Classification accuracy and loss on a labelled split of any dataset, every example once.

`config.evals.<name> = {'type': 'classification', 'every': N, 'split': SPLIT, ...}` logs
`accuracy_<name>`, `loss_<name>` and `examples_<name>`. Its data, each '' = the run's:
  dataset      a dataset name as in config.dataset (e.g. 'imagenet_v2'); '' = config.dataset
  split        a TFDS split expression of that dataset; '' = config.eval_split for the
               run's dataset, else the dataset's evaluation split
  pp           a deterministic eval chain or recipe (as config.pp.eval) run at the run's
               pp.crop/pp.resize; '' = config.pp.eval
  label_key    the label feature (e.g. 'original_label'); '' = the dataset's
  real_labels  a ReaL label file (real.json: one list of label ids per image, see
               vit_jax.data.label_sets); '' = none
The evaluated dataset must have as many classes as the model's head. The run's own dataset
info (classes, splits) is not changed by an evaluator's data.

Label sets (ReaL; the `real_label` feature of imagenet2012_real, or `real_labels`): top-1
counts as correct when its class is in the image's set; images with an empty set are left
out. They log `accuracy_<name>` (over images with labels), `examples_<name>` (images
scored) and `unlabelled_<name>` (images left out), and no loss (a set has no single
target). big_vision's ImageNet evals, for example:
  evals.v2 = {'type': 'classification', 'dataset': 'imagenet_v2', 'split': 'test'}
  evals.real = {'type': 'classification', 'dataset': 'imagenet2012_real',
                'split': 'validation'}
Batches are padded and masked (vit_jax.data.pipeline), so no example is dropped or
counted twice, on any number of devices and hosts.
"""
import copy
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax.data import label_sets
from vit_jax.data import pipeline
from vit_jax.data import sources
from vit_jax.evaluators import base
from vit_jax.inference import engine
from vit_jax.parallel import sharding

# The options that choose the evaluated data; '' = the run's.
DATA_OPTIONS = ('dataset', 'split', 'pp', 'label_key', 'real_labels')


def eval_step(model: Any, example_loss: Any, sets: bool = False,
              forward: Optional[Callable[[Any, jax.Array], jax.Array]] = None):
  """Returns eval(params, batch) -> sums of correct predictions, loss and examples.

  sets=True (labels are sets of classes): sums of correct predictions, images with
  labels and images without. `forward` (params, images) -> logits: default the
  model's deterministic apply; the evaluator passes the inference engine's.
  """
  if forward is None:
    forward = lambda params, images: model.apply(  # noqa: E731
        {'params': params}, images, train=False)

  def step(params: Any, batch: dict) -> dict:
    logits = forward(params, batch['image'])
    mask = batch['mask']
    labels = batch['label']
    top1 = jnp.argmax(logits, axis=-1)
    picked = jnp.take_along_axis(labels, top1[:, None], axis=-1)[:, 0]
    if sets:
      # Padding rows (mask 0) and empty sets (all-zero rows) are not scored.
      labelled = (jnp.max(labels, axis=-1) > 0) * mask
      return {'correct': jnp.sum((picked > 0) * labelled),
              'count': jnp.sum(labelled),
              'unlabelled': jnp.sum(mask - labelled)}
    # Top-1 is right when the predicted class carries the largest target
    # (the class of a one-hot label, any class of a multi-hot one).
    correct = picked >= jnp.max(labels, axis=-1)
    return {
        'correct': jnp.sum(correct * mask),
        'loss': jnp.sum(example_loss(logits, labels) * mask),
        'count': jnp.sum(mask),
    }

  return step


def data_config(config: ml_collections.ConfigDict,
                options: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The run's config as this evaluator's data sees it: a copy, the run's is unchanged."""
  c = copy.deepcopy(config)
  c.unlock()
  dataset = options.get('dataset') or ''
  if dataset and dataset != config.dataset:
    # Another dataset: its own splits, not the run's.
    c.dataset, c.train_split, c.eval_split = dataset, '', ''
  if options.get('split'):
    c.eval_split = options.split
  if options.get('pp'):
    c.pp.eval = options.pp
  return c


def _model_classes(config: ml_collections.ConfigDict) -> int:
  """The model head's class count: config.model.num_classes, else the run's dataset's."""
  classes = config.model.get('num_classes')
  if classes is not None and classes > 0:
    return classes
  # The catalog's count where it has one: a check must not prepare (download) the data.
  known = sources.resolve(config.dataset).num_classes
  return known if known > 0 else sources.get_dataset_info(config).num_classes


def _naming(key: str, error: Exception) -> Exception:
  """The one-line error again, prefixed with the config key it comes from."""
  kind = ValueError if isinstance(error, ValueError) else OSError
  return kind(f'{key}: {error}')


class Classification(base.Evaluator):
  """Top-1 accuracy and mean loss of the model's head on one split (ReaL: label sets)."""

  OPTIONS = DATA_OPTIONS

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    if config.batch_eval < 1:
      raise ValueError(f'config.batch_eval={config.batch_eval} must be positive.')
    key = f'config.evals.{name}'
    for option in DATA_OPTIONS:
      value = options.get(option, '')
      if not isinstance(value, str):
        raise ValueError(f"{key}.{option}={value!r}: use a string ('' = the run's).")
    if name == 'minival' and not options.get('split'):
      # An empty split means the test split, which must not be reported as the minival.
      raise ValueError("config.evals.minival.split is empty: set the held-out slice "
                       "(e.g. 'train[98%:]' beside --config.train_split='train[:98%]').")
    data = data_config(config, options)
    label_key = options.get('label_key', '')
    try:
      spec = sources.resolve(data.dataset, label_key)
    except ValueError as e:
      raise ValueError(f'{key}.dataset: {e}') from None
    if options.get('split'):
      sources.check_split(spec, data.get('data_dir'), options.split, f'{key}.split')
    if options.get('pp'):
      try:
        pipeline.check_eval_config(data)
      except ValueError as e:
        raise ValueError(f'{key}.pp: {e}') from None
    if options.get('dataset') or label_key:
      # Another dataset or label: its classes must be the head's.
      try:
        classes = sources.get_dataset_info(data, label_key, train=False).num_classes
      except (ValueError, OSError) as e:
        raise _naming(key, e) from None
      head = _model_classes(config)
      if classes != head:
        raise ValueError(
            f"{key}: {data.dataset}{f' ({label_key})' if label_key else ''} has {classes} "
            f"classes but the model's head has {head}; evaluate a dataset with the "
            'classes the model was trained on.')
    if options.get('real_labels'):
      try:
        label_sets.check(data, label_key, options.real_labels)
      except (ValueError, OSError) as e:
        raise _naming(f'{key}.real_labels', e) from None

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    mesh = context.mesh
    self._data = pipeline.make_eval_iterator(
        data_config(context.config, options), mesh, options.get('split') or None,
        label_key=options.get('label_key', ''),
        real_labels_path=options.get('real_labels', ''))
    self._label_sets = self._data.label_sets
    if context.example_loss is None and not self._label_sets:
      raise ValueError(f'config.evals.{name}: the objective has no classification loss; '
                       'disable this evaluator (every=-1).')
    # The serving path: weights cast once per run, q/k/v as fastest for inference.
    self._served = engine.inference_model(context.model)
    self._prepare = None  # made at the first batch, when the image shape is known
    self._step = jax.jit(
        sharding.with_activation_constraints(
            eval_step(self._served, context.example_loss, self._label_sets,
                      engine.forward(self._served)), mesh),
        in_shardings=(None, sharding.batch_sharding(mesh)))

  def run(self, params: Any) -> dict[str, Any]:
    totals, prepared = None, None
    for batch in self._data:
      if self._prepare is None:
        self._prepare = engine.preparer(self._served, params,
                                        (1,) + tuple(batch['image'].shape[1:]))
      if prepared is None:
        prepared = self._prepare(params)
      out = self._step(prepared, batch)
      totals = out if totals is None else jax.tree.map(jnp.add, totals, out)
    totals = jax.device_get(totals)
    count = float(totals['count'])
    metrics = {f'accuracy_{self.name}': float(totals['correct']) / max(count, 1.0)}
    if not self._label_sets:
      metrics[f'loss_{self.name}'] = float(totals['loss']) / max(count, 1.0)
    metrics[f'examples_{self.name}'] = np.int64(count)
    if self._label_sets:
      metrics[f'unlabelled_{self.name}'] = np.int64(totals['unlabelled'])
    return metrics
