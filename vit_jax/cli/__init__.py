"""The commands: main (training), predict, visualize, fewshot; `python -m vit_jax.<name>`.

Importing this package keeps TensorFlow's C++ start-up chatter out of the output: the
variables must be set before TensorFlow (the input pipeline) is first imported. TensorFlow
announces its oneDNN CPU kernels (twice) whatever TF_CPP_MIN_LOG_LEVEL says; the input
pipeline runs no matmuls or convolutions, where those kernels would matter.
"""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
