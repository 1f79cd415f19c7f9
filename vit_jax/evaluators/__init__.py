"""Evaluators chosen by name from config.evals: classification, few-shot, k-NN, linear probe, images.

See vit_jax.evaluators.base for the interface; importing this package registers the
built-in types.
"""
from vit_jax.evaluators import base
from vit_jax.evaluators import classification
from vit_jax.evaluators import fewshot
from vit_jax.evaluators import images
from vit_jax.evaluators import knn
from vit_jax.evaluators import linear_probe

base.register('classification', classification.Classification)
base.register('fewshot', fewshot.FewShot)
base.register('images', images.Images)
base.register('knn', knn.KNN)
base.register('linear_probe', linear_probe.LinearProbe)

Context = base.Context
Evaluator = base.Evaluator
register = base.register
create = base.create
check = base.check
