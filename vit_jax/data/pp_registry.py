"""Preprocessing ops by name, and the pp strings that compose them ('pretrain|randaug(2, 9)').

An op is one builder function registered here under a name: called with the op's arguments
from the pp string, it checks them (a ValueError names the argument) and returns the per-
example function. Random ops take (image, seed) and are given their own stateless seed;
deterministic ops take (image). Decoding ops take an `Encoded` record instead of an image
and may only come first. Batch ops take (images [B, H, W, C], seeds [K, 2]): the rows are
K equal blocks (one per data shard), block k drawing its rows' randomness from seeds[k]
(block_uniform); they run after batching, so they come last in a training chain. Named
compositions (the recipes) expand to pp strings of ops: a bare composition name expands
('resize'), the same name with arguments is the op ('resize(224)').
"""
import ast
import dataclasses
import inspect
from typing import Any, Callable, Optional

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class OpInfo:
  """A registered op: its builder and how the chain calls what the builder returns."""
  builder: Callable[..., Callable]
  random: bool    # the per-example function takes (image, seed)
  decodes: bool   # it takes an Encoded record: only first in a chain
  batched: bool = False  # takes (images [B, H, W, C], seeds [K, 2]): only last, in training


@dataclasses.dataclass(frozen=True)
class Encoded:
  """Encoded image bytes with what decoding needs: channels and the dataset's pixel scale."""
  data: tf.Tensor
  channels: int = 3
  scale: int = 1


OPS: dict[str, OpInfo] = {}
# Named compositions: name -> function of config.pp returning a pp string of ops.
COMPOSITIONS: dict[str, Callable[[Any], str]] = {}


def register(name: str, *, random: bool = False, decodes: bool = False,
             batched: bool = False):
  """Decorator: registers an op builder under `name` (batched ops are random)."""
  def wrap(builder: Callable[..., Callable]) -> Callable[..., Callable]:
    OPS[name] = OpInfo(builder, random or batched, decodes, batched)
    return builder
  return wrap


def register_composition(name: str):
  """Decorator: registers a function of config.pp returning a pp string under `name`."""
  def wrap(fn: Callable[[Any], str]) -> Callable[[Any], str]:
    COMPOSITIONS[name] = fn
    return fn
  return wrap


def expand(text: str, pp) -> str:
  """Replaces the composition names among the ops of `text` by their ops for config.pp."""
  return '|'.join(COMPOSITIONS[t.strip()](pp) if t.strip() in COMPOSITIONS else t
                  for t in text.split('|'))


def _literal(node: ast.AST, token: str) -> Any:
  try:
    return ast.literal_eval(node)
  except ValueError:
    raise ValueError(f'op {token!r}: arguments must be numbers, strings or booleans') from None


def parse(text: str) -> list[tuple[str, tuple, dict]]:
  """'a|b(1, x=2)' -> [('a', (), {}), ('b', (1,), {'x': 2})]; malformed ops raise."""
  out = []
  for token in (t.strip() for t in text.split('|')):
    if not token:
      raise ValueError(f'{text!r} has an empty op (two "|" in a row, or one at an end)')
    try:
      node = ast.parse(token, mode='eval').body
    except SyntaxError:
      raise ValueError(f'op {token!r} is not NAME or NAME(ARGS)') from None
    if isinstance(node, ast.Name):
      out.append((node.id, (), {}))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
      args = tuple(_literal(a, token) for a in node.args)
      kwargs = {k.arg: _literal(k.value, token) for k in node.keywords}
      out.append((node.func.id, args, kwargs))
    else:
      raise ValueError(f'op {token!r} is not NAME or NAME(ARGS)')
  return out


def _build(name: str, args: tuple, kwargs: dict) -> Callable:
  if name not in OPS:
    raise ValueError(f'unknown op {name!r}; known: {", ".join(sorted(COMPOSITIONS))} '
                     f'(compositions), {", ".join(sorted(OPS))}')
  builder = OPS[name].builder
  try:
    inspect.signature(builder).bind(*args, **kwargs)
  except TypeError as e:
    raise ValueError(f'op {name!r}: {e}; signature {name}{inspect.signature(builder)}') from None
  try:
    return builder(*args, **kwargs)
  except ValueError as e:
    raise ValueError(f'op {name!r}: {e}') from None
  except TypeError as e:  # e.g. a string where a number goes: a range check compared them
    raise ValueError(f'op {name!r}: an argument has the wrong type ({e}); '
                     f'signature {name}{inspect.signature(builder)}') from None


Chain = Callable[[Any, Optional[tf.Tensor]], tf.Tensor]
BatchChain = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _seeded(seed: tf.Tensor, n: int) -> list:
  return tf.unstack(tf.random.experimental.stateless_split(seed, n)) if n else []


def block_uniform(seeds: tf.Tensor, rows, count: int) -> tf.Tensor:
  """`count` uniform [0, 1) draws per row, [count, K * rows]; block k's from seeds[k] alone."""
  return tf.concat([tf.random.stateless_uniform([count, rows], seeds[k])
                    for k in range(seeds.shape[0])], 1)


def build_split(text: str, pp, *, decoded: bool = False) -> tuple[Chain, Optional[BatchChain]]:
  """(per-example chain, batch chain or None) of a training pp string.

  The batch chain applies the trailing batch ops to rows [B, H, W, C] in K blocks with seeds
  [K, 2] (a seed [2]: one block); batch op i gets, for every block, the i-th seed of
  stateless_split(the block's seed, number of batch ops).
  With decoded=True the chain's first op, `decode`, is left out: it takes decoded images.
  """
  ops = parse(expand(text, pp))
  if decoded:
    if ops[0][0] != 'decode':
      raise ValueError(f'{text!r} does not start with decode: its images cannot come decoded')
    ops = ops[1:]
  first = next((i for i, (name, _, _) in enumerate(ops)
                if name in OPS and OPS[name].batched), len(ops))
  for name, _, _ in ops[first:]:
    if name in OPS and not OPS[name].batched:
      raise ValueError(f'op {name!r} comes after the batch op {ops[first][0]!r}: batch ops '
                       'work on whole batches, after every per-example op')
  example = _chain(ops[:first], train=True)
  batch_ops = [_build(*op) for op in ops[first:]]
  if not batch_ops:
    return example, None

  def apply_batch(images: tf.Tensor, seeds: tf.Tensor) -> tf.Tensor:
    seeds = tf.reshape(seeds, [-1, 2])
    per_block = [_seeded(s, len(batch_ops)) for s in tf.unstack(seeds)]
    for i, fn in enumerate(batch_ops):
      images = fn(images, tf.stack([block[i] for block in per_block]))
    return images
  return example, apply_batch


def build(text: str, pp, *, train: bool = True) -> Chain:
  """The function (image or Encoded, seed) -> image that applies the ops of `text` in order.

  Composition names in `text` are expanded for config.pp first. With train=False (evaluation)
  random and decoding ops are refused: evaluation is deterministic and decodes itself. Batch
  ops are refused (build_split runs them).

  Random op k of the chain gets the k-th seed of stateless_split(seed, number of random ops)
  (a prefix of any longer split), so adding a random op at the end of a chain leaves the
  augmentation of the ops before it unchanged.
  """
  return _chain(parse(expand(text, pp)), train)


def _chain(parsed: list[tuple[str, tuple, dict]], train: bool) -> Chain:
  ops = []
  for i, (name, args, kwargs) in enumerate(parsed):
    fn = _build(name, args, kwargs)
    info = OPS[name]
    if info.decodes and (i or not train):
      raise ValueError(f'op {name!r} decodes image bytes: it can only come first, in training')
    if info.random and not train:
      raise ValueError(f'op {name!r} is random: evaluation takes deterministic ops only')
    if info.batched:
      raise ValueError(f'op {name!r} works on whole batches: only at the end of '
                       'config.pp.train (not in multi-crop views or evaluation)')
    ops.append((fn, info))
  num_random = sum(info.random for _, info in ops)

  def apply(image, seed=None):
    seeds = _seeded(seed, num_random)
    k = 0
    for fn, info in ops:
      if info.random:
        image, k = fn(image, seeds[k]), k + 1
      else:
        image = fn(image)
    return image
  return apply


def first_op(text: str, pp) -> str:
  """The name of the first op of `text` (compositions expanded)."""
  return parse(expand(text, pp))[0][0]


def decodes_first(text: str, pp) -> bool:
  """Whether the first op of `text` decodes (else the caller decodes before the chain)."""
  name = first_op(text, pp)
  return name in OPS and OPS[name].decodes
