"""A model built to fit a checkpoint file: architecture from the tree or the workdir's config.

`load_model(model_name, path)` reads the parameters, takes the head width, the pre-logits
layer and the patch grid from them (through the model family's record), and checks that
every parameter fits. Without a model name, the preset and overrides come from the
`config.json` that a training run leaves beside its `params.npz`.
"""
import dataclasses
import json
import math
import os
from typing import Any, Mapping, Optional

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import checkpoint
from vit_jax import fileio
from vit_jax import models
from vit_jax import rundir
from vit_jax.models import families
from vit_jax.models import formats
from vit_jax.models import fp8
from vit_jax.models import from_config
from vit_jax.models.formats import hub

CONFIG_FILE = rundir.CONFIG_FILE


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
    head = self.params.get(models.family_of(self.model).head_keys[0])
    return int(head['kernel'].shape[-1]) if head else 0


def _shapes(tree: Mapping[str, Any]) -> dict[str, tuple]:
  return {'/'.join(k): tuple(v.shape)
          for k, v in traverse_util.flatten_dict(dict(tree)).items()}


def _abstract_params(model: nn.Module, resolution: int) -> Any:
  images = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
  # fp8_delayed amax histories are train state, never in a checkpoint's parameters.
  return fp8.split_histories(
      jax.eval_shape(model.init, jax.random.PRNGKey(0), images)['params'])[0]


def _probe_resolution(model: nn.Module) -> int:
  # Hybrid ResNets downsample by at most 32, so 32 patches always divide evenly.
  return 32 * int(model.patches['size'][0])


def model_stride(model: nn.Module, probe_params: Optional[Any] = None) -> int:
  """Input pixels per patch side, including a hybrid's ResNet downsampling.

  `probe_params`: the model's abstract parameters at its probe resolution, if made already.
  """
  probe = _probe_resolution(model)
  if probe_params is None:
    probe_params = _abstract_params(model, probe)
  tokens = models.family_of(model).patch_tokens(model, probe_params)
  return probe // math.isqrt(tokens)


def resolve_checkpoint(path: str) -> str:
  """The checkpoint a --checkpoint names: `~` is home, a vit_jax workdir its params.npz,
  hf-hub:ORG/NAME[@REVISION] the repository in huggingface_hub's cache (formats.hub).

  A local path must exist. A work directory holds params.npz beside its config.json
  (which a transformers directory also has, of another kind); one whose run has not
  finished is an error.
  """
  if hub.is_hub_name(path):
    return hub.resolve(path)
  path = os.path.expanduser(os.fspath(path))
  if fileio.is_remote(path):
    return path
  if not os.path.exists(path):
    # Said first: every later question (which dataset, which model) is moot without it.
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path.')
  if not os.path.isdir(path):
    return path
  params = os.path.join(path, rundir.PARAMS_FILE)
  if os.path.isfile(params) and os.path.isfile(os.path.join(path, CONFIG_FILE)):
    return params
  if any(os.path.exists(os.path.join(path, f)) for f in (rundir.CHECKPOINT_DIR, rundir.METRICS_FILE)):
    raise ValueError(f'{path} is a vit_jax work directory without {rundir.PARAMS_FILE}: its '
                     'run has not finished. Run it to the end (the same command resumes it), '
                     'then pass the directory again.')
  return path


def workdir_config_path(checkpoint_path: str) -> str:
  """The config.json a training run leaves beside its params.npz."""
  return os.path.join(os.path.dirname(os.path.abspath(checkpoint_path)), CONFIG_FILE)


def workdir_config(checkpoint_path: str) -> Optional[dict[str, Any]]:
  """The config.json beside the checkpoint as a dict, or None if absent or unreadable."""
  return rundir.read_config(os.path.dirname(workdir_config_path(checkpoint_path)))


def workdir_dataset(checkpoint_path: str) -> Optional[tuple[str, Optional[str]]]:
  """(dataset, data_dir) of the run whose config.json sits beside the checkpoint, if any."""
  config = workdir_config(checkpoint_path)
  try:
    return str(config['dataset']), config.get('data_dir')
  except (KeyError, TypeError):
    return None  # not a vit_jax config: the labels fall back to class indices


def workdir_objective(checkpoint_path: str) -> Optional[tuple[str, dict[str, Any], str]]:
  """(objective, its options, its params file) of a self-supervised run, if the
  checkpoint's workdir holds one (e.g. MAE's decoder in mae_params.npz)."""
  config = workdir_config(checkpoint_path)
  try:
    name = str(config.get('objective', 'supervised'))
    options = dict(config.get('objectives', {}).get(name, {}))
  except (TypeError, AttributeError, ValueError):
    return None
  directory = os.path.dirname(workdir_config_path(checkpoint_path))
  extra = os.path.join(directory, f'{name}_{os.path.basename(checkpoint_path)}')
  if name == 'supervised' or not os.path.isfile(extra):
    return None
  return name, options, extra


def workdir_model(checkpoint_path: str) -> tuple[str, dict[str, Any]]:
  """(model_name, get_model overrides) from the config.json beside a workdir's params.npz."""
  path = workdir_config_path(checkpoint_path)
  if not os.path.exists(path):
    raise ValueError(f'No --model given and no {path}: name the preset with --model '
                     '(e.g. --model=ViT-B_16), or pass the params.npz of a vit_jax '
                     'workdir.')
  try:
    with open(path) as f:
      config = ml_collections.ConfigDict(json.load(f))
    name = config.model_name
    overrides = from_config.model_kwargs(name, config.model, num_classes=0)
  except (ValueError, AttributeError, TypeError, KeyError) as e:
    raise ValueError(f'{path} is not a vit_jax training config ({e}); pass '
                     '--model.') from None
  # The head and what else the tree fixes are read from the checkpoint itself.
  overrides.pop('num_classes', None)
  overrides.pop('representation_size', None)
  return name, overrides


def load_model(model_name: Optional[str], checkpoint_path: str,
               resolution: Optional[int] = None, num_heads: Optional[int] = None,
               **overrides: Any) -> LoadedModel:
  """Builds `model_name` to fit the checkpoint at `checkpoint_path` (head, pre-logits, grid).

  The checkpoint is an .npz, a timm state dict, a transformers directory or a vit_jax
  work directory (its params.npz).
  Without `model_name`, the model (preset and overrides) comes from the config.json of
  the workdir holding the checkpoint. `resolution` (default: the checkpoint's)
  re-grids learned position embeddings; `num_heads` is the head count a timm state
  dict does not record (needed where no preset has its size); `overrides` go to
  models.get_model (e.g. dtype='bfloat16').
  """
  checkpoint_path = resolve_checkpoint(checkpoint_path)
  if formats.is_other_format(checkpoint_path):
    # timm / transformers: the file (or model_name, checked) gives the model.
    read = formats.read(checkpoint_path, model=model_name, num_heads=num_heads)
    params, model_name = read.params, read.model_name
    overrides = {**read.overrides, **overrides}
  else:
    params = checkpoint.load(checkpoint_path)
    formats.check_params(params, checkpoint_path)  # formats.read checked the others
  from_workdir = model_name is None
  if from_workdir:
    model_name, saved = workdir_model(checkpoint_path)
    overrides = {**saved, **overrides}
  family = models.family_of(model_name)
  head = families.get_path(params, (family.head_keys[0], 'kernel'))
  # What the run's config (or the checkpoint's format) states wins over what the shapes
  # imply: on tiny grids they can be ambiguous (a 3x3 embedding after 5 register and class
  # tokens also reads as 2x2 + 5). _check_fits below refuses a statement the tree contradicts.
  kwargs = {**family.fields_from_params(params), **overrides,
            'num_classes': 0 if head is None else int(head.shape[-1])}
  model = models.get_model(model_name, **kwargs)
  probe_params = _abstract_params(model, _probe_resolution(model))
  # Before the patch grid: another model's tree would be reported as an odd token count.
  _check_architecture(
      probe_params, params, checkpoint_path,
      os.path.join(os.path.dirname(checkpoint_path), CONFIG_FILE) if from_workdir else None,
      model_name)
  tokens = family.patch_tokens(model, params)
  if tokens is None and getattr(model, 'posemb', 'learn') == 'sincos2d':
    return _load_fixed_posemb(model_name, model, params, checkpoint_path, resolution)
  if tokens is None:
    raise ValueError(f'Checkpoint {checkpoint_path} lacks the parameters that fix the '
                     f'patch grid of a {family.name} model, so it does not fit model '
                     f'{model_name!r}. Pick the --model it was trained as.')
  grid, _ = families.square_grid(
      tokens, f'Checkpoint {checkpoint_path} (model {model_name!r})')
  stride = model_stride(model, probe_params)
  native = grid * stride
  if resolution is None or resolution == native:
    resolution = native
  else:
    if resolution <= 0 or resolution % stride:
      raise ValueError(f'--resolution={resolution} must be a positive multiple of '
                       f'{stride}, the patch size of {model_name!r} in pixels.')
    if family.posemb_path is None:
      raise ValueError(f'{model_name!r} has no position embeddings to interpolate: its '
                       f'parameters fix the resolution to {native}; drop --resolution.')
    new_grid = resolution // stride
    *parent, leaf = family.posemb_path
    node = families.get_path(params, tuple(parent))
    # Every prefix token the embedding covers (class, distillation, registers) keeps its own.
    node[leaf] = checkpoint.interpolate_posemb(
        np.asarray(node[leaf]), (new_grid, new_grid), family.posemb_prefix_tokens(model))
  _check_fits(model, params, resolution, checkpoint_path, model_name)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
  return LoadedModel(model_name, model, params, resolution)


def _load_fixed_posemb(model_name: str, model: nn.Module, params: Any, checkpoint_path: str,
                       resolution: Optional[int]) -> LoadedModel:
  """A posemb=sincos2d model: its table is recomputed at any grid, so the tree fixes none.

  The resolution is `resolution`, else the crop of the run beside the checkpoint.
  """
  if resolution is None:
    pp = (workdir_config(checkpoint_path) or {}).get('pp') or {}
    resolution = pp.get('crop') if isinstance(pp, Mapping) else None
  stride = int(model.patches['size'][0])
  if (model.resnet is not None or not isinstance(resolution, int) or resolution <= 0 or
      resolution % stride):
    raise ValueError(f'{checkpoint_path}: model {model_name!r} has a fixed sin-cos position '
                     f'embedding; pass --resolution (a multiple of {stride} pixels).')
  _check_fits(model, params, resolution, checkpoint_path, model_name)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
  return LoadedModel(model_name, model, params, resolution)


def reinitialized(loaded: LoadedModel, seed: int) -> LoadedModel:
  """The same model and resolution with freshly initialised parameters (a baseline)."""
  params, _ = fp8.split_histories(loaded.model.init(
      jax.random.PRNGKey(seed),
      jnp.zeros((1, loaded.resolution, loaded.resolution, 3), jnp.float32))['params'])
  return dataclasses.replace(loaded, params=jax.tree.map(np.asarray, params))


def _check_architecture(model_params: Any, params: Mapping[str, Any], path: str,
                        config_path: Optional[str], name: str) -> None:
  """One-line error naming the sizes (width, layers, ...) where `params` misfit the model.

  `model_params` are the model's abstract parameters at any resolution: the sizes compared
  do not depend on it.
  """
  found = formats.tree_differences(params, model_params)
  if found is None or not found[2]:
    return  # None: a tree these sizes do not describe, which _check_fits names
  diff = found[2]
  # The first three (width and depth lead) keep the line short.
  sizes = ', '.join(diff[:3]) + (f', +{len(diff) - 3} more' if len(diff) > 3 else '')
  if config_path:
    raise ValueError(f'Checkpoint {path} does not fit the model in {config_path} (weights '
                     f'vs config: {sizes}); pass that run\'s own params.npz, or --model.')
  raise ValueError(f'Checkpoint {path} does not fit model {name!r} (weights vs model: '
                   f'{sizes}). Pick the --model it was trained as.')


def _check_fits(model: nn.Module, params: Mapping[str, Any], resolution: int,
                path: str, name: str) -> None:
  """Raises a one-line error naming the first parameters that do not fit."""
  expected = _shapes(_abstract_params(model, resolution))
  got = _shapes(params)
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
