"""Opens the built documentation in headless Chromium and checks it: python tools/docs_check.py.

Run after `sphinx-build -W docs docs/_build`. Checks that the home page, a guide and an API page
render with their headings (the DOM after JavaScript ran), that a generated results table shows
its numbers, that every internal link of every page names a file and anchor that exist, and
that the site's search finds a config key; screenshots of the pages go to
docs/_build/screenshots/ (build artefacts). Exit status 0 when all pass, 1 otherwise, 2 when
the site or Chromium is missing.
"""
import argparse
import html.parser
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# page -> texts its rendered DOM must hold
PAGES = {
    'index.html': ('<h1>vit_jax', 'Getting started'),
    'guides/getting_started.html': ('<h1>Getting started', 'Quickstart', '0.976', 'quickstart_seeds.csv'),
    '_autosummary/vit_jax.checkpoint.html': ('<h1>vit_jax.checkpoint', 'load_any', 'Functions'),
}
SEARCH_KEY = 'total_steps'
_BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')


class _Links(html.parser.HTMLParser):
  """Collects a page's link targets and the ids it defines."""

  def __init__(self):
    super().__init__()
    self.targets: list[str] = []
    self.ids: set[str] = set()

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if attrs.get('id'):
      self.ids.add(attrs['id'])
    if tag == 'a' and attrs.get('name'):
      self.ids.add(attrs['name'])
    for key in ('href', 'src'):
      if attrs.get(key) and not (tag == 'link' and key == 'href' and attrs.get('rel') == ['preconnect']):
        self.targets.append(attrs[key])


def _parse(path: str) -> _Links:
  parser = _Links()
  with open(path, encoding='utf-8') as f:
    parser.feed(f.read())
  return parser


def broken_links(site: str) -> list[str]:
  """Every internal href/src of the site's HTML pages whose file or #anchor does not exist."""
  pages = {}
  for root, dirs, files in os.walk(site):
    # _static holds the theme's Jinja templates, _sources the pages' text: neither is a page.
    dirs[:] = [d for d in dirs if d not in ('_static', '_sources')]
    for name in files:
      if name.endswith('.html'):
        path = os.path.join(root, name)
        pages[os.path.normpath(path)] = _parse(path)
  problems = []
  for page, links in sorted(pages.items()):
    for target in links.targets:
      parts = urllib.parse.urlsplit(target)
      if parts.scheme or parts.netloc or target.startswith(('mailto:', 'javascript:', 'data:')):
        continue
      path = urllib.parse.unquote(parts.path)
      file = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
      if os.path.isdir(file):
        file = os.path.join(file, 'index.html')
      where = f'{os.path.relpath(page, site)}: {target}'
      if not os.path.exists(file):
        problems.append(f'{where} (no file {os.path.relpath(file, site)})')
      elif parts.fragment and file.endswith('.html'):
        ids = pages[file].ids if file in pages else _parse(file).ids
        if urllib.parse.unquote(parts.fragment) not in ids:
          problems.append(f'{where} (no anchor #{parts.fragment})')
  return problems


def find_browser() -> str | None:
  """The first headless-capable Chromium on PATH."""
  for name in _BROWSERS:
    path = shutil.which(name)
    if path:
      return path
  return None


def _run_browser(browser: str, args: list[str], timeout: float) -> str:
  flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
           '--no-first-run', '--hide-scrollbars', '--window-size=1280,1400']
  result = subprocess.run([browser] + flags + args, capture_output=True, text=True, timeout=timeout,
                          check=False)
  return result.stdout


def dump_dom(browser: str, url: str, budget_ms: int = 5000) -> str:
  """The page's DOM after its JavaScript ran for budget_ms of virtual time."""
  return _run_browser(browser, [f'--virtual-time-budget={budget_ms}', '--dump-dom', url], 120)


def screenshot(browser: str, url: str, out: str) -> bool:
  """Saves a PNG of the page; True when the file was written."""
  if os.path.exists(out):
    os.remove(out)
  _run_browser(browser, ['--virtual-time-budget=3000', f'--screenshot={out}', url], 120)
  return os.path.isfile(out) and os.path.getsize(out) > 0


def search_results(dom: str) -> list[str]:
  """The pages the rendered search page lists, in its order."""
  return re.findall(r'<li class="kind-[a-z]+"><a href="([^"#?]+)', dom)


def _mentions(path: str, text: str) -> bool:
  with open(path, encoding='utf-8') as f:
    return text in f.read()


def check(site: str, browser: str, shots: str) -> list[str]:
  """Every problem found in the built site (empty when it passes)."""
  problems = []
  os.makedirs(shots, exist_ok=True)
  for page, expected in PAGES.items():
    path = os.path.join(site, page)
    if not os.path.isfile(path):
      problems.append(f'{page}: not built')
      continue
    url = 'file://' + os.path.abspath(path)
    dom = dump_dom(browser, url)
    problems += [f'{page}: the rendered page lacks {text!r}' for text in expected if text not in dom]
    name = page.replace('/', '_').replace('.html', '.png')
    if not screenshot(browser, url, os.path.join(shots, name)):
      problems.append(f'{page}: no screenshot')
  search = 'file://' + os.path.abspath(os.path.join(site, 'search.html')) + f'?q={SEARCH_KEY}'
  found = search_results(dump_dom(browser, search, budget_ms=15000))
  if not any(_mentions(os.path.join(site, page), SEARCH_KEY) for page in found):
    problems.append(f'search.html?q={SEARCH_KEY} lists no page that holds it: {found}')
  if not screenshot(browser, search, os.path.join(shots, 'search.png')):
    problems.append('search.html: no screenshot')
  problems += broken_links(site)
  print(f'docs_check: {len(PAGES)} pages rendered, search for {SEARCH_KEY!r}: {len(found)} pages, '
        f'screenshots in {os.path.relpath(shots, REPO)}')
  return problems


def main() -> int:
  """Runs the checks; prints one line per problem."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--site', default=os.path.join(REPO, 'docs', '_build'))
  parser.add_argument('--screenshots', default=None, help='default: SITE/screenshots')
  args = parser.parse_args()
  if not os.path.isfile(os.path.join(args.site, 'index.html')):
    print(f'docs_check: error: no {args.site}/index.html; build it first '
          '(sphinx-build -W docs docs/_build)', file=sys.stderr)
    return 2
  browser = find_browser()
  if browser is None:
    print('docs_check: error: no Chromium on PATH; install it (apt-get install -y chromium)',
          file=sys.stderr)
    return 2
  problems = check(args.site, browser, args.screenshots or os.path.join(args.site, 'screenshots'))
  for problem in problems:
    print(f'docs_check: {problem}')
  print('docs_check: ' + ('OK' if not problems else f'{len(problems)} problems'))
  return 1 if problems else 0


if __name__ == '__main__':
  sys.exit(main())
