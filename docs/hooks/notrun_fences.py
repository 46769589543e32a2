"""MkDocs hook: shell blocks the tests do not run are fenced as ```bash notrun
(tests/runner/test_readme_is_true.py runs or skips each block by that mark).
GitHub reads the first word as the language and ignores the rest;
pymdownx.superfences does not take a bare word there, so the mark is dropped
before the page is rendered."""
import re

_NOTRUN = re.compile(r"^(\s*```\w+) notrun$", re.MULTILINE)


def on_page_markdown(markdown, page, config, files):
    return _NOTRUN.sub(r"\1", markdown)
