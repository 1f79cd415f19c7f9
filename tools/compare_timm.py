r"""Checks that an .npz written by `checkpoint.save` gives the same logits in timm.

For each pair NAME=TIMM_NAME: initialise our preset (every parameter perturbed,
so the zero-initialised head cannot hide a difference), `save` it, load the file
with `timm.models.vision_transformer._load_weights` into
`timm.create_model(TIMM_NAME, pretrained=False, num_classes=..., act_layer=GELU
tanh)` and compare fp32 logits on CPU. Then the same after `load_pretrained` to
--finetune_resolution with a new head, exported again with `save`.

  JAX_PLATFORMS=cpu python tools/compare_timm.py \
      --models=ViT-B_16=vit_base_patch16_224

Needs torch and timm besides this package. Exits 1 when any relative error
(||ours - timm|| / ||timm||) reaches --tolerance.
"""
import functools
import os
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

import parity  # tools/parity.py, beside this script

_MODELS = flags.DEFINE_list(
    'models', ['ViT-B_16=vit_base_patch16_224'],
    'Pairs of our preset and the timm model name, joined by "=".')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 1000, 'Pre-training classes.')
_FINETUNE_RESOLUTION = flags.DEFINE_integer(
    'finetune_resolution', 384, 'Resolution of the load_pretrained check; 0 '
    'skips it.')
_FINETUNE_CLASSES = flags.DEFINE_integer('finetune_classes', 10,
                                         'Classes of the new head.')
_BATCH = flags.DEFINE_integer('batch', 2, 'Images per comparison.')
_TOLERANCE = flags.DEFINE_float('tolerance', 1e-4, 'Largest relative error.')


def _perturb(params, seed: int):
  """Adds N(0, 0.02) to every parameter so zero inits cannot hide bugs."""
  import jax  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda x: np.asarray(x) + rng.normal(0, 0.02, x.shape).astype(np.float32),
      params)


def _timm_logits(timm_name: str, path: str, num_classes: int,
                 images: np.ndarray) -> np.ndarray:
  """Loads `path` into a timm ViT with tanh GELU; returns its logits."""
  import timm  # pylint: disable=g-import-not-at-top
  from timm.models import vision_transformer  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  model = timm.create_model(
      timm_name, pretrained=False, num_classes=num_classes,
      img_size=images.shape[1],
      act_layer=functools.partial(torch.nn.GELU, approximate='tanh'))
  act = model.blocks[0].mlp.act
  if getattr(act, 'approximate', None) != 'tanh':
    raise SystemExit(f'timm ignored act_layer: the MLP uses {act!r}.')
  vision_transformer._load_weights(model, path)  # pylint: disable=protected-access
  model.eval()
  with torch.no_grad():
    logits = model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
  return logits.numpy()


def _rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
  return float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30))


def _compare(name: str, timm_name: str, work: str) -> list[tuple[str, float]]:
  import jax  # pylint: disable=g-import-not-at-top
  from vit_jax import checkpoint  # pylint: disable=g-import-not-at-top
  from vit_jax import models  # pylint: disable=g-import-not-at-top

  rows = []
  rng = np.random.default_rng(0)
  config = models.get_model_config(name)
  model = models.get_model(name, num_classes=_NUM_CLASSES.value)
  images = rng.uniform(-1, 1, (_BATCH.value, 224, 224, 3)).astype(np.float32)
  params = jax.jit(lambda: model.init(
      jax.random.PRNGKey(0), images[:1], train=False))()['params']
  params = _perturb(params, 0)
  path = os.path.join(work, f'{name}.npz')
  checkpoint.save(params, path)
  ours = np.asarray(jax.jit(model.apply)({'params': params}, images))
  theirs = _timm_logits(timm_name, path, _NUM_CLASSES.value, images)
  rows.append((f'{name} -> {timm_name} 224px', _rel_err(ours, theirs)))

  res = _FINETUNE_RESOLUTION.value
  if res:
    model_ft = models.get_model(name, num_classes=_FINETUNE_CLASSES.value)
    images_ft = rng.uniform(-1, 1, (_BATCH.value, res, res, 3)).astype(
        np.float32)
    init_ft = jax.jit(lambda: model_ft.init(
        jax.random.PRNGKey(1), images_ft[:1], train=False))()['params']
    init_ft = dict(init_ft, head=_perturb(init_ft['head'], 1))
    params_ft = checkpoint.load_pretrained(
        pretrained_path=path, init_params=init_ft, model_config=config)
    path_ft = os.path.join(work, f'{name}-{res}.npz')
    checkpoint.save(params_ft, path_ft)
    ours = np.asarray(jax.jit(model_ft.apply)({'params': params_ft}, images_ft))
    theirs = _timm_logits(timm_name, path_ft, _FINETUNE_CLASSES.value,
                          images_ft)
    rows.append((f'{name} -> {timm_name} load_pretrained {res}px',
                 _rel_err(ours, theirs)))
  return rows


def main(argv: list[str]) -> None:
  del argv
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  rows = []
  with tempfile.TemporaryDirectory() as work:
    for pair in _MODELS.value:
      name, sep, timm_name = pair.partition('=')
      if not sep:
        raise SystemExit(f'--models entry {pair!r} is not NAME=TIMM_NAME.')
      rows.extend(_compare(name, timm_name, work))
  parity.report_and_exit(rows, _TOLERANCE.value)


if __name__ == '__main__':
  app.run(main)
