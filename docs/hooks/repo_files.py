"""MkDocs hook: pages link repository files outside docs/ the way GitHub
shows them (`../examples/pytorch/train_digits.py`, `../bench/results/x.png`).
Each such file a page links is copied into the site under repo/, so the link
works in both places and strict mode still fails on a link to a file that
does not exist."""
import os
import re

from mkdocs.structure.files import File, InclusionLevel

# A Markdown link or image whose target leaves docs/: ](../path) or ](../path#anchor).
_OUTSIDE_LINK = re.compile(r"\]\(\.\./([^)#\s]+)(?:#[^)]*)?\)")


def on_files(files, config):
    docs_dir = config["docs_dir"]
    repo = os.path.dirname(docs_dir)
    linked = set()
    for page in files.documentation_pages():
        with open(page.abs_src_path, encoding="utf-8") as source:
            linked.update(_OUTSIDE_LINK.findall(source.read()))
    for path in sorted(linked):
        if not os.path.isfile(os.path.join(repo, path)):
            continue  # left for MkDocs to report as a broken link
        outside = File(f"../{path}", docs_dir, config["site_dir"], config["use_directory_urls"],
                       dest_uri=f"repo/{path}", inclusion=InclusionLevel.INCLUDED)
        files.append(outside)
    return files
