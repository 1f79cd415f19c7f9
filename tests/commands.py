"""Runs `python -m vit_jax.X ...` commands for the suite, each in its own forked process.

Most of a small command's time is importing TensorFlow, TFDS, JAX and the package (~11 s of
CPU on 2 cores), and the suite starts dozens of them. A server process per test process imports
those once, without starting JAX's backend (so each command still picks its own devices and
XLA flags), and forks one child per command: the child has a fresh process of its own (pid,
signals, exit code, atexit handlers, stdout and stderr), as `subprocess.run` gives, but finds
the libraries already imported. Tests about imports or start-up time use `subprocess` directly.
`VITJAX_TEST_FORK_COMMANDS=0` runs every command as a plain subprocess instead.
"""
import atexit
import hashlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Iterator, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Imported by the server before it forks: the libraries every command pays for, and no module
# that defines absl flags (each command defines its own when it is imported in the child).
_WARM = ('tensorflow', 'tensorflow_datasets', 'jax', 'flax.linen', 'optax', 'orbax.checkpoint',
         'clu.metric_writers', 'clu.periodic_actions', 'vit_jax.train.loop',
         'vit_jax.evaluators.fewshot', 'vit_jax.serving.export')

_SERVER = r'''
import importlib, json, os, runpy, sys
del sys.path[0]  # '' from -c: the package resolves as it would for `python -m` from anywhere
for name in sys.argv[1:]:
  try:
    importlib.import_module(name)
  except ImportError:
    pass
request_in = os.fdopen(os.dup(0), 'r')
reply_fd = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
for line in request_in:
  request = json.loads(line)
  pid = os.fork()
  if pid == 0:
    break
  os.write(reply_fd, f'{pid}\n'.encode())
  _, status = os.waitpid(pid, 0)
  os.write(reply_fd, f'{os.waitstatus_to_exitcode(status)}\n'.encode())
else:
  sys.exit(0)
request_in.close()
os.close(reply_fd)
os.environ.clear()
os.environ.update(request['env'])
os.chdir(request['cwd'])
for fd, path in ((1, request['stdout']), (2, request['stderr'])):
  out = os.open(path, os.O_WRONLY | os.O_TRUNC)
  os.dup2(out, fd)
  os.close(out)
if request['fsize'] is not None:  # a file-size limit (ulimit -f); SIGXFSZ stays ignored
  import resource
  resource.setrlimit(resource.RLIMIT_FSIZE, (request['fsize'], request['fsize']))
sys.argv = [request['module'], *request['args']]
sys.path.insert(0, request['cwd'])  # as `python -m` does
del importlib, json, line, null, out, fd, path, pid, request_in, reply_fd
runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
'''

# Variables read when the libraries are imported. A command whose environment differs from the
# test process's in one of them runs as a plain subprocess: a server of its own would import as
# much as that subprocess does.
_READ_AT_IMPORT = ('PYTHON', 'JAX_', 'TF_', 'TFDS_', 'XLA_', 'HOME', 'PATH', 'LD_', 'OMP_',
                   'OPENBLAS', 'MKL_', 'CUDA', 'LANG', 'LC_', 'HF_')

_server: Optional['_Server'] = None  # this process's, started by its first served command


def _key(env: dict) -> tuple:
  # PYTHONPATH=REPO is no change: the suite imports the package from this checkout either way.
  return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_READ_AT_IMPORT)
                      and (k, v) != ('PYTHONPATH', REPO)))


def _served(cmd: Sequence[str], env: dict) -> bool:
  return (os.environ.get('VITJAX_TEST_FORK_COMMANDS', '1') != '0' and len(cmd) >= 3
          and cmd[0] == sys.executable and cmd[1] == '-m' and cmd[2].startswith('vit_jax')
          and _key(env) == _key(os.environ))


class _Server:
  """One server process: requests go to its stdin, replies (pid, then exit code) come back."""

  def __init__(self, env: dict):
    self.proc = subprocess.Popen([sys.executable, '-c', _SERVER, *_WARM], env=env, cwd='/',
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
    self._pending = b''
    self.running: Optional['Started'] = None  # the command whose exit code is still to come

  def send(self, request: dict) -> None:
    self.proc.stdin.write(json.dumps(request).encode() + b'\n')
    self.proc.stdin.flush()

  def reply(self, timeout: Optional[float]) -> Optional[int]:
    """The next number the server sends, or None when `timeout` seconds pass first."""
    # Unbuffered reads: select() cannot see lines a buffered reader already holds.
    while b'\n' not in self._pending:
      ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
      if not ready:
        return None
      chunk = os.read(self.proc.stdout.fileno(), 4096)
      if not chunk:
        raise RuntimeError('the command server stopped (see tests/commands.py)')
      self._pending += chunk
    line, self._pending = self._pending.split(b'\n', 1)
    return int(line)

  def stop(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.close()
      self.proc.wait(timeout=60)


def _the_server(env: dict) -> _Server:
  global _server
  if _server is None or _server.proc.poll() is not None:
    _server = _Server(env)
    atexit.register(_server.stop)
  return _server


class Started:
  """A command forked by the server: what tests use of `subprocess.Popen`."""

  def __init__(self, cmd: list, env: dict, cwd: str, fsize: Optional[int] = None):
    self.args = cmd
    self.returncode: Optional[int] = None
    self._server = _the_server(env)
    if self._server.running is not None:  # a command a failed test left: its reply comes first
      self._server.running.close()
    self._server.running = self
    self._tmp = tempfile.TemporaryDirectory(prefix='vit_jax_command_')
    self._paths = {name: os.path.join(self._tmp.name, name) for name in ('stdout', 'stderr')}
    for path in self._paths.values():
      open(path, 'w').close()
    request = dict(module=cmd[2], args=cmd[3:], env=env, cwd=os.path.abspath(cwd), fsize=fsize,
                   **self._paths)
    self._server.send(request)
    # The first reply comes once the libraries are imported (a new server) and the child forked.
    self.pid = self._server.reply(None)

  def _exited(self, code: Optional[int]) -> Optional[int]:
    self.returncode = code
    if code is not None:
      self._server.running = None
    return code

  def poll(self) -> Optional[int]:
    """The exit code, or None while the command runs."""
    if self.returncode is None:
      self._exited(self._server.reply(0))
    return self.returncode

  def wait(self, timeout: Optional[float] = None) -> int:
    """Waits for the command; kills it and raises TimeoutExpired after `timeout` seconds."""
    if self.returncode is None:
      if self._exited(self._server.reply(timeout)) is None:
        self.kill()
        self.wait()
        raise subprocess.TimeoutExpired(self.args, timeout, *self.outputs())
    return self.returncode

  def send_signal(self, signum: int) -> None:
    if self.returncode is None:
      os.kill(self.pid, signum)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)

  def outputs(self) -> tuple[str, str]:
    """(stdout, stderr) written so far."""
    texts = []
    for path in self._paths.values():
      with open(path, errors='replace') as f:
        texts.append(f.read())
    return texts[0], texts[1]

  def stderr_lines(self) -> Iterator[str]:
    """stderr line by line as the command writes it, until it exits."""
    with open(self._paths['stderr'], errors='replace') as f:
      pending = ''
      while True:
        done = self.poll() is not None
        pending += f.read()
        *lines, pending = pending.split('\n')
        yield from (line + '\n' for line in lines)
        if done:
          if pending:
            yield pending
          return
        time.sleep(0.02)

  def close(self) -> None:
    if self.returncode is None:
      self.kill()
      self.wait()
    self._tmp.cleanup()


def start(cmd: Sequence[str], *, env: Optional[dict] = None, cwd: Optional[str] = None) -> Started:
  """Starts `python -m vit_jax.X ...` forked from the server (see the module docstring)."""
  cmd = [str(part) for part in cmd]
  env = dict(os.environ if env is None else env)
  if not _served(cmd, env):
    raise ValueError(f'{cmd[:3]} with this environment is not served; use subprocess.Popen')
  return Started(cmd, env, cwd or os.getcwd())


def _limit_file_size(fsize: Optional[int]):
  """A preexec_fn that sets RLIMIT_FSIZE (Python ignores SIGXFSZ: writes fail with EFBIG)."""
  if fsize is None:
    return None
  return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))


def run(cmd: Sequence[str], *, env: Optional[dict] = None, cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        fsize: Optional[int] = None) -> subprocess.CompletedProcess:
  """Runs `cmd` as `subprocess.run(cmd, capture_output=True, text=True)` would, faster.

  `fsize`: the largest file in bytes the command may write (a file-size limit, ulimit -f).
  """
  cmd = [str(part) for part in cmd]
  env = dict(os.environ if env is None else env)
  if not _served(cmd, env):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False, preexec_fn=_limit_file_size(fsize))
  started = Started(cmd, env, cwd or os.getcwd(), fsize)
  try:
    code = started.wait(timeout)
    return subprocess.CompletedProcess(cmd, code, *started.outputs())
  finally:
    started.close()


def digest(root: str) -> dict[str, str]:
  """sha256 of every file below `root` (what a failed command must leave as it was)."""
  out = {}
  for directory, _, files in os.walk(root):
    for name in files:
      path = os.path.join(directory, name)
      if not os.path.islink(path):
        with open(path, 'rb') as f:
          out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
  return out
