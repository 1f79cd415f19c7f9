"""The parameter layout of objectives that train something beside the model."""
from typing import Any, Mapping

import flax.linen as nn
import jax

Params = Mapping[str, Any]


class AroundModel:
  """An objective whose parameters are {'model': the ViT, OWN: what it adds}."""
  OWN = ''
  net: Any  # e.g. models.mae.MaskedAutoencoder, models.dino.Dino

  @property
  def model(self) -> nn.Module:
    """The model the objective trains (its parameters are params['model'])."""
    return self.net.model

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """Fresh parameters of the model and of what the objective adds."""
    return self.net.init(rng, image_shape)

  def model_params(self, params: Params) -> Params:
    """The model's parameters, in the published layout."""
    return params['model']

  def with_model_params(self, params: Params, model_params: Params) -> Params:
    """`params` with the model's part replaced."""
    return {**params, 'model': model_params}

  def auxiliary_params(self, params: Params) -> Params:
    """What the objective trains beside the ViT (written as <objective>_params.npz)."""
    return params[self.OWN]
