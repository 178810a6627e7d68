"""The docs cannot fall behind (datasette's way): every command, config key and hook has an entry, the
generated pages are what the code says now, and the site builds with warnings as errors."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_pages_are_up_to_date():
    gen = _gen()
    for page, make in gen.PAGES.items():
        assert (DOCS / page).read_text() == make() + "\n", f"docs/{page} is out of date: run `make docs`"


def test_every_config_key_has_a_description_and_every_note_is_a_key():
    gen = _gen()
    notes = gen.read_notes()
    keys = {key: comment for name, cls in gen.config_sections() for key, _, _, comment in gen.keys(name, cls)}
    undocumented = sorted(k for k, comment in keys.items() if not (notes.get(k) or comment))
    assert not undocumented, f"config keys with no description (add to docs/config-notes.txt): {undocumented}"
    stale = sorted(set(notes) - set(keys))
    assert not stale, f"docs/config-notes.txt describes keys that do not exist: {stale}"


def test_every_command_is_described_on_the_commands_page():
    from rewardhub.cli import build_parser

    parser = build_parser()
    names = next(a for a in parser._actions if hasattr(a, "choices") and a.choices).choices
    text = (DOCS / "cli.md").read_text()
    missing = sorted(n for n in names if f"rewardhub {n}" not in text)
    assert not missing, f"commands with no entry in docs/cli.md: {missing}"


def test_every_hook_has_an_example_and_every_entry_point_group_an_entry():
    import rewardhub._discovery as discovery
    import rewardhub.config.owners as owners
    import rewardhub.hookspecs as specs

    for name in dir(specs):
        if name.startswith("rewardhub_"):
            assert "Example::" in (getattr(specs, name).__doc__ or ""), f"hook {name} has no Example"
    groups = {v for k, v in vars(discovery).items() if k.endswith("_GROUP")} | {owners.ENTRY_POINT_GROUP}
    missing = sorted(groups - set(_gen().GROUPS))
    assert not missing, f"entry-point groups with no entry in scripts/gen_docs.py's GROUPS: {missing}"


def test_every_page_is_in_the_nav_and_every_readme_link_resolves():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        elif isinstance(node, list):
            for v in node:
                yield from pages(v)

    listed = set(pages(nav))
    on_disk = {p.name for p in DOCS.glob("*.md")}
    assert on_disk == listed, f"not in mkdocs.yml's nav: {on_disk - listed}; missing: {listed - on_disk}"
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is a newcomer's first read: reference goes to docs/"
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


@pytest.mark.timeout(300)
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "config-reference" / "index.html").exists()
