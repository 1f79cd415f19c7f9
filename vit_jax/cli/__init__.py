"""The commands: main (training), predict, visualize, fewshot; `python -m vit_jax.<name>`.

Importing this package keeps TensorFlow's C++ start-up chatter out of the output: the
variable must be set before TensorFlow (the input pipeline) is first imported.
"""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
