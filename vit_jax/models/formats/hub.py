"""Checkpoints by Hugging Face Hub name: `hf-hub:ORG/NAME[@REVISION]` (timm's spelling).

`resolve` turns a hub name into the local path the format readers take, through
huggingface_hub's cache ($HF_HUB_CACHE, else $HF_HOME/hub): with HF_HUB_OFFLINE=1 from what
is cached, online downloading what is missing. A transformers repository resolves to its
snapshot directory (config.json + weights), a timm one to its weights file (timm's
config.json beside it names the architecture, which the timm reader takes). Any other path
passes through unchanged. `write_folder` writes a transformers-loadable repository folder
(with its model card) and `push` uploads one.

huggingface_hub's top-level import is lazy: its download code loads on the first call. Its
constants (HF_HUB_OFFLINE, HF_HUB_CACHE) are read from the environment when it is imported.
"""
import json
import os
import re
import shutil
import tempfile
from typing import Any, Mapping, Optional, Sequence

import huggingface_hub
from huggingface_hub import constants as hub_constants
from huggingface_hub import errors as hub_errors

from vit_jax import errors
from vit_jax import fileio
from vit_jax.models import formats
from vit_jax.models.formats import files

Params = dict[str, Any]

PREFIX = 'hf-hub:'
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*')
_EXAMPLE = 'hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k'
# What a checkpoint needs: its configs and the safetensors weights (one file or transformers'
# shards); torch weights only where a repository has no safetensors (timm and transformers
# repositories hold both). Other weights beside them (open_clip's, ONNX) stay on the Hub.
_SAFETENSORS = ['*.json', 'model.safetensors', 'model-*-of-*.safetensors']
_TORCH = ['*.json', 'pytorch_model.bin', 'pytorch_model-*-of-*.bin']
# timm's weight files, in the order its loader prefers them.
_TIMM_WEIGHTS = ('model.safetensors', 'pytorch_model.bin')


def is_hub_name(path: str) -> bool:
  """Whether `path` names a checkpoint on the Hub (starts with hf-hub:)."""
  return isinstance(path, str) and path.startswith(PREFIX)


def parse(name: str) -> tuple[str, Optional[str]]:
  """(repository id, revision or None) of `hf-hub:ORG/NAME[@REVISION]`; one line if malformed."""
  rest = name[len(PREFIX):]
  repo_id, at, revision = rest.partition('@')
  if not _NAME.fullmatch(repo_id) or '..' in repo_id or (at and not revision.strip()):
    raise ValueError(f'{name!r} is no hub name: write hf-hub:ORG/NAME or '
                     f'hf-hub:ORG/NAME@REVISION (e.g. {_EXAMPLE}).')
  return repo_id, (revision if at else None)


def offline() -> bool:
  """Whether huggingface_hub is told to stay offline (HF_HUB_OFFLINE=1, read at its import)."""
  return bool(hub_constants.HF_HUB_OFFLINE)


def default_cache() -> str:
  """huggingface_hub's cache directory: $HF_HUB_CACHE, else $HF_HOME/hub."""
  return hub_constants.HF_HUB_CACHE


def cached_refs(repo_id: str) -> tuple[list[str], int]:
  """(the refs: branches and tags, the number of snapshots) the cache holds for a repository."""
  folder = os.path.join(default_cache(), 'models--' + repo_id.replace('/', '--'))
  refs_dir = os.path.join(folder, 'refs')
  refs = sorted(os.path.relpath(os.path.join(root, f), refs_dir)
                for root, _, names in os.walk(refs_dir) for f in names)
  snapshots = os.path.join(folder, 'snapshots')
  return refs, len(os.listdir(snapshots)) if os.path.isdir(snapshots) else 0


def _not_cached(name: str, repo_id: str, revision: Optional[str],
                cause: BaseException) -> Exception:
  """The one-line error for a name the cache lacks, offline or with the Hub unreachable."""
  refs, snapshots = cached_refs(repo_id)
  what = (f'revision {revision!r} of {repo_id} is not in the Hugging Face cache (it holds '
          f'{", ".join(refs) or "no refs"}; {snapshots} snapshots)' if snapshots and revision
          else f'{name} is not in the Hugging Face cache {default_cache()}')
  if offline():
    return FileNotFoundError(f'{what}, and HF_HUB_OFFLINE=1 forbids downloading it: run '
                             'once online, or copy a cache that holds it.')
  return FileNotFoundError(f'{what}, and the Hub is unreachable '
                           f'({errors.first_line(cause, 60)}): check the network, or set '
                           'HF_HUB_OFFLINE=1 to use only the cache.')


def _download(repo_id: str, revision: Optional[str], patterns: list[str]) -> str:
  return huggingface_hub.snapshot_download(
      repo_id, revision=revision, allow_patterns=patterns, local_files_only=offline(),
      library_name='vit_jax')


def snapshot(name: str) -> str:
  """The cached snapshot directory of a hub name, downloaded first where it is missing."""
  repo_id, revision = parse(name)
  try:
    folder = _download(repo_id, revision, _SAFETENSORS)
    if not any(f.endswith('.safetensors') for f in os.listdir(folder)):
      folder = _download(repo_id, revision, _TORCH)
  except hub_errors.RevisionNotFoundError:
    raise ValueError(f'{name}: {repo_id} has no revision {revision!r}; name a branch, tag or '
                     'commit of it (default: main).') from None
  except (hub_errors.RepositoryNotFoundError, hub_errors.GatedRepoError):
    raise FileNotFoundError(f'{name}: no repository {repo_id} on the Hub, or it is private or '
                            'gated: check the name, or log in (hf auth login, or HF_TOKEN).'
                            ) from None
  except hub_errors.LocalEntryNotFoundError as e:
    raise _not_cached(name, repo_id, revision, e) from None
  except hub_errors.HFValidationError as e:
    raise ValueError(f'{name}: {errors.first_line(e, 120)}') from None
  except hub_errors.HfHubHTTPError as e:
    raise OSError(f'Cannot download {name}: {errors.first_line(e, 120)}') from None
  return folder


def checkpoint_in(folder: str, name: str) -> str:
  """The checkpoint a repository snapshot holds: the folder (transformers) or timm's weights."""
  present = sorted(os.listdir(folder))
  if files.timm_config(folder) is None and 'config.json' in present:
    return folder  # transformers: the directory reader takes config.json and the weights
  weights = [f for f in _TIMM_WEIGHTS if f in present]
  if 'config.json' in present and weights:
    return os.path.join(folder, weights[0])
  raise ValueError(f'{name} holds no checkpoint vit_jax reads (a transformers or timm '
                   'config.json with model.safetensors or pytorch_model.bin); it has '
                   f'{", ".join(present)[:100] or "nothing"}.')


def resolve(path: str) -> str:
  """The local checkpoint a hub name stands for (see the module docstring); other paths as given."""
  if not is_hub_name(path):
    return path
  return checkpoint_in(snapshot(path), path)


def check_push(repo_id: str) -> None:
  """One line unless `repo_id` is ORG/NAME and huggingface_hub may go online."""
  if not _NAME.fullmatch(repo_id or ''):
    raise ValueError(f'--push_to_hub={repo_id!r}: name the repository ORG/NAME (your user '
                     'or organisation, then the model).')
  if offline():
    raise ValueError(f'--push_to_hub={repo_id}: HF_HUB_OFFLINE=1 forbids uploading; unset it, '
                     'or write the folder with --hub_dir and upload it later.')


def push(folder: str, repo_id: str, private: bool = False) -> str:
  """Creates (or reuses) model repository `repo_id` and uploads `folder`; returns its URL."""
  check_push(repo_id)
  api = huggingface_hub.HfApi(library_name='vit_jax')
  try:
    url = api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder,
                      commit_message='Upload from vit_jax.export')
  except (hub_errors.HfHubHTTPError, hub_errors.LocalTokenNotFoundError) as e:
    raise OSError(f'Cannot upload to {repo_id}: {errors.first_line(e, 120)} (log in: hf auth '
                  'login, or set HF_TOKEN).') from None
  return str(url)


def check_folder(directory: str) -> None:
  """One line unless `directory` is absent or an empty directory (a repository folder goes there)."""
  if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
    raise FileExistsError(f'Cannot write {directory}: it exists and is not an empty '
                          'directory; remove it or pick a new path.')


def write_folder(params: Params, directory: str, *, card: str,
                 options: Optional[Mapping[str, Any]] = None,
                 label_names: Optional[Sequence[str]] = None) -> None:
  """Writes a transformers-loadable repository folder: the hf format plus README.md.

  `label_names` (one per output) become config.json's id2label / label2id. The folder is
  built beside `directory` and renamed into place, so it appears whole or not at all.
  """
  directory = os.path.abspath(directory.rstrip('/'))
  check_folder(directory)
  parent = os.path.dirname(directory)
  files.check_writable_file(os.path.join(parent, os.path.basename(directory)))
  staging = tempfile.mkdtemp(dir=parent, prefix='.tmp-hub-')
  try:
    folder = os.path.join(staging, 'repo')
    formats.write(params, folder + '/', to_format='hf', options=options)
    if label_names:
      config_path = os.path.join(folder, 'config.json')
      config = files.read_json(config_path)
      config['id2label'] = {str(i): str(n) for i, n in enumerate(label_names)}
      config['label2id'] = {str(n): i for i, n in enumerate(label_names)}
      fileio.atomic_write(config_path, (json.dumps(config, indent=2, sort_keys=True) +
                                        '\n').encode())
    fileio.atomic_write(os.path.join(folder, 'README.md'), card.encode())
    if os.path.isdir(directory):
      os.rmdir(directory)  # empty, checked above
    os.rename(folder, directory)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
