"""Evaluators chosen by name from config.evals: classification, few-shot, images.

See vit_jax.evaluators.base for the interface; importing this package registers the
built-in types.
"""
from vit_jax.evaluators import base
from vit_jax.evaluators import classification
from vit_jax.evaluators import fewshot
from vit_jax.evaluators import images

base.register('classification', classification.Classification)
base.register('fewshot', fewshot.FewShot)
base.register('images', images.Images)

Context = base.Context
Evaluator = base.Evaluator
register = base.register
create = base.create
check = base.check
