"""Pictures of the model for TensorBoard: attention rollout and position-embedding similarity.

`config.evals.images = {'every': N, 'count': 4}` sends the paper's Fig. 6 (rollout over
the first `count` images of the evaluation split) and Fig. 7 centre (posemb similarity)
as `attention_rollout` and `posemb_similarity` images.
"""
from typing import Any

import ml_collections
import numpy as np

from vit_jax.data import pipeline
from vit_jax.evaluators import base
from vit_jax.inference import figures
from vit_jax.parallel import sharding


class Images(base.Evaluator):
  """summary_images of the model on a few evaluation images."""

  OPTIONS = ('count',)

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    count = options.get('count', 4)
    if not isinstance(count, int) or count < 1:
      raise ValueError(f'config.evals.{name}.count={count!r}: use an integer >= 1.')

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    batch = next(iter(pipeline.make_eval_iterator(context.config, context.mesh)))
    local = np.asarray(batch['image'].addressable_shards[0].data)
    self._images = local[:options.get('count', 4)]

  def run(self, params: Any) -> dict[str, Any]:
    return figures.summary_images(self.context.model, sharding.to_host(params),
                                  self._images)
