"""DINO's networks (Caron et al. 2021): a backbone at any view size and the projection head.

`Dino(model)` keeps the backbone's parameters in their published layout under
params['model'] and adds the head under params['head']. `features` runs the backbone on
a batch of one view size: its learned position embedding is resized to that size's
patch grid inside the computation (bicubic, `jax.image.resize` on the parameter), so the
student's gradients reach the embedding from every view, local crops included. The head
is DINO's: an MLP (GELU) to a bottleneck, L2 normalisation, then a weight-normalised
linear layer to `out_dim` prototypes whose norm g is fixed to 1 unless `norm_last_layer`
is False. The loss, the teacher and the schedules live in vit_jax.train.dino.
"""
import dataclasses
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import families

Params = Any
HEAD = 'head'        # the projection head's key in DINO's parameters
LAST_LAYER = 'last_layer'


class DinoHead(nn.Module):
  """MLP -> bottleneck -> L2 normalisation -> weight-normalised linear to out_dim."""
  out_dim: int  # the defaults: vit_jax.train.dino.make
  hidden_dim: int
  bottleneck_dim: int
  num_layers: int
  norm_last_layer: bool   # weight norm g fixed to 1 (not trained)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, freeze_last_layer: Any = False) -> jax.Array:
    """Features [n, D] -> prototype scores [n, out_dim] (float32).

    `freeze_last_layer` (a traced bool) stops the gradient to the last layer.
    """
    dense = lambda n, name: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=nn.initializers.truncated_normal(0.02),
        name=name)
    x = x.astype(self.dtype)
    for i in range(self.num_layers - 1):
      x = nn.gelu(dense(self.hidden_dim, f'mlp_{i}')(x), approximate=False)
    x = dense(self.bottleneck_dim, f'mlp_{self.num_layers - 1}')(x).astype(jnp.float32)
    x = x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    # torch's default Linear init U(+-1/sqrt(fan_in)), as the official last layer keeps.
    v = self.param(f'{LAST_LAYER}_kernel', nn.initializers.variance_scaling(
        1 / 3, 'fan_in', 'uniform'), (self.bottleneck_dim, self.out_dim))
    g = (jnp.ones((self.out_dim,), jnp.float32) if self.norm_last_layer else
         self.param(f'{LAST_LAYER}_scale', nn.initializers.ones, (self.out_dim,)))
    frozen = jnp.asarray(freeze_last_layer)
    v = jnp.where(frozen, jax.lax.stop_gradient(v), v)
    g = jnp.where(frozen, jax.lax.stop_gradient(g), g)
    w = v * (g / jnp.linalg.norm(v, axis=0))  # each prototype's column to norm g
    return jnp.dot(x.astype(self.dtype), w.astype(self.dtype)).astype(jnp.float32)

  def flops(self, width: int) -> float:
    """Matmul FLOPs of one feature vector through the head."""
    dims = [width] + [self.hidden_dim] * (self.num_layers - 1) + [self.bottleneck_dim,
                                                                  self.out_dim]
    return 2.0 * sum(a * b for a, b in zip(dims[:-1], dims[1:]))


def check_backbone(model: nn.Module) -> tuple[tuple[str, ...], int]:
  """(position-embedding path, its leading non-patch rows) of a backbone; one-line error if it has none.

  DINO runs the backbone at two or more view sizes, so it needs patch tokens with a
  learned position embedding that can be resized, pooled into one vector per image.
  """
  family = families.of_module(model)
  if family.posemb_path is None:
    raise ValueError(f'config.objective=dino needs a model with patch tokens and a '
                     f'position embedding (to run at several crop sizes); the '
                     f'{family.name} family has none. Choose a ViT-* model_name.')
  if getattr(model, 'classifier', 'token') in ('unpooled', 'token_unpooled'):
    raise ValueError('config.objective=dino needs one feature vector per image: '
                     f'classifier={model.classifier!r} is unpooled; use token or gap.')
  return family.posemb_path, int(family.posemb_prefix_tokens(model))


def resize_posemb(posemb: jax.Array, grid: tuple[int, int], prefix: int) -> jax.Array:
  """[1, prefix + h*w, D] -> [1, prefix + rows*cols, D], patch part resized bicubically."""
  lead, tokens = posemb[:, :prefix], posemb[:, prefix:]
  h, w = families.square_grid(tokens.shape[1], 'The position embedding')
  if (h, w) == tuple(grid):
    return posemb
  d = tokens.shape[-1]
  tokens = jax.image.resize(tokens.reshape(1, h, w, d), (1, grid[0], grid[1], d),
                            method='bicubic', antialias=False)
  return jnp.concatenate([lead, tokens.reshape(1, grid[0] * grid[1], d)], axis=1)


def _replace(tree: Params, path: tuple[str, ...], value: Any) -> Params:
  if not path:
    return value
  return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


@dataclasses.dataclass(frozen=True)
class Dino:
  """A backbone plus DINO's head; parameters {'model': published layout, 'head': head}."""
  model: nn.Module
  out_dim: int  # the defaults: vit_jax.train.dino.make
  hidden_dim: int
  bottleneck_dim: int
  num_layers: int
  norm_last_layer: bool

  def __post_init__(self):
    check_backbone(self.model)
    for key in ('out_dim', 'hidden_dim', 'bottleneck_dim', 'num_layers'):
      value = getattr(self, key)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'config.objectives.dino.{key}={value!r} must be a positive '
                         'integer.')

  @property
  def head(self) -> DinoHead:
    """The projection head module."""
    return DinoHead(self.out_dim, self.hidden_dim, self.bottleneck_dim, self.num_layers,
                    self.norm_last_layer, dtype=self.model.dtype)

  @property
  def backbone(self) -> nn.Module:
    """The model without its classifier: pooled features."""
    return self.model.clone(num_classes=0)

  def width(self) -> int:
    """The backbone's feature width (after a pre-logits layer, if any)."""
    return (getattr(self.model, 'representation_size', None)
            or families.of_module(self.model).width(families.fields(self.model)))

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """Fresh parameters: the model's (with its classifier, for export) and the head's."""
    model_rng, head_rng = jax.random.split(rng)
    params = self.model.init(model_rng, jnp.zeros(image_shape, jnp.float32))['params']
    head = self.head.init(head_rng, jnp.zeros((1, self.width()), jnp.float32))['params']
    return {'model': params, HEAD: head}

  def features(self, model_params: Params, images: jax.Array, *, train: bool = False,
               rng: Optional[jax.Array] = None) -> jax.Array:
    """Pooled backbone features [n, D] of images of any size (position embedding resized)."""
    path, prefix = check_backbone(self.model)
    ph, pw = tuple(self.model.patches['size'])
    grid = (images.shape[1] // ph, images.shape[2] // pw)
    posemb = families.get_path(model_params, path)
    params = _replace(model_params, path, resize_posemb(posemb, grid, prefix))
    params = {k: v for k, v in params.items() if k != 'head'}
    rngs = {'dropout': rng} if rng is not None else {}
    return self.backbone.apply({'params': params}, images, train=train, rngs=rngs)

  def project(self, params: Params, images: jax.Array, *, train: bool = False,
              rng: Optional[jax.Array] = None, freeze_last_layer: Any = False) -> jax.Array:
    """Head outputs [n, out_dim] of a batch of one view size."""
    x = self.features(params['model'], images, train=train, rng=rng)
    return self.head.apply({'params': params[HEAD]}, x, freeze_last_layer)

  def flops_per_view(self, resolution: int) -> float:
    """Forward matmul FLOPs of one view: the backbone at that size, then the head."""
    family = families.of_module(self.model)
    return (family.forward_flops(families.fields(self.model), resolution, 0)
            + self.head.flops(self.width()))
