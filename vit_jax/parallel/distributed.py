"""Starts JAX's multi-controller runtime (jax.distributed) when a run spans several processes."""
from collections.abc import Mapping, Sequence
import glob
import importlib.util
import os

import jax

ENV_MODE = 'VIT_JAX_DISTRIBUTED'            # 'auto' (default) | 'on' | 'off'
ENV_COORDINATOR = 'VIT_JAX_COORDINATOR'     # host:port of process 0
ENV_NUM_PROCESSES = 'VIT_JAX_NUM_PROCESSES'
ENV_PROCESS_ID = 'VIT_JAX_PROCESS_ID'
ENV_LOCAL_DEVICE_IDS = 'VIT_JAX_LOCAL_DEVICE_IDS'  # optional, e.g. '0,1'
MODES = ('auto', 'on', 'off')


def _int_or_none(value: int | str | None, name: str) -> int | None:
  """Parses an integer setting given as argument or environment string."""
  if value is None or value == '':
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f'{name}={value!r} is not an integer.') from None


def _device_ids(value: Sequence[int] | str | None) -> list[int] | None:
  """Parses local device ids given as a list or as '0,1,2'."""
  if value is None or value == '':
    return None
  if isinstance(value, str):
    try:
      return [int(v) for v in value.split(',')]
    except ValueError:
      raise ValueError(f'{ENV_LOCAL_DEVICE_IDS}={value!r}: use comma-separated '
                       'integers such as "0,1".') from None
  return [int(v) for v in value]


def _on_cloud_tpu_vm() -> bool:
  """True on a Cloud TPU VM: libtpu installed and TPU chips exposed to this host."""
  if importlib.util.find_spec('libtpu') is None:
    return False
  # v2-v4 chips appear as /dev/accel*, v5 and later through vfio.
  return bool(glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*'))


def detect_cluster(environ: Mapping[str, str]) -> str | None:
  """Names the multi-process launcher jax.distributed can configure itself from, if any."""
  slurm_vars = ('SLURM_JOB_ID', 'SLURM_STEP_NODELIST', 'SLURM_NTASKS',
                'SLURM_PROCID', 'SLURM_LOCALID')
  # Inside an srun step with several tasks; a lone sbatch/salloc shell is one process.
  if all(v in environ for v in slurm_vars) and int(environ['SLURM_NTASKS']) > 1:
    return 'slurm'
  if ('OMPI_MCA_orte_hnp_uri' in environ
      and int(environ.get('OMPI_COMM_WORLD_SIZE', '1')) > 1):
    return 'ompi'
  if _on_cloud_tpu_vm():
    return 'tpu'
  return None


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None,
               local_device_ids: Sequence[int] | None = None,
               mode: str | None = None,
               environ: Mapping[str, str] | None = None) -> str:
  """Initializes jax.distributed if this run has several processes; returns how it started.

  Explicit arguments win over VIT_JAX_* environment variables; without either, a
  SLURM step, an Open MPI job or a Cloud TPU VM is detected and jax configures itself.
  Returns 'single', 'explicit', 'already' or the detected cluster name.
  """
  environ = os.environ if environ is None else environ
  mode = mode or environ.get(ENV_MODE, 'auto')
  if mode not in MODES:
    raise ValueError(f'{ENV_MODE}={mode!r} is unknown; use one of {MODES}.')
  if jax.distributed.is_initialized():
    return 'already'
  if mode == 'off':
    return 'single'

  coordinator_address = coordinator_address or environ.get(ENV_COORDINATOR) or None
  num_processes = _int_or_none(
      num_processes if num_processes is not None else environ.get(ENV_NUM_PROCESSES),
      ENV_NUM_PROCESSES)
  process_id = _int_or_none(
      process_id if process_id is not None else environ.get(ENV_PROCESS_ID),
      ENV_PROCESS_ID)
  local_device_ids = _device_ids(
      local_device_ids if local_device_ids is not None
      else environ.get(ENV_LOCAL_DEVICE_IDS))

  explicit = {ENV_COORDINATOR: coordinator_address, ENV_NUM_PROCESSES: num_processes,
              ENV_PROCESS_ID: process_id}
  given = [name for name, value in explicit.items() if value is not None]
  if given:
    missing = [name for name, value in explicit.items() if value is None]
    if missing:
      raise ValueError(f'multi-process run: {given} given but {missing} missing; '
                       'set all three (flags or environment) or none.')
    _check_explicit(coordinator_address, num_processes, process_id)
    if num_processes == 1:
      return 'single'
    how = 'explicit'
  elif mode == 'on':
    how = 'auto'
  else:
    how = detect_cluster(environ)
    if how is None:
      return 'single'

  if jax.config.jax_cpu_collectives_implementation is None:
    # Without a CPU collectives backend, cross-process computations on CPU fail.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  try:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes,
                               process_id=process_id,
                               local_device_ids=local_device_ids)
  except RuntimeError as e:
    if 'must be called before' in str(e):
      raise RuntimeError('vit_jax.parallel.distributed.initialize() must run before any '
                         'other jax use (it is the first thing python -m vit_jax.main '
                         'does).') from None
    raise
  except ValueError as e:
    raise ValueError(f'jax.distributed could not configure itself ({e}); set '
                     f'{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID}.') from None
  return how


def _check_explicit(coordinator_address: str, num_processes: int, process_id: int) -> None:
  """Validates explicit multi-process settings with one-line errors."""
  host, sep, port = coordinator_address.rpartition(':')
  if not sep or not host or not port.isdigit():
    raise ValueError(f'{ENV_COORDINATOR}={coordinator_address!r}: use host:port, '
                     'e.g. 10.0.0.1:1234 (the address of process 0).')
  if num_processes < 1:
    raise ValueError(f'{ENV_NUM_PROCESSES}={num_processes}: must be at least 1.')
  if not 0 <= process_id < num_processes:
    raise ValueError(f'{ENV_PROCESS_ID}={process_id}: must be in '
                     f'[0, {num_processes}) for {num_processes} processes.')
