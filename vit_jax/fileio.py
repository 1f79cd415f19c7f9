"""Paths and writes that every stage shares: local or remote (gs://), never half-written."""
import os
import tempfile
import uuid

from etils import epath


def is_remote(path: str) -> bool:
  """Whether a path is a URL-style remote path (gs://, s3://, ...)."""
  return '://' in os.fspath(path)


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
