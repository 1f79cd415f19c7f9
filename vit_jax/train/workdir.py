"""The work directory: created writable, and left as it was by a run that never stepped.

A run that fails before its first step (a dataset that cannot be prepared, a checkpoint
that does not fit) has produced nothing worth keeping: a work directory it created is
removed, and one that existed (a resume) loses only what the run added to it. Files a
run rewrites (config.json) are written after its first step, so they need no undo.
"""
import logging
from typing import Optional

from etils import epath
import jax

from vit_jax import errors

# Never removed: damaged checkpoints moved aside by the resume are kept for inspection.
KEEP = ('checkpoints_corrupt',)


def prepare(workdir: str) -> None:
  """Creates the workdir and proves it is writable, with a one-line error if not."""
  probe = epath.Path(workdir, f'.write_probe_{jax.process_index()}')
  try:
    epath.Path(workdir).mkdir(parents=True, exist_ok=True)
    probe.write_text('ok')
    probe.unlink()
  except Exception as e:  # pylint: disable=broad-except  (OSError, GCS errors)
    reason = getattr(e, 'strerror', None) or errors.first_line(e)
    raise ValueError(f'--workdir={workdir} is not writable ({reason}); '
                     'choose a directory you can write to.') from None


class UndoUntilFirstStep:
  """Context manager: on an exception before `started()`, removes what the run added."""

  def __init__(self, workdir: str):
    self._path = epath.Path(workdir)
    self._created = None  # the outermost directory that mkdir(parents=True) will make
    self._before = None   # else the names in the existing workdir
    self._started = False
    try:
      self._created = _first_missing(self._path)
      if self._created is None:
        self._before = _entries(self._path)
    except Exception:  # pylint: disable=broad-except  (unreadable: then nothing is undone)
      self._created = self._before = None

  def started(self) -> None:
    """Marks the first step done: from here on the work directory is the run's."""
    self._started = True

  def __enter__(self) -> 'UndoUntilFirstStep':
    return self

  def __exit__(self, exc_type, exc, tb) -> bool:
    if exc_type is not None and not self._started:
      self._undo()
    return False  # the exception goes on

  def _undo(self) -> None:
    try:
      if self._created is not None:
        if self._created.exists():
          self._created.rmtree()
        return
      if self._before is None:
        return
      for name in sorted(_entries(self._path) - self._before - set(KEEP)):
        entry = self._path / name
        if entry.is_dir():
          entry.rmtree()
        else:
          entry.unlink()
    except Exception as e:  # pylint: disable=broad-except  (the run's error matters more)
      logging.warning('Could not remove what the failed run added to %s (%s).',
                      self._path, errors.first_line(e))


def _first_missing(path: epath.Path) -> Optional[epath.Path]:
  """The outermost directory of `path` that does not exist yet (None if it exists)."""
  missing = None
  while not path.exists() and path.parent != path:
    missing, path = path, path.parent
  return missing


def _entries(path: epath.Path) -> set[str]:
  """Names directly inside the directory `path`."""
  return {p.name for p in path.iterdir()}
