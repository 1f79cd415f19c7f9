"""What every serving format shares: the inference function, the preprocessing to bake in."""
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np


def inference_fn(model: nn.Module, params: Mapping[str, Any]
                 ) -> Callable[[jax.Array], jax.Array]:
  """images (N, H, W, 3) float32 in [-1, 1] -> float32 logits, parameters closed over."""
  params = jax.tree.map(jnp.asarray, params)

  def fn(images):
    return model.apply({'params': params}, images, train=False)

  return fn


def serving_model(model: nn.Module) -> nn.Module:
  """`model` with the default matmuls: fp8 rounding is a training-speed option (same
  parameters), and serving runtimes (ONNX, TFLite) have no float8 matmuls."""
  if getattr(model, 'matmul', 'default') != 'default':
    return model.clone(matmul='default')
  return model


def eval_pp(resolution: int, pp: Optional[Mapping[str, Any]] = None
            ) -> ml_collections.ConfigDict:
  """The evaluation preprocessing to bake in: a training config's pp, else resize.

  Without a config it is the original vit_jax evaluation (and `predict`'s):
  squash-resize to the model resolution. A config's resize scales with the
  resolution when the export runs at another one than pp.crop.
  """
  pp = dict(pp or {})
  resize = pp.get('resize', resolution)
  if pp.get('crop') and pp['crop'] != resolution:
    resize = int(round(resize * resolution / pp['crop']))
  out = ml_collections.ConfigDict({
      'eval': pp.get('eval', 'resize'),
      'crop': resolution,
      'resize': resize,
      'keep_aspect': pp.get('keep_aspect', False),
  })
  if out.eval == 'central_crop' and out.resize < resolution:
    raise ValueError(f'pp.resize={out.resize} is smaller than the crop '
                     f'{resolution}; central_crop needs resize >= crop.')
  return out


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
  """max |ours - ref| / max |ref|."""
  return float(np.max(np.abs(np.asarray(ours) - np.asarray(ref))) /
               max(float(np.max(np.abs(np.asarray(ref)))), 1e-30))
