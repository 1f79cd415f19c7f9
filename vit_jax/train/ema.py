"""Weight EMA (timm's --model-ema): an average of the parameters kept beside them.

It lives in the train state's `extra` slot, the home of state that gradients do not
train: updated after every optimizer step inside the same jitted step, sharded like the
parameters, checkpointed and resumed with the rest, never decayed or given optimizer
state. With `config.ema_decay = d > 0`, after step t

    ema_t = d * ema_{t-1} + (1 - d) * params_t,     ema_0 = the initial parameters,

in float32 whatever the compute dtype. Evaluators also score it (metrics with the
suffix `_ema`, `config.ema_eval`) and the run exports it as `ema_params.npz`.
"""
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import ml_collections

from vit_jax import option_rules

KEY = 'ema'
SUFFIX = '_ema'

Extra = dict[str, Any]


# Options that act only with a weight EMA (vit_jax.option_rules).
OPTION_RULES = (
    option_rules.Rule(('ema_decay',), lambda decay: not decay, ('ema_eval',),
                      "set ema_decay (timm's 0.9998)"),
)


def enabled(config: ml_collections.ConfigDict) -> bool:
  """Whether the run keeps a weight EMA."""
  return config.get('ema_decay', 0.0) > 0


def check(config: ml_collections.ConfigDict) -> None:
  """One-line error unless 0 <= config.ema_decay < 1."""
  decay = config.get('ema_decay', 0.0)
  if not isinstance(decay, (int, float)) or isinstance(decay, bool) or not 0 <= decay < 1:
    raise ValueError(f'config.ema_decay={decay!r} must lie in [0, 1) (0 = no weight EMA; '
                     "timm's default 0.9998).")


def init_extra(config: ml_collections.ConfigDict, params: Any) -> Extra:
  """The extra slot at step 0: a copy of the initial parameters when EMA is on."""
  return {KEY: jax.tree.map(jnp.copy, params)} if enabled(config) else {}


def make_update(config: ml_collections.ConfigDict
                ) -> Optional[Callable[[Extra, Any, jax.Array], Extra]]:
  """update(extra, new params, step) -> extra, run after each optimizer step; None if off."""
  if not enabled(config):
    return None
  decay = float(config.ema_decay)

  def update(extra: Extra, params: Any, step: jax.Array) -> Extra:
    del step  # a constant decay, as timm's ModelEmaV2
    ema = jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p.astype(e.dtype),
                       extra[KEY], params)
    return {**extra, KEY: ema}

  return update


def params_of(extra: Extra) -> Optional[Any]:
  """The averaged parameters, or None when the run keeps none."""
  return extra.get(KEY) if extra else None
