"""tools/docs_check.py's parts that need no browser: the link check and the search page's results."""
import os
import re
import tempfile

from absl.testing import absltest

from tests import tool_modules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(root: str, path: str, text: str) -> None:
  path = os.path.join(root, path)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(text)


class BrokenLinksTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tool = tool_modules.load('docs_check')
    self.site = tempfile.mkdtemp()
    _write(self.site, 'guides/a.html', '<h1 id="top">A</h1><span id="x"></span>'
           '<a href="../index.html#intro">home</a><img src="../images/p.png">'
           '<a href="https://example.org/missing">out</a><a href="#x">here</a>'
           '<a href="mailto:a@b.c">mail</a>')
    _write(self.site, 'index.html', '<section id="intro"></section><a href="guides/a.html#top">a</a>'
           '<a href="guides/">dir</a>')
    _write(self.site, 'guides/index.html', '<p></p>')
    _write(self.site, 'images/p.png', 'png')
    # The theme's templates in _static are not pages, even with unrendered links.
    _write(self.site, '_static/macros.html', '<link href="{{ pathto(\'x\') }}">')

  def test_a_site_whose_links_resolve_passes(self):
    self.assertEqual(self.tool.broken_links(self.site), [])

  def test_a_missing_file_and_a_missing_anchor_are_named(self):
    _write(self.site, 'guides/b.html', '<a href="a.html#nope">x</a><a href="gone.html">y</a>'
           '<img src="../images/q.png">')
    self.assertEqual(self.tool.broken_links(self.site), [
        'guides/b.html: a.html#nope (no anchor #nope)',
        'guides/b.html: gone.html (no file guides/gone.html)',
        'guides/b.html: ../images/q.png (no file images/q.png)',
    ])


class SearchResultsTest(absltest.TestCase):

  def test_reads_the_pages_a_rendered_search_lists(self):
    tool = tool_modules.load('docs_check')
    dom = ('<ul class="search"><li class="kind-text"><a href="guides/recipes.html?highlight=x" '
           'data-score="5">Recipes</a></li><li class="kind-object"><a href="api.html#f">f</a></li></ul>')
    self.assertEqual(tool.search_results(dom), ['guides/recipes.html', 'api.html'])
    self.assertEqual(tool.search_results('<ul class="search"></ul>'), [])


class ReadmeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    with open(os.path.join(REPO, 'README.md')) as f:
      self.readme = f.read()

  def test_short_with_the_fresh_machine_commands_first(self):
    self.assertLessEqual(self.readme.count('\n'), 300)
    first_screen = '\n'.join(self.readme.split('\n')[:10])
    self.assertIn('pip install -e . && python -m vit_jax.main --config=configs/quickstart.py', first_screen)
    self.assertIn("pip install -e '.[test]' && python -m pytest tests -q", first_screen)

  def test_every_relative_link_names_a_file_that_exists(self):
    links = re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', self.readme)
    local = [link for link in links if '://' not in link]
    self.assertGreaterEqual(len(local), 10)
    for link in local:
      with self.subTest(link):
        self.assertTrue(os.path.exists(os.path.join(REPO, link)))


if __name__ == '__main__':
  absltest.main()
