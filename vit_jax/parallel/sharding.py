"""Device mesh and sharding rules: which array lives where on the ('data', 'fsdp') mesh.

The batch of every stage (input pipeline, train step, evaluators) is split along its
leading dimension over both mesh axes (`batch_sharding`); parameters and optimizer state
are placed by `config.sharding`'s regex -> tactic rules.
"""
from collections.abc import Callable, Iterator, Mapping, Sequence
import contextlib
import functools
import math
import re
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
import ml_collections
import numpy as np

MESH_AXES = ('data', 'fsdp')

# Rule sets chosen by config.sharding: (regex on the '/'-joined leaf path, tactic), first match wins.
RULES = {
    'replicate': (
        (r'.*', 'replicate'),
    ),
    'fsdp': (
        (r'.*', 'fsdp'),
    ),
}
TACTICS = ('replicate', 'fsdp')


def make_mesh(mesh_config: Mapping[str, int],
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds the ('data', 'fsdp') mesh; one size may be -1 for all remaining devices."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = dict(mesh_config)
  unknown = sorted(set(sizes) - set(MESH_AXES))
  if unknown:
    raise ValueError(f'config.mesh has unknown axes {unknown}; '
                     f'the mesh axes are {list(MESH_AXES)}.')
  sizes = {name: sizes.get(name, 1) for name in MESH_AXES}
  for name, size in sizes.items():
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or (
        size < 1 and size != -1):
      raise ValueError(f'config.mesh.{name}={size!r}: use a positive integer '
                       'or -1 (all remaining devices).')
  free = [name for name, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f'config.mesh: at most one axis may be -1, got {free}; '
                     'give the others explicit sizes.')
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if len(devices) % fixed:
      raise ValueError(
          f'config.mesh={dict(sizes)}: {len(devices)} devices are not divisible '
          f'by the fixed axis sizes (product {fixed}); choose sizes that divide '
          f'{len(devices)}.')
    sizes[free[0]] = len(devices) // fixed
  if math.prod(sizes.values()) != len(devices):
    raise ValueError(
        f'config.mesh={dict(sizes)}: axis sizes multiply to '
        f'{math.prod(sizes.values())} but there are {len(devices)} devices; '
        'make them multiply to the device count or set one axis to -1.')
  shape = tuple(sizes[name] for name in MESH_AXES)
  # Auto axes: the trainer places arrays with jit in/out shardings, not sharding-in-types.
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(shape),
                       devices=devices)


def batch_spec(mesh: Mesh) -> P:
  """PartitionSpec of a batch: its leading dimension split over every mesh axis."""
  del mesh  # Both axes split the batch whatever their sizes; kept for a stable signature.
  return P(MESH_AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """NamedSharding of a batch whose leading dimension is split over the whole mesh."""
  return NamedSharding(mesh, batch_spec(mesh))


def path_str(path: Sequence[Any]) -> str:
  """Joins a jax tree key path into 'a/b/0/c', the names the sharding rules match."""
  return jax.tree_util.keystr(tuple(path), simple=True, separator='/')


def to_host(tree: Any) -> Any:
  """Fetches a possibly sharded (multi-host) pytree to numpy on every process."""
  if all(x.is_fully_addressable for x in jax.tree.leaves(tree)
         if isinstance(x, jax.Array)):
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)


def fsdp_spec(shape: Sequence[int], fsdp_size: int, min_size: int) -> P:
  """Spec sharding the largest dimension divisible by fsdp_size over 'fsdp', else replicated."""
  if fsdp_size == 1 or math.prod(shape) < min_size:
    return P()
  # Stable sort, reversed: among equal sizes the last dimension wins.
  for dim in sorted(range(len(shape)), key=lambda d: shape[d])[::-1]:
    if shape[dim] % fsdp_size == 0:
      spec = [None] * len(shape)
      spec[dim] = 'fsdp'
      return P(*spec)
  return P()


def tree_partition_specs(abstract_tree: Any, mesh: Mesh,
                         config: ml_collections.ConfigDict) -> Any:
  """Pytree of PartitionSpec for a pytree of arrays/ShapeDtypeStruct, from config.sharding."""
  if config.sharding not in RULES:
    raise ValueError(f'config.sharding={config.sharding!r} is unknown; '
                     f'use one of {sorted(RULES)}.')
  rules = [(re.compile(pattern), tactic) for pattern, tactic in RULES[config.sharding]]
  fsdp_size = mesh.shape['fsdp']
  min_size = config.fsdp_min_size

  def spec_for(path, leaf):
    name = path_str(path)
    shape = tuple(getattr(leaf, 'shape', ()))
    for pattern, tactic in rules:
      if pattern.search(name):
        if tactic == 'replicate':
          return P()
        if tactic == 'fsdp':
          return fsdp_spec(shape, fsdp_size, min_size)
        raise ValueError(f'sharding rule {pattern.pattern!r} has unknown tactic '
                         f'{tactic!r}; use one of {TACTICS}.')
    raise ValueError(f'no rule of config.sharding={config.sharding!r} matches {name!r}.')

  return jax.tree_util.tree_map_with_path(spec_for, abstract_tree)


def tree_shardings(abstract_tree: Any, mesh: Mesh,
                   config: ml_collections.ConfigDict) -> Any:
  """Pytree of NamedSharding for a pytree of arrays/ShapeDtypeStruct, from config.sharding."""
  specs = tree_partition_specs(abstract_tree, mesh, config)
  return jax.tree_util.tree_map(lambda spec: NamedSharding(mesh, spec), specs,
                                is_leaf=lambda x: isinstance(x, P))


def describe(abstract_tree: Any, shardings: Any) -> list[str]:
  """One line per leaf: path, global shape, partition spec (for logs and tests)."""
  leaves = jax.tree_util.tree_leaves_with_path(abstract_tree)
  specs = jax.tree_util.tree_leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
  return [f'{path_str(path)} {tuple(leaf.shape)} {sharding.spec}'
          for (path, leaf), sharding in zip(leaves, specs)]


@contextlib.contextmanager
def activation_constraints(mesh: Mesh) -> Iterator[None]:
  """While tracing, pins the batch dimension of every flax module's outputs to the mesh.

  Without these pins XLA may satisfy FSDP-sharded weights by gathering whole-batch
  activations onto every device (tensor-parallel style) instead of gathering the weights;
  the model itself stays free of sharding code.
  """
  batch = batch_sharding(mesh)

  def pin(x):
    if isinstance(x, jax.Array) and x.ndim >= 2 and x.shape[0] % mesh.size == 0:
      return jax.lax.with_sharding_constraint(x, batch)
    return x

  def interceptor(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if context.method_name == '__call__':
      out = jax.tree.map(pin, out)
    return out

  with nn.intercept_methods(interceptor):
    yield


def with_activation_constraints(fn: Callable, mesh: Mesh) -> Callable:
  """Wraps a step function so that it traces under activation_constraints(mesh)."""

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with activation_constraints(mesh):
      return fn(*args, **kwargs)

  return wrapped
