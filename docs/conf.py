"""Sphinx configuration of the vit_jax documentation (MyST Markdown, sphinx-book-theme)."""
import os
import shutil
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(DOCS)
sys.path.insert(0, os.path.join(DOCS, '_ext'))
sys.path.insert(0, REPO)

import vit_jax  # pylint: disable=wrong-import-position

project = 'vit_jax'
author = 'vit_jax authors'
copyright = '2026, vit_jax authors'  # pylint: disable=redefined-builtin
release = vit_jax.__version__
version = release

extensions = [
    'myst_nb',
    'sphinx.ext.autodoc',
    'sphinx.ext.autosummary',
    'sphinx.ext.napoleon',
    'sphinx.ext.viewcode',
    'results_table',
]
source_suffix = {'.md': 'myst-nb', '.ipynb': 'myst-nb'}
root_doc = 'index'
exclude_patterns = ['_build', 'jupyter_execute', 'results/README.md', 'Thumbs.db', '.DS_Store']

myst_enable_extensions = ['colon_fence', 'deflist']
myst_heading_anchors = 3
# The notebook downloads nothing and needs no accelerator, but executing it takes minutes of
# training: the suite runs it (tests/test_notebook.py); the site shows it as committed.
nb_execution_mode = 'off'

autosummary_generate = True
autodoc_default_options = {'members': True, 'show-inheritance': True}
autodoc_typehints = 'description'
autodoc_member_order = 'bysource'
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = 'sphinx_book_theme'
html_title = f'vit_jax {release}'
html_theme_options = {
    'show_toc_level': 2,
}
html_static_path = []

# The notebook lives in notebooks/ (Colab opens it there); the site renders a copy.
_NOTEBOOK = os.path.join(REPO, 'notebooks', 'vit_jax.ipynb')
_NOTEBOOK_COPY = os.path.join(DOCS, 'notebook', 'vit_jax.ipynb')
os.makedirs(os.path.dirname(_NOTEBOOK_COPY), exist_ok=True)
shutil.copyfile(_NOTEBOOK, _NOTEBOOK_COPY)
