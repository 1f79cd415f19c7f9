"""Paths and writes that every stage shares: local or remote (gs://), never half-written."""
import contextlib
import errno
import os
import tempfile
from typing import Iterator, Sequence
import uuid

from etils import epath


def is_remote(path: str) -> bool:
  """Whether a path is a URL-style remote path (gs://, s3://, ...)."""
  return '://' in os.fspath(path)


class WriteError(OSError):
  """A file could not be written; the message names the user's path and what to do."""


_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _write_problem(path: str, e: OSError) -> str:
  directory = os.path.dirname(os.path.abspath(path)) or '.'
  if e.errno in (errno.EACCES, errno.EPERM):
    return (f'Cannot write {path}: permission denied in {directory}; write to a '
            'directory you can write to.')
  if e.errno == errno.EROFS:
    return (f'Cannot write {path}: {directory} is on a read-only file system; write '
            'somewhere else.')
  if e.errno in _FULL:
    return (f'Cannot write {path}: the disk is full or the file exceeds the size '
            f'limit ({e.strerror}); free space, raise the limit (ulimit -f) or write '
            'somewhere else.')
  return f'Cannot write {path}: {e.strerror or e}.'


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Turns an OSError raised while writing `path` (or its temporary) into a WriteError naming `path`."""
  try:
    yield
  except WriteError:
    raise
  except OSError as e:
    error = WriteError(_write_problem(os.fspath(path), e))
    error.errno = e.errno
    raise error from None


def same_file(a: str, b: str) -> bool:
  """Whether two local paths name the same file: any spelling, symbolic or hard link."""
  a, b = os.fspath(a), os.fspath(b)
  if is_remote(a) or is_remote(b):
    return a.rstrip('/') == b.rstrip('/')
  if os.path.realpath(a) == os.path.realpath(b):
    return True
  try:
    return os.path.samefile(a, b)
  except OSError:  # one of them does not exist
    return False


def _inside(path: str, directory: str) -> bool:
  real, root = os.path.realpath(path), os.path.realpath(directory)
  return os.path.commonpath([real, root]) == root


def check_output(path: str, flag: str, sources: Sequence[tuple[str, str]] = ()) -> None:
  """One-line error unless `path` (given as `flag`) can be created: its directory is one, no source is it.

  `sources` are (flag, path) pairs of the inputs of the same command: writing over
  one of them, under any spelling of its name, would destroy what is being read.
  """
  path = os.fspath(path)
  for source_flag, source in sources:
    if source and same_file(path, source):
      raise ValueError(f'{flag}={path} is the same file as {source_flag}={source}; '
                       'write to a new path.')
    if (source and not is_remote(source) and os.path.isdir(source) and
        os.path.exists(path) and _inside(path, source)):
      raise ValueError(f'{flag}={path} would replace a file of {source_flag}={source}; '
                       'write to a new path.')
  if is_remote(path):
    return
  parent = os.path.dirname(os.path.abspath(path.rstrip('/') or path))
  if _existing(parent, path, flag) != parent:
    raise FileNotFoundError(f'Cannot write {flag}={path}: directory {parent} does not '
                            'exist; create it first.')


def _existing(directory: str, path: str, flag: str) -> str:
  """The nearest existing directory at or above `directory`; an error where a file stands."""
  while not os.path.exists(directory):
    directory = os.path.dirname(directory)
  if not os.path.isdir(directory):
    raise NotADirectoryError(f'Cannot write {flag}={path}: {directory} is a file, not a '
                             'directory; pick another path.')
  return directory


def check_output_dir(path: str, flag: str) -> None:
  """One-line error unless directory `path` (given as `flag`) exists or can be made: no file in its way."""
  if not is_remote(path):
    _existing(os.path.abspath(path), path, flag)


def atomic_write(path: str, data: bytes) -> None:
  """Writes `data` to `path` so that readers see the old file or the whole new one.

  Local files go through a synced temporary file in the same directory, renamed over
  the target, with the umask's usual mode (mkstemp alone would leave 0600); remote
  files through a uniquely named temporary object renamed over the target.
  """
  path = os.fspath(path)
  if is_remote(path):
    tmp = epath.Path(f'{path}.tmp-{uuid.uuid4().hex}')
    try:
      tmp.write_bytes(data)
      tmp.replace(path)
    except BaseException:
      if tmp.exists():
        tmp.unlink()
      raise
    return
  directory = os.path.dirname(os.path.abspath(path))
  with writing(path):
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-',
                               suffix='-' + os.path.basename(path))
    try:
      with os.fdopen(fd, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
      umask = os.umask(0)
      os.umask(umask)
      os.chmod(tmp, 0o666 & ~umask)
      os.replace(tmp, path)
    except BaseException:
      if os.path.exists(tmp):
        os.remove(tmp)
      raise
