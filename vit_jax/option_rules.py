"""Options that act only while a switch is on: one warning each when set with it off.

Each section declares its rules as data beside the code that reads the options
(vit_jax.data.multicrop, vit_jax.data.preprocess, vit_jax.train.ema, the evaluators);
vit_jax.configs.effects compares a config with the base config through `unused`, and
vit_jax.main warns. Warnings, not errors: the run still trains.
"""
import dataclasses
from typing import Any, Callable, Iterable

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Rule:
  """`options` (dotted config keys) have no effect while `off(*values of switches)` holds."""
  switches: tuple[str, ...]
  off: Callable[..., bool]
  options: tuple[str, ...]
  turn_on: str  # what makes them count, e.g. 'set pp.multicrop.local_crops above 0'


def lookup(config: Any, dotted: str, default: Any) -> Any:
  """config['a']['b'] for 'a.b'; `default` where a part is absent."""
  value = config
  for part in dotted.split('.'):
    try:
      value = value[part]
    except (KeyError, TypeError, AttributeError):
      return default
  return value


def same(a: Any, b: Any) -> bool:
  """Equal as config values: a list given on the command line equals the default tuple."""
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return list(a) == list(b)
  return a == b


def unused(config: Any, defaults: Any, rules: Iterable[Rule], prefix: str = 'config') -> list[str]:
  """One line per option changed from `defaults` while a switch it needs is off.

  An option is named once, by the first rule that applies.
  """
  lines, named = [], set()
  for rule in rules:
    values = [lookup(config, s, None) for s in rule.switches]
    if not rule.off(*values):
      continue
    switches = ', '.join(f'{s}={v!r}' for s, v in zip(rule.switches, values))
    for option in rule.options:
      value = lookup(config, option, _MISSING)
      if (option in named or value is _MISSING or
          same(value, lookup(defaults, option, _MISSING))):
        continue
      named.add(option)
      lines.append(f'{prefix}.{option}={value!r} has no effect with {switches}; '
                   f'{rule.turn_on} to use it.')
  return lines
