"""The tiny trainer-test config as a config file, for subprocess runs of vit_jax.main."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import test_train  # pylint: disable=g-import-not-at-top,wrong-import-position


def get_config():
  return test_train.tiny_config()
