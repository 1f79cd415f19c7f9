r"""Top-5 predictions of a checkpoint on image files, and the checkpoint -> model loader.

  python -m vit_jax.predict --model=ViT-B_16 --checkpoint=ViT-B_16.npz cat.jpg dog.png

The model's resolution is read from the checkpoint (its position embeddings, or the
Mixer's token-mixing width); --resolution=N runs a ViT at another one by
interpolating the position embeddings. Images of any size are resized to it
(bilinear, no crop: the original vit_jax evaluation) and scaled to [-1, 1].
Class names: --labels=imagenet1k|imagenet21k (shipped in vit_jax/labels/) or
a dataset name as in config.dataset (cifar10, mnist5k, tfds:NAME, ...); by
default imagenet1k for 1,000 outputs, imagenet21k for 21,843, else indices.
"""
from collections.abc import Mapping, Sequence
import dataclasses
import importlib.resources
import json
import math
import os
import sys
from typing import Any, Optional

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import UnidentifiedImageError

from vit_jax import checkpoint
from vit_jax import models

SHIPPED_LABELS = {'imagenet1k': 1000, 'imagenet21k': 21843}
_POSEMB = ('Transformer', 'posembed_input', 'pos_embedding')
_TOKEN_CLASSIFIERS = ('token', 'token_unpooled')


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A model built to fit a checkpoint, its parameters and its input resolution."""
  name: str
  model: nn.Module
  params: dict[str, Any]
  resolution: int

  @property
  def num_classes(self) -> int:
    """Number of head outputs (0 for a checkpoint without a head)."""
    head = self.params.get('head')
    return int(head['kernel'].shape[-1]) if head else 0


def _get(tree: Mapping[str, Any], path: Sequence[str]) -> Optional[Any]:
  for key in path:
    if not isinstance(tree, Mapping) or key not in tree:
      return None
    tree = tree[key]
  return tree


def _flat_shapes(tree: Mapping[str, Any], prefix: str = '') -> dict[str, tuple]:
  out = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      out.update(_flat_shapes(value, f'{prefix}{key}/'))
    else:
      out[prefix + key] = tuple(value.shape)
  return out


def _token_count(model: nn.Module, resolution: int) -> int:
  """Patch tokens the model makes from a resolution x resolution image."""
  images = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)
  if isinstance(model, models.MlpMixer):
    kernel = variables['params']['MixerBlock_0']['token_mixing']['Dense_0']['kernel']
    return int(kernel.shape[0])
  tokens = int(_get(variables['params'], _POSEMB).shape[1])
  return tokens - int(model.classifier in _TOKEN_CLASSIFIERS)


def model_stride(model: nn.Module) -> int:
  """Input pixels per patch side, including a hybrid's ResNet downsampling."""
  patch = int(model.patches['size'][0])
  # Hybrid ResNets downsample by at most 32, so 32 patches always divide evenly.
  probe = 32 * patch
  grid = math.isqrt(_token_count(model, probe))
  return probe // grid


def _checkpoint_grid(params: Mapping[str, Any], mixer: bool, has_token: bool,
                     path: str, name: str) -> int:
  """Side of the square patch grid the checkpoint was trained on."""
  if mixer:
    kernel = _get(params, ('MixerBlock_0', 'token_mixing', 'Dense_0', 'kernel'))
    what = 'MixerBlock_0/token_mixing/Dense_0/kernel'
    tokens = None if kernel is None else int(kernel.shape[0])
  else:
    posemb = _get(params, _POSEMB)
    what = '/'.join(_POSEMB)
    tokens = None if posemb is None else int(posemb.shape[1]) - int(has_token)
  if tokens is None:
    raise ValueError(f'Checkpoint {path} has no {what}; it does not fit model '
                     f'{name!r}. Pick the --model it was trained as.')
  grid = math.isqrt(max(tokens, 0))
  if grid * grid != tokens or grid == 0:
    raise ValueError(f'Checkpoint {path}: {what} holds {tokens} patch tokens, not '
                     f'a square grid, so it does not fit model {name!r}.')
  return grid


def workdir_model(checkpoint_path: str) -> tuple[str, dict[str, Any]]:
  """(model_name, get_model overrides) from the config.json beside a workdir's params.npz."""
  path = os.path.join(os.path.dirname(os.path.abspath(checkpoint_path)),
                      'config.json')
  if not os.path.exists(path):
    raise ValueError(f'No --model given and no {path}: name the preset with --model '
                     '(e.g. --model=ViT-B_16), or pass the params.npz of a vit_jax '
                     'workdir.')
  try:
    with open(path) as f:
      config = ml_collections.ConfigDict(json.load(f))
    name = config.model_name
  except (ValueError, AttributeError, TypeError) as e:
    raise ValueError(f'{path} is not a vit_jax training config ({e}); pass '
                     '--model.') from None
  from vit_jax import train  # pylint: disable=g-import-not-at-top  # heavy: only here
  overrides = train.model_overrides(config, num_classes=0)
  # Head and pre-logits are read from the checkpoint itself.
  for key in ('num_classes', 'representation_size'):
    overrides.pop(key, None)
  return name, overrides


def load_model(model_name: Optional[str], checkpoint_path: str,
               resolution: Optional[int] = None,
               **overrides: Any) -> LoadedModel:
  """Builds `model_name` to fit the .npz at `checkpoint_path` (head, pre-logits, grid).

  Without `model_name`, the model (preset and overrides) comes from the
  config.json of the workdir holding the checkpoint. `resolution` (default: the
  checkpoint's) re-grids a ViT's position embeddings; `overrides` go to
  models.get_model (e.g. dtype='bfloat16').
  """
  params = checkpoint.load(checkpoint_path)
  if model_name is None:
    model_name, saved = workdir_model(checkpoint_path)
    overrides = {**saved, **overrides}
  config = models.get_model_config(model_name)
  mixer = models.is_mixer(config)
  kwargs = dict(overrides)
  head = _get(params, ('head', 'kernel'))
  kwargs['num_classes'] = 0 if head is None else int(head.shape[-1])
  if not mixer:
    pre_logits = _get(params, ('pre_logits', 'kernel'))
    kwargs['representation_size'] = (None if pre_logits is None
                                     else int(pre_logits.shape[-1]))
  model = models.get_model(model_name, **kwargs)
  has_token = not mixer and model.classifier in _TOKEN_CLASSIFIERS
  grid = _checkpoint_grid(params, mixer, has_token, checkpoint_path, model_name)
  stride = model_stride(model)
  native = grid * stride
  if resolution is None or resolution == native:
    resolution = native
  else:
    if resolution <= 0 or resolution % stride:
      raise ValueError(f'--resolution={resolution} must be a positive multiple of '
                       f'{stride}, the patch size of {model_name!r} in pixels.')
    if mixer:
      raise ValueError(f'{model_name!r} is an MLP-Mixer: its token mixing fixes the '
                       f'resolution to {native}; drop --resolution.')
    new_grid = resolution // stride
    posemb = checkpoint.interpolate_posemb(
        np.asarray(_get(params, _POSEMB)), (new_grid, new_grid), has_token)
    params['Transformer']['posembed_input']['pos_embedding'] = posemb
  _check_fits(model, params, resolution, checkpoint_path, model_name)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
  return LoadedModel(model_name, model, params, resolution)


def _check_fits(model: nn.Module, params: Mapping[str, Any], resolution: int,
                path: str, name: str) -> None:
  """Raises a one-line error naming the first parameters that do not fit."""
  images = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
  expected = _flat_shapes(
      jax.eval_shape(model.init, jax.random.PRNGKey(0), images)['params'])
  got = _flat_shapes(params)
  missing = sorted(set(expected) - set(got))
  extra = sorted(set(got) - set(expected))
  wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
  problems = []
  if missing:
    problems.append(f'lacks {len(missing)} parameters (first: {missing[0]})')
  if extra:
    problems.append(f'has {len(extra)} parameters the model does not (first: '
                    f'{extra[0]})')
  if wrong:
    problems.append(f'{wrong[0]} has shape {got[wrong[0]]}, expected '
                    f'{expected[wrong[0]]}' + (
                        f' (+{len(wrong) - 1} more)' if len(wrong) > 1 else ''))
  if problems:
    raise ValueError(f'Checkpoint {path} does not fit model {name!r}: '
                     f'{"; ".join(problems)}. Pick the --model it was trained as.')


def load_image(path: str, resolution: int) -> np.ndarray:
  """Reads a JPEG/PNG (any size or mode) as float32 [resolution, resolution, 3] in [-1, 1]."""
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f'Image {path} does not exist; check the path.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Image {path} is a directory; pass image files.')
  try:
    with Image.open(path) as img:
      # Phone photos store their rotation in EXIF; apply it as a viewer would.
      img = ImageOps.exif_transpose(img).convert('RGB')
      img = img.resize((resolution, resolution), Image.BILINEAR)
  except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise ValueError(f'Cannot read image {path} ({reason}); pass a valid JPEG or '
                     'PNG file.') from None
  return np.asarray(img, np.float32) / 127.5 - 1.0


def load_label_names(labels: str, data_dir: Optional[str] = None) -> list[str]:
  """Class names of 'imagenet1k', 'imagenet21k' or a training dataset, in output order."""
  if labels in SHIPPED_LABELS:
    text = (importlib.resources.files('vit_jax') / 'labels' /
            f'{labels}.txt').read_text(encoding='utf-8')
    return [line.split('\t', 1)[-1] for line in text.splitlines() if line]
  from vit_jax import datasets  # pylint: disable=g-import-not-at-top  # imports TF
  try:
    datasets.resolve(labels)
  except ValueError:
    raise ValueError(f'Unknown label set {labels!r}: use imagenet1k, imagenet21k or a '
                     'dataset name vit_jax trains on (e.g. cifar10, mnist5k, '
                     'tfds:NAME).') from None
  config = ml_collections.ConfigDict({
      'dataset': labels, 'train_split': '', 'eval_split': '', 'data_dir': data_dir,
      'manual_dir': None})
  return list(datasets.get_dataset_info(config).label_names)


def default_labels(num_classes: int) -> Optional[str]:
  """The shipped label set with `num_classes` entries, if any."""
  for name, count in SHIPPED_LABELS.items():
    if count == num_classes:
      return name
  return None


def make_predict_fn(loaded: LoadedModel, activation: str = 'softmax'):
  """Returns a jitted images [N, H, W, 3] in [-1, 1] -> class probabilities [N, C]."""
  if activation not in ('softmax', 'sigmoid'):
    raise ValueError(f'Unknown activation {activation!r}; use softmax or sigmoid.')
  if not loaded.num_classes:
    raise ValueError(f'Checkpoint for {loaded.name!r} has no classification head '
                     '(no head/kernel); it cannot predict classes.')
  act = jax.nn.softmax if activation == 'softmax' else jax.nn.sigmoid

  @jax.jit
  def predict_fn(params, images):
    return act(loaded.model.apply({'params': params}, images, train=False))

  return lambda images: np.asarray(predict_fn(loaded.params, images))


def top_k(probs: np.ndarray, names: Sequence[str],
          k: int = 5) -> list[list[tuple[str, float]]]:
  """The k most probable (name, probability) pairs of each row of `probs`."""
  order = np.argsort(-probs, axis=-1, kind='stable')[:, :k]
  return [[(names[i], float(row[i])) for i in idx]
          for row, idx in zip(probs, order)]


def predict_files(loaded: LoadedModel, paths: Sequence[str],
                  names: Sequence[str], activation: str = 'softmax',
                  k: int = 5, batch_size: int = 16) -> list[list[tuple[str, float]]]:
  """Top-k (name, probability) for each image file, in the order of `paths`."""
  if len(names) != loaded.num_classes:
    raise ValueError(f'The label set has {len(names)} names but the checkpoint has '
                     f'{loaded.num_classes} outputs; pass a matching --labels.')
  images = [load_image(p, loaded.resolution) for p in paths]
  predict_fn = make_predict_fn(loaded, activation)
  results = []
  for start in range(0, len(images), batch_size):
    probs = predict_fn(np.stack(images[start:start + batch_size]))
    results.extend(top_k(probs, names, k))
  return results


FLAGS = flags.FLAGS


def define_checkpoint_flags() -> None:
  """--model and --checkpoint, shared by the predict/visualize/fewshot commands."""
  flags.DEFINE_string('model', None, 'Model preset, e.g. ViT-B_16; default: from '
                      'config.json beside the checkpoint (a vit_jax workdir).')
  flags.DEFINE_string('checkpoint', None, 'Checkpoint .npz (local or gs://).',
                      required=True)


def _define_flags() -> None:
  define_checkpoint_flags()
  flags.DEFINE_string('labels', None, 'imagenet1k | imagenet21k | a dataset name '
                      '(as in config.dataset); default: by the number of outputs.')
  flags.DEFINE_integer('resolution', None, 'Input resolution; default: the '
                       "checkpoint's.")
  flags.DEFINE_enum('activation', 'auto', ['auto', 'softmax', 'sigmoid'],
                    'auto: sigmoid for imagenet21k (multi-label heads), else softmax.')
  flags.DEFINE_integer('top', 5, 'How many classes to print per image.')
  flags.DEFINE_string('data_dir', None, 'TFDS data dir for --labels=DATASET.')


def main(argv: Sequence[str]) -> None:
  """Prints the top classes of every image named on the command line."""
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # keep the output to the results
  paths = argv[1:]
  if not paths:
    raise app.UsageError('Name at least one image file.')
  loaded = load_model(FLAGS.model, FLAGS.checkpoint, FLAGS.resolution)
  labels = FLAGS.labels or default_labels(loaded.num_classes)
  names = (load_label_names(labels, FLAGS.data_dir) if labels else
           [f'class {i}' for i in range(loaded.num_classes)])
  activation = FLAGS.activation
  if activation == 'auto':
    activation = 'sigmoid' if labels == 'imagenet21k' else 'softmax'
  results = predict_files(loaded, paths, names, activation, FLAGS.top)
  for path, best in zip(paths, results):
    print(path)
    for name, prob in best:
      print(f'  {prob:7.2%}  {name}')


def run_command(prog: str, define_flags, main_fn, errors: tuple) -> None:
  """Runs an absl main with one-line errors instead of tracebacks for bad input."""
  define_flags()
  try:
    app.run(main_fn)
  except errors as e:
    print(f'{prog}: error: {e}', file=sys.stderr)
    sys.exit(1)


def run() -> None:
  """Console entry point of `python -m vit_jax.predict`."""
  run_command('vit_jax.predict', _define_flags, main, (ValueError, OSError))


if __name__ == '__main__':
  run()
