"""Classification accuracy and loss on a labelled split, every example counted once.

`config.evals.<name> = {'type': 'classification', 'every': N, 'split': SPLIT}` logs
`accuracy_<name>`, `loss_<name>` and `examples_<name>`; SPLIT is any TFDS split
expression of config.dataset ('' = the dataset's evaluation split, config.eval_split).
Batches are padded and masked (vit_jax.data.pipeline), so no example is dropped or
counted twice, on any number of devices and hosts.
"""
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax.data import pipeline
from vit_jax.data import sources
from vit_jax.evaluators import base
from vit_jax.parallel import sharding


def eval_step(model: Any, example_loss: Any):
  """Returns eval(params, batch) -> sums of correct predictions, loss and examples."""

  def step(params: Any, batch: dict) -> dict:
    logits = model.apply({'params': params}, batch['image'], train=False)
    mask = batch['mask']
    labels = batch['label']
    # Top-1 is right when the predicted class carries the largest target
    # (the class of a one-hot label, any class of a multi-hot one).
    top1 = jnp.argmax(logits, axis=-1)
    picked = jnp.take_along_axis(labels, top1[:, None], axis=-1)[:, 0]
    correct = picked >= jnp.max(labels, axis=-1)
    return {
        'correct': jnp.sum(correct * mask),
        'loss': jnp.sum(example_loss(logits, labels) * mask),
        'count': jnp.sum(mask),
    }

  return step


class Classification(base.Evaluator):
  """Top-1 accuracy and mean loss of the model's head on one split."""

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    if config.batch_eval < 1:
      raise ValueError(f'config.batch_eval={config.batch_eval} must be positive.')
    if name == 'minival' and not options.get('split'):
      # An empty split means the test split, which must not be reported as the minival.
      raise ValueError("config.evals.minival.split is empty: set the held-out slice "
                       "(e.g. 'train[98%:]' beside --config.train_split='train[:98%]').")
    if options.get('split'):
      sources.check_split(sources.resolve(config.dataset), config.get('data_dir'),
                          options.split, f'config.evals.{name}.split')

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    if context.example_loss is None:
      raise ValueError(f'config.evals.{name}: the objective has no classification loss; '
                       'disable this evaluator (every=-1).')
    mesh = context.mesh
    self._data = pipeline.make_eval_iterator(context.config, mesh,
                                             options.get('split') or None)
    self._step = jax.jit(
        sharding.with_activation_constraints(
            eval_step(context.model, context.example_loss), mesh),
        in_shardings=(None, sharding.batch_sharding(mesh)))

  def run(self, params: Any) -> dict[str, Any]:
    totals = None
    for batch in self._data:
      out = self._step(params, batch)
      totals = out if totals is None else jax.tree.map(jnp.add, totals, out)
    totals = jax.device_get(totals)
    count = float(totals['count'])
    return {f'accuracy_{self.name}': float(totals['correct']) / max(count, 1.0),
            f'loss_{self.name}': float(totals['loss']) / max(count, 1.0),
            f'examples_{self.name}': np.int64(count)}
