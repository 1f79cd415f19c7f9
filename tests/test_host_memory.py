"""vit_jax.parallel.host_memory: which runs keep freed host memory (CPU-only ones)."""
import os
from unittest import mock

from absl.testing import absltest

from vit_jax.parallel import host_memory


class HostMemoryTest(absltest.TestCase):

  def test_host_is_device_follows_jax_platforms(self):
    for value, expected in (('cpu', True), ('cuda,cpu', False), ('tpu', False)):
      with mock.patch.dict(os.environ, {'JAX_PLATFORMS': value}):
        self.assertEqual(host_memory.host_is_device(), expected, value)

  def test_retain_on_cpu_only(self):
    with mock.patch.dict(os.environ, {'JAX_PLATFORMS': 'cuda'}):
      self.assertFalse(host_memory.retain_on_cpu())  # an accelerator: allocator untouched
    if os.uname().sysname == 'Linux' and os.confstr('CS_GNU_LIBC_VERSION'):
      with mock.patch.dict(os.environ, {'JAX_PLATFORMS': 'cpu'}):
        self.assertTrue(host_memory.retain_on_cpu())


if __name__ == '__main__':
  absltest.main()
