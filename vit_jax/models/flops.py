"""Analytic model FLOPs per image, the numerator of MFU.

Convention: a multiply-add counts as 2 FLOPs; only matrix products and convolutions
are counted (each model family's forward_flops: patch/stem embedding, QKV/out
projections, the two attention products, MLPs, ResNet convs, pre-logits and head), not
norms, activations, softmax or the optimizer update, which together are under 2% of the
total for ViT-B/16. A training step counts 3x the forward pass (the backward pass is two
matrix products per forward one), the convention of the PaLM paper's MFU and of
timm/MLPerf throughput reports.
"""
from typing import Mapping, Optional, Union

import flax.linen as nn

from vit_jax import models
from vit_jax.models import families

ModelSpec = Union[str, Mapping, nn.Module]


def model_flops_per_image(model: ModelSpec, resolution: int, *, train: bool,
                          num_classes: Optional[int] = None) -> float:
  """Analytic FLOPs per image: forward, or 3x forward when `train` is True.

  `model` is a preset name, a preset config or a built module; its family's
  forward_flops counts. `num_classes` defaults to the model's own, else 1000.
  """
  if not isinstance(resolution, int) or resolution <= 0:
    raise ValueError(f'resolution must be a positive int, got {resolution!r}.')
  if isinstance(model, str):
    fields = models.get_model_config(model).to_dict()
  elif isinstance(model, nn.Module):
    fields = families.fields(model)
  else:
    fields = model.to_dict() if hasattr(model, 'to_dict') else dict(model)
  family = models.family_of(model if isinstance(model, nn.Module) else fields)
  if num_classes is None:
    num_classes = fields.get('num_classes')
    num_classes = 1000 if num_classes is None or num_classes < 0 else num_classes
  fwd = family.forward_flops(fields, resolution, num_classes)
  return 3.0 * fwd if train else fwd


