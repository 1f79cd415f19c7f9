"""Paths and writes that every stage shares: local or remote (gs://), never half-written."""
import contextlib
import errno
import os
import re
import tempfile
from typing import Iterator, Optional, Sequence
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


# errno -> what the user is told when a write fails for want of room or rights.
_FAULTS = {errno.ENOSPC: 'the disk is full', errno.EDQUOT: 'the disk quota is used up',
           errno.EFBIG: 'a file-size limit was reached (ulimit -f)',
           errno.EROFS: 'the file system is read-only',
           errno.EACCES: 'permission denied', errno.EPERM: 'permission denied'}
# Refused rights count only for a path the caller writes to: a read can be refused too.
_RIGHTS = (errno.EACCES, errno.EPERM)
# tensorstore (orbax) keeps the errno only in its message.
_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")


def _chain(error: BaseException) -> Iterator[BaseException]:
  """The error, the ones it was raised from or during, and those an ExceptionGroup holds."""
  pending, seen = [error], set()
  while pending:
    e = pending.pop()
    if e is None or id(e) in seen:
      continue
    seen.add(id(e))
    yield e
    # `raise ... from None` says the context is not the story: an error that already
    # told the user about the disk.
    context = None if e.__suppress_context__ else e.__context__
    pending += [e.__cause__, context, *getattr(e, 'exceptions', ())]


def _fault_errno(error: BaseException) -> Optional[int]:
  if isinstance(error, OSError) and error.errno in _FAULTS:
    return error.errno
  text = str(error)
  found = _OS_ERROR_CODE.search(text)
  if found and int(found.group(1)) in _FAULTS:
    return int(found.group(1))
  # TensorFlow and TFDS keep only the system's words.
  return next((code for code in _FAULTS if os.strerror(code) in text), None)


def write_fault(error: BaseException, directory: str) -> Optional[str]:
  """Why a write under `directory` failed ('the disk is full', ...), or None for other errors.

  Looks through the chain of errors behind `error`: orbax, TFDS and TensorFlow wrap the
  system's error in their own types.
  """
  root = os.fspath(directory).rstrip('/')
  for e in _chain(error):
    code = _fault_errno(e)
    if code is None:
      continue
    named = f'{getattr(e, "filename", None) or ""} {e}'
    if code not in _RIGHTS or root in named or os.path.abspath(root) in named:
      return _FAULTS[code]
  return None


def append_whole(path: str, text: str) -> None:
  """Appends `text` to a local file, or nothing: a failed write leaves no partial line."""
  data = memoryview(text.encode())
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
  try:
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
      while data:
        data = data[os.write(fd, data):]
    except OSError:
      os.ftruncate(fd, start)
      raise
  finally:
    os.close(fd)


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
