"""Sphinx configuration of the vit_jax documentation (MyST Markdown, sphinx-book-theme)."""
import os
import re
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
    'results_table',
]
# .rst first: autosummary writes its API stubs with the first suffix, and they are reStructuredText.
source_suffix = {'.rst': 'restructuredtext', '.md': 'myst-nb', '.ipynb': 'myst-nb'}
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


def _plain_text_docstrings(app, what, name, obj, options, lines):  # pylint: disable=unused-argument
  """Shows the package's plain-text docstrings as written.

  The modules' docstrings are prose with indented command lines and lists, not
  reStructuredText: past its summary line a module docstring is shown preformatted. In the
  others, `*` and `|` are text (pointers, shell pipes), not emphasis, substitutions or link targets. Runs
  before napoleon turns their Args/Returns sections into fields.
  """
  def escape(line: str) -> str:
    line = line.replace('*', r'\*').replace('|', r'\|')
    return re.sub(r'(?<=\w)_(?=\W|$)', r'\_', line)  # NAME_ is a link target in reST
  if what == 'module':
    rest = lines[1:]
    while rest and not rest[0].strip():
      rest = rest[1:]
    lines[:] = [escape(lines[0])] if lines else []
    if rest:
      lines += ['', '.. code-block:: text', ''] + ['   ' + line for line in rest]
  else:
    lines[:] = [escape(line) for line in lines]


def setup(app):
  """Connects the docstring filter ahead of napoleon's (priority 500)."""
  app.connect('autodoc-process-docstring', _plain_text_docstrings, priority=400)
