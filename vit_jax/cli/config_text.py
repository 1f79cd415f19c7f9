"""A config as plain text: YAML that yaml.safe_load reads back, its dotted keys, flag names.

--print_config prints this YAML: no Python tags (tuples are lists) and no anchors (a value
shared by two keys is written out at both), so it can be read by any YAML parser and each
value pasted back as --config.KEY=VALUE.
"""
from typing import Any, Optional

import ml_collections
import yaml


def plain(value: Any) -> Any:
  """The value with tuples as lists and mappings as dicts, all the way down."""
  if isinstance(value, (dict, ml_collections.ConfigDict)):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  return value


class _PlainDumper(yaml.SafeDumper):
  """SafeDumper that never writes anchors and aliases."""

  def ignore_aliases(self, data: Any) -> bool:
    return True


def _flow_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
  # One line, strings quoted: the text is a Python literal too, what --config.KEY= reads.
  node = dumper.represent_sequence('tag:yaml.org,2002:seq', data, flow_style=True)
  for item in node.value:
    if item.tag == 'tag:yaml.org,2002:str':
      item.style = "'"
  return node


_PlainDumper.add_representer(list, _flow_list)


def to_yaml(config: ml_collections.ConfigDict) -> str:
  """The config as plain YAML, keys sorted, each list on one line ([1, 5, 10])."""
  return yaml.dump(plain(config.to_dict()), Dumper=_PlainDumper, default_flow_style=False,
                   sort_keys=True, width=100)


def dotted_keys(config: ml_collections.ConfigDict, sections: bool = False,
                prefix: str = '') -> list[str]:
  """Every dotted key of the config that holds a value; with `sections`, also 'pp', 'model', ..."""
  keys = []
  for key, value in config.items():
    nested = isinstance(value, (dict, ml_collections.ConfigDict))
    if sections or not nested:
      keys.append(f'{prefix}{key}')
    if nested:
      keys += dotted_keys(value, sections, f'{prefix}{key}.')
  return keys


# Other trainers' flags (timm's train.py, ...) whose config key has another name here.
FLAG_ALIASES = {'lr': 'base_lr', 'model': 'model_name', 'batch_size': 'batch',
                'b': 'batch', 'epochs': 'total_steps', 'warmup_epochs': 'warmup_steps',
                'opt': 'optimizer', 'clip_grad': 'grad_clip_norm', 'sched': 'decay_type',
                'min_lr': 'end_lr', 'drop_path': 'model.stochastic_depth',
                'drop': 'model.dropout_rate', 'smoothing': 'pp.label_smoothing',
                'mixup': 'pp.mixup', 'cutmix': 'pp.cutmix', 'data': 'data_dir',
                'img_size': 'pp.crop', 'input_size': 'pp.crop', 'model_ema_decay': 'ema_decay'}


def config_key_for_flag(name: str, config: ml_collections.ConfigDict) -> Optional[str]:
  """The dotted key of `config` an unknown flag `name` most likely means (--batch: 'batch')."""
  name = name.replace('-', '_')
  keys = dotted_keys(config)
  if name in keys:
    return name
  if name in FLAG_ALIASES:
    return FLAG_ALIASES[name]
  ends = [k for k in keys if k.endswith('.' + name)]
  return ends[0] if len(ends) == 1 else None
