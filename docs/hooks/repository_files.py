"""MkDocs hook: serve the repository files the pages link to outside docs/.

The pages link files of the repository by their paths in it (``../benchmarks/results/x.json``,
``../README.md``, ``../examples/atari_env.py``), which read right on a code host but lie outside the
site. This hook adds each such file to the site, under ``repository/<its path in the repository>``,
and points the link there, so the Markdown sources keep their repository links while every link of
the built site resolves (and ``validation.links`` can make a dead one an error):

- a Markdown file becomes a page of the site (outside the navigation), whose own links are served
  the same way; its links into docs/ lead to the site's pages;
- any other file is copied as it is;
- a folder becomes a page listing its files (those git tracks, in a checkout), each served too;
  a folder with a README.md leads to that README's page instead.

Only existing paths inside the repository are served; a link to anything else is left as written,
for MkDocs to report.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from markdown import Extension
from markdown.treeprocessors import Treeprocessor
from mkdocs.structure.files import File, Files, InclusionLevel

#: The site folder holding the repository's files.
SITE_FOLDER = "repository"

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
#: Inline links and images ``[text](target "title")``, and reference definitions ``[label]: target``.
_INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


class _State:
    repo: Path
    docs: Path
    #: Where each served repository path (a file, or a folder's listing) lives in the site.
    served: dict[Path, str]
    #: The real location of each page of the site, against which its relative links resolve.
    locations: dict[str, Path]
    #: The page being rendered.
    page: File | None = None


_state = _State()


def _link_targets(markdown: str) -> list[str]:
    text = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    return [*_INLINE.findall(text), *_REFERENCE.findall(text)]


def _relative_path(target: str) -> str | None:
    """The path part of a relative link, or None for a URL, an absolute path or an anchor alone."""
    scheme, netloc, path, _, _ = urlsplit(target)
    if scheme or netloc or not path or path.startswith(("/", "\\")):
        return None
    return unquote(path)


def _resolve(location: Path, target: str) -> Path | None:
    """Where a relative link of the page at ``location`` points, if outside docs/ in the repository."""
    path = _relative_path(target)
    if path is None:
        return None
    resolved = Path(posixpath.normpath((location.parent / path).as_posix()))
    if resolved.is_relative_to(_state.docs) or not resolved.is_relative_to(_state.repo):
        return None
    return resolved


def _tracked(folder: Path) -> list[str] | None:
    """The entries of a folder that git tracks (file names, and sub-folders with a trailing /)."""
    try:
        listing = subprocess.run(
            ["git", "-C", str(folder), "ls-files", "-z", "--", "."],
            check=True, capture_output=True, text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    entries = {path.split("/", 1)[0] + ("/" if "/" in path else "") for path in listing.split("\0") if path}
    return sorted(entries)


def _entries(folder: Path) -> list[str]:
    tracked = _tracked(folder)
    if tracked:
        return [entry for entry in tracked if (folder / entry).exists()]
    return sorted(
        entry.name + ("/" if entry.is_dir() else "")
        for entry in folder.iterdir()
        if not entry.name.startswith(".") and entry.name != "__pycache__" and entry.suffix != ".pyc"
    )


def _listing(folder: Path, entries: list[str]) -> str:
    name = folder.relative_to(_state.repo).as_posix()
    lines = [
        f"# {name}/",
        "",
        f"The files of the repository's `{name}/` folder.",
        "",
    ]
    lines += [f"- [`{entry}`]({entry})" for entry in entries]
    return "\n".join(lines) + "\n"


def _serve(path: Path, files: Files, config, pending: list[tuple[Path, File]]) -> None:
    """Add the repository ``path`` to the site, once."""
    if path in _state.served or not path.exists():
        return
    relative = path.relative_to(_state.repo).as_posix()
    prefix = f"{SITE_FOLDER}/{relative}".rstrip("/").removesuffix("/.")
    if path.is_dir():
        if (path / "README.md").is_file():
            _serve(path / "README.md", files, config, pending)
            _state.served[path] = _state.served[path / "README.md"]
            return
        src_uri = f"{prefix}/index.md"
        file = File.generated(
            config, src_uri, content=_listing(path, _entries(path)), inclusion=InclusionLevel.NOT_IN_NAV
        )
        location = path / "index.md"
    else:
        src_uri = prefix
        is_page = path.suffix == ".md"
        inclusion = InclusionLevel.NOT_IN_NAV if is_page else InclusionLevel.INCLUDED
        file = File.generated(config, src_uri, abs_src_path=str(path), inclusion=inclusion)
        location = path
    _state.served[path] = src_uri
    _state.locations[src_uri] = location
    files.append(file)
    if file.is_documentation_page():
        pending.append((location, file))


def on_config(config, **_):
    _state.repo = Path(config.config_file_path).resolve().parent
    _state.docs = Path(config.docs_dir).resolve()
    if not any(isinstance(extension, _RepositoryLinks) for extension in config.markdown_extensions):
        config.markdown_extensions.append(_RepositoryLinks())
    return config


def on_files(files: Files, config, **_) -> Files:
    _state.served = {}
    _state.locations = {}
    pending = []
    for file in files.documentation_pages():
        if file.abs_src_path:
            location = Path(file.abs_src_path).resolve()
            _state.locations[file.src_uri] = location
            pending.append((location, file))
    while pending:
        location, file = pending.pop()
        for target in _link_targets(file.content_string):
            resolved = _resolve(location, target)
            if resolved is not None:
                _serve(resolved, files, config, pending)
    return files


def on_page_markdown(markdown: str, page, **_) -> str:
    _state.page = page.file
    return markdown


def on_post_page(output: str, **_) -> str:
    _state.page = None
    return output


def _site_link(url: str) -> str | None:
    """The link to the site's copy of what ``url`` of the page being rendered points to."""
    page = _state.page
    location = _state.locations.get(page.src_uri) if page is not None else None
    if location is None:
        return None
    path = _relative_path(url)
    if path is None:
        return None
    resolved = Path(posixpath.normpath((location.parent / path).as_posix()))
    if resolved in _state.served:
        target = _state.served[resolved]
    elif resolved.is_relative_to(_state.docs):
        # Into docs/ (from a served repository page, or by a path through the repository such as
        # ../docs/page.md): the site's own file, unless the link already reads so.
        target = resolved.relative_to(_state.docs).as_posix()
        if posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), path)) == target:
            return None
    else:
        return None
    _, _, _, query, fragment = urlsplit(url)
    relative = posixpath.relpath(target, posixpath.dirname(page.src_uri) or ".")
    return urlunsplit(("", "", relative, query, fragment))


class _RewriteLinks(Treeprocessor):
    def run(self, root):
        for element in root.iter():
            key = {"a": "href", "img": "src"}.get(element.tag)
            url = element.get(key) if key else None
            if url:
                rewritten = _site_link(url)
                if rewritten is not None:
                    element.set(key, rewritten)
        return root


class _RepositoryLinks(Extension):
    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        # Before MkDocs's own "relpath" treeprocessor (priority 0), which checks and converts links.
        md.treeprocessors.register(_RewriteLinks(md), "repository_links", 1)
