"""Checksum manifests of checkpoint directories: written after a commit, checked before a restore.

A manifest (`manifest.json` in a checkpoint's step directory) lists every file below it
with its size and CRC32. It is written only once orbax has committed the step, so a
step whose manifest matches is exactly what was saved; bit rot, a truncated copy or an
interrupted rsync shows up as a size or checksum mismatch before anything is restored.
"""
import json
import zlib
from typing import Any, Optional

from etils import epath
import jax
import jax.numpy as jnp

from vit_jax import fileio

MANIFEST = 'manifest.json'
_VERSION = 1
_CHUNK = 1 << 22  # 4 MiB: streamed, so a checkpoint never has to fit in memory


def _files(directory: epath.Path) -> list[str]:
  """Relative paths of the files below `directory`, sorted, the manifest left out."""
  out, todo = [], [directory]
  while todo:  # epath has no recursive glob on remote storage
    for p in todo.pop().iterdir():
      if p.is_dir():
        todo.append(p)
      else:
        rel = str(p.relative_to(directory))
        if rel != MANIFEST:
          out.append(rel)
  return sorted(out)


def crc32(path: epath.Path) -> tuple[int, int]:
  """(size in bytes, CRC32) of a file, read in chunks."""
  crc, size = 0, 0
  with path.open('rb') as f:
    while chunk := f.read(_CHUNK):
      crc = zlib.crc32(chunk, crc)
      size += len(chunk)
  return size, crc


def write_manifest(step_dir: str) -> int:
  """Writes STEP_DIR/manifest.json (atomically) for the files there; returns their bytes."""
  directory = epath.Path(step_dir)
  files = {}
  for rel in _files(directory):
    size, crc = crc32(directory / rel)
    files[rel] = {'size': size, 'crc32': crc}
  manifest = {'version': _VERSION, 'files': files}
  fileio.atomic_write(str(directory / MANIFEST),
                      json.dumps(manifest, indent=1, sort_keys=True).encode())
  return sum(f['size'] for f in files.values())


def has_manifest(step_dir: str) -> bool:
  """Whether the step directory carries a manifest (steps from before manifests do not)."""
  return (epath.Path(step_dir) / MANIFEST).exists()


def verify(step_dir: str) -> Optional[str]:
  """None if every file of the manifest is there with its size and CRC32, else why not."""
  directory = epath.Path(step_dir)
  try:
    manifest = json.loads((directory / MANIFEST).read_text())
    files = manifest['files']
    if not isinstance(files, dict):
      raise TypeError('files is not a mapping')
  except FileNotFoundError:
    return f'{MANIFEST} is missing'
  except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
    return f'{MANIFEST} is unreadable ({type(e).__name__})'
  for rel, expected in sorted(files.items()):
    path = directory / rel
    if not path.exists():
      return f'{rel} is missing'
    size, crc = crc32(path)
    if size != expected['size']:
      return f'{rel} has {size} bytes, {expected["size"]} were written'
    if crc != expected['crc32']:
      return f'{rel} fails its CRC32 check'
  return None


def non_finite_leaf(tree: Any) -> Optional[str]:
  """The path of the first floating-point leaf holding a NaN or Inf, or None."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    dtype = getattr(leaf, 'dtype', None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
      continue
    if not bool(jnp.isfinite(leaf).all()):
      return jax.tree_util.keystr(path, simple=True, separator='/')
  return None
