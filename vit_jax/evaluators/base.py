"""The evaluator interface and registry: `config.evals.<name>` picks one by its `type`.

An evaluator is built once per run from its options (`config.evals.<name>`, which also
hold `type` and `every`) and a Context, and `run(params)` returns metrics: scalars
(written to metrics.jsonl and TensorBoard) or uint8 image batches [N, H, W, 3]
(TensorBoard). `every`: > 0 runs it every that many steps and at the end, 0 at the end
only, < 0 never. To add one, subclass Evaluator and `register` it; nothing else changes.
"""
import dataclasses
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import ml_collections

from vit_jax import option_rules

Params = Any


@dataclasses.dataclass(frozen=True)
class Context:
  """What every evaluator may use, given by the trainer (or a command)."""
  config: ml_collections.ConfigDict  # the run's config: dataset, pp, batch_eval, data_dir
  model: nn.Module                   # the model whose published-layout params run() gets
  mesh: jax.sharding.Mesh
  # The training objective's per-example loss of (logits, labels), if it has one.
  example_loss: Optional[Callable[[jax.Array, jax.Array], jax.Array]] = None


class Evaluator:
  """Base class: `run(params) -> metrics`; `check` validates options before a run starts."""

  # The options of config.evals.<name> this type reads (beside `type` and `every`), and
  # those it reads only while another of its options says so (vit_jax.option_rules).
  OPTIONS: tuple[str, ...] = ()
  OPTION_RULES: tuple[option_rules.Rule, ...] = ()

  def __init__(self, name: str, options: ml_collections.ConfigDict, context: Context):
    self.name = name
    self.options = options
    self.context = context

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    """Raises a one-line ValueError for options this evaluator cannot run with."""

  def run(self, params: Params) -> dict[str, Any]:
    """Metrics of the model with these (published-layout) parameters."""
    raise NotImplementedError


EVALUATORS: dict[str, type] = {}


def register(type_name: str, cls: type) -> None:
  """Makes `cls` selectable as config.evals.<name>.type = type_name."""
  EVALUATORS[type_name] = cls


def _enabled(config: ml_collections.ConfigDict) -> list[tuple[str, Any]]:
  return [(name, options) for name, options in config.get('evals', {}).items()
          if options.get('every', 0) >= 0]


def check(config: ml_collections.ConfigDict) -> None:
  """One-line errors for every enabled evaluator's type and options."""
  for name, options in _enabled(config):
    kind = options.get('type', name)
    if kind not in EVALUATORS:
      raise ValueError(f'config.evals.{name}.type={kind!r} is unknown; use one of '
                       f'{", ".join(sorted(EVALUATORS))}.')
    every = options.get('every', 0)
    if not isinstance(every, int):
      raise ValueError(f'config.evals.{name}.every={every!r}: use an integer (> 0: '
                       'every that many steps, 0: at the end, < 0: never).')
    EVALUATORS[kind].check(name, options, config)


def unused_options(config: ml_collections.ConfigDict,
                   defaults: ml_collections.ConfigDict) -> list[str]:
  """One line per option of an enabled evaluator that its type does not read.

  `defaults`: the base config's evals (an option left as it is there is not named).
  """
  lines = []
  for name, options in _enabled(config):
    kind = options.get('type', name)
    cls = EVALUATORS[kind]
    base_options = defaults.get(name, {})
    for key, value in options.items():
      if (key in ('type', 'every') or key in cls.OPTIONS or
          option_rules.same(value, base_options.get(key))):
        continue
      lines.append(f'config.evals.{name}.{key}={value!r} has no effect: evaluators of type '
                   f'{kind!r} read only {", ".join(cls.OPTIONS) or "type and every"}.')
    lines += option_rules.unused(options, base_options, cls.OPTION_RULES,
                                 prefix=f'config.evals.{name}')
  return lines


@dataclasses.dataclass
class Scheduled:
  """An evaluator with its cadence."""
  name: str
  every: int
  evaluator: Evaluator

  def due(self, step: int, is_last: bool) -> bool:
    """Whether it runs after `step`."""
    return is_last or (self.every > 0 and step % self.every == 0)


def create(config: ml_collections.ConfigDict, context: Context) -> list[Scheduled]:
  """The enabled evaluators of config.evals, in the order they are listed."""
  check(config)
  out = []
  for name, options in _enabled(config):
    cls = EVALUATORS[options.get('type', name)]
    out.append(Scheduled(name, options.get('every', 0), cls(name, options, context)))
  return out


def split_results(results: Mapping[str, Any]) -> tuple[dict, dict]:
  """(scalars, image batches) of an evaluator's results."""
  scalars = {k: v for k, v in results.items() if getattr(v, 'ndim', 0) == 0}
  images = {k: v for k, v in results.items() if getattr(v, 'ndim', 0) == 4}
  return scalars, images
