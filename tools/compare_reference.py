r"""Checks that our models and checkpoints reproduce the original vit_jax logits.

For each preset: initialise our model (every parameter perturbed so that no
zero-initialised head or GroupNorm hides a difference), `checkpoint.save` it to
.npz, load that file with the ORIGINAL repository's `checkpoint.load` into the
ORIGINAL model, and compare logits at --resolution. Then fine-tune-load the same
file at --finetune_resolution with a new head of --finetune_classes, through our
`load_pretrained` and through the original's, and compare those logits too.

The original code is never imported into this process (both packages are named
`vit_jax`): it runs in a child process with --reference_dir on its path. Point
--reference_dir at a checkout of google-research/vision_transformer (it needs
vit_jax/models_vit.py, models_resnet.py, models_mixer.py, checkpoint.py and
configs/models.py, plus tensorflow, einops, packaging).

  python tools/compare_reference.py --reference_dir=/tmp/ref_vit \
      --models=ViT-B_16,R50+ViT-B_16,Mixer-B_16

Exits 1 when any relative error (||ours - ref|| / ||ref||) reaches --tolerance.
"""
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from absl import app
from absl import flags
import numpy as np

import parity  # tools/parity.py, beside this script

_REFERENCE_DIR = flags.DEFINE_string(
    'reference_dir', None, 'Directory holding the original vit_jax package.')
_MODELS = flags.DEFINE_list(
    'models', ['ViT-B_16', 'R50+ViT-B_16', 'Mixer-B_16'], 'Presets to compare.')
_RESOLUTION = flags.DEFINE_integer('resolution', 224, 'Pre-training resolution.')
_FINETUNE_RESOLUTION = flags.DEFINE_integer(
    'finetune_resolution', 384,
    'Resolution for the load_pretrained check (Mixers keep --resolution: their '
    'token-mixing weights fix the number of patches).')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 1000, 'Pre-training classes.')
_FINETUNE_CLASSES = flags.DEFINE_integer('finetune_classes', 10,
                                         'Classes of the new head.')
_BATCH = flags.DEFINE_integer('batch', 2, 'Images per comparison.')
_TOLERANCE = flags.DEFINE_float('tolerance', 1e-4, 'Largest relative error.')
_ROLE = flags.DEFINE_enum('role', 'main', ['main', 'reference'],
                          'Internal: "reference" runs the original code.')
_WORK = flags.DEFINE_string('work', None, 'Internal: exchange directory.')
_MODEL = flags.DEFINE_string('model', None, 'Internal: preset for --role.')


def _perturb(params: Any, seed: int) -> Any:
  """Adds N(0, 0.02) to every parameter so zero inits cannot hide bugs."""
  import jax  # pylint: disable=g-import-not-at-top
  leaves, treedef = jax.tree_util.tree_flatten(params)
  rng = np.random.default_rng(seed)
  noisy = [np.asarray(x) + rng.normal(0, 0.02, np.shape(x)).astype(np.float32)
           for x in leaves]
  return jax.tree_util.tree_unflatten(treedef, noisy)


def _images(resolution: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return rng.uniform(-1, 1, (_BATCH.value, resolution, resolution, 3)).astype(
      np.float32)


def _rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
  return float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30))


def _ours(name: str, work: str) -> dict[str, np.ndarray]:
  """Our side: saves the checkpoint and the fine-tune init; returns logits."""
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from vit_jax import checkpoint  # pylint: disable=g-import-not-at-top
  from vit_jax import models  # pylint: disable=g-import-not-at-top

  config = models.get_model_config(name)
  mixer = models.is_mixer(config)
  res_ft = _RESOLUTION.value if mixer else _FINETUNE_RESOLUTION.value
  images = _images(_RESOLUTION.value, 1)
  images_ft = _images(res_ft, 2)
  np.save(os.path.join(work, 'images.npy'), images)
  np.save(os.path.join(work, 'images_ft.npy'), images_ft)

  model = models.get_model(name, num_classes=_NUM_CLASSES.value)
  params = jax.jit(lambda: model.init(
      jax.random.PRNGKey(0), images[:1], train=False))()['params']
  params = _perturb(params, 0)
  ckpt = os.path.join(work, 'pretrained.npz')
  checkpoint.save(params, ckpt)
  logits = model.apply({'params': params}, images, train=False)

  model_ft = models.get_model(name, num_classes=_FINETUNE_CLASSES.value)
  init_ft = jax.jit(lambda: model_ft.init(
      jax.random.PRNGKey(1), images_ft[:1], train=False))()['params']
  # A non-zero new head, so the fine-tune logits depend on every layer.
  init_ft = dict(init_ft)
  init_ft['head'] = _perturb(init_ft['head'], 1)
  np.savez(os.path.join(work, 'init_ft.npz'), **{
      k: np.asarray(v)
      for k, v in traverse_util.flatten_dict(init_ft, sep='/').items()})
  params_ft = checkpoint.load_pretrained(
      pretrained_path=ckpt, init_params=init_ft, model_config=config)
  logits_ft = model_ft.apply({'params': params_ft}, images_ft, train=False)
  return {'logits': np.asarray(logits), 'logits_ft': np.asarray(logits_ft)}


def _reference(name: str, work: str) -> None:
  """The original code's side (child process): writes its logits to `work`."""
  sys.path.insert(0, os.path.abspath(_REFERENCE_DIR.value))
  import jax  # pylint: disable=g-import-not-at-top
  import vit_jax  # pylint: disable=g-import-not-at-top
  if not os.path.abspath(vit_jax.__file__).startswith(
      os.path.abspath(_REFERENCE_DIR.value)):
    raise RuntimeError(f'Imported {vit_jax.__file__}, not the reference code.')
  from vit_jax import checkpoint as ref_checkpoint  # pylint: disable=g-import-not-at-top
  from vit_jax import models_mixer  # pylint: disable=g-import-not-at-top
  from vit_jax import models_vit  # pylint: disable=g-import-not-at-top
  from vit_jax.configs import models as ref_configs  # pylint: disable=g-import-not-at-top

  config = ref_configs.MODEL_CONFIGS[name]
  cls = (models_mixer.MlpMixer if name.startswith('Mixer-')
         else models_vit.VisionTransformer)
  images = np.load(os.path.join(work, 'images.npy'))
  images_ft = np.load(os.path.join(work, 'images_ft.npy'))
  ckpt = os.path.join(work, 'pretrained.npz')

  params = ref_checkpoint.load(ckpt)
  model = cls(num_classes=_NUM_CLASSES.value, **config)
  logits = model.apply({'params': params}, images, train=False)

  with np.load(os.path.join(work, 'init_ft.npz')) as f:
    init_ft = ref_checkpoint.recover_tree(list(f.keys()), list(f.values()))
  params_ft = ref_checkpoint.load_pretrained(
      pretrained_path=ckpt, init_params=init_ft, model_config=config)
  model_ft = cls(num_classes=_FINETUNE_CLASSES.value, **config)
  logits_ft = model_ft.apply({'params': params_ft}, images_ft, train=False)
  np.savez(os.path.join(work, 'reference.npz'), logits=np.asarray(logits),
           logits_ft=np.asarray(logits_ft), jax_version=jax.__version__)


def _compare(name: str) -> list[tuple[str, float]]:
  with tempfile.TemporaryDirectory() as work:
    t0 = time.time()
    ours = _ours(name, work)
    t1 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__), '--role=reference',
           f'--reference_dir={_REFERENCE_DIR.value}', f'--model={name}',
           f'--work={work}', f'--num_classes={_NUM_CLASSES.value}',
           f'--finetune_classes={_FINETUNE_CLASSES.value}']
    subprocess.run(cmd, check=True)
    t2 = time.time()
    with np.load(os.path.join(work, 'reference.npz')) as f:
      ref = {k: f[k] for k in ('logits', 'logits_ft')}
  print(f'{name}: ours {t1 - t0:.0f}s, reference {t2 - t1:.0f}s', flush=True)
  rows = []
  for key, what in (('logits', f'{_RESOLUTION.value}px'),
                    ('logits_ft', 'load_pretrained, new head')):
    if ours[key].shape != ref[key].shape:
      raise SystemExit(f'{name} {what}: shapes differ, ours {ours[key].shape} '
                       f'vs reference {ref[key].shape}')
    rows.append((f'{name} {what} {ours[key].shape}',
                 _rel_err(ours[key], ref[key])))
  return rows


def main(argv: list[str]) -> None:
  del argv
  if not _REFERENCE_DIR.value or not os.path.isfile(os.path.join(
      _REFERENCE_DIR.value, 'vit_jax', 'models_vit.py')):
    raise SystemExit(f'--reference_dir={_REFERENCE_DIR.value!r} must hold '
                     'vit_jax/models_vit.py of the original repository.')
  if _ROLE.value == 'reference':
    _reference(_MODEL.value, _WORK.value)
    return
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  rows = []
  for name in _MODELS.value:
    rows.extend(_compare(name))
  parity.report_and_exit(rows, _TOLERANCE.value)


if __name__ == '__main__':
  app.run(main)
