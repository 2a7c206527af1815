"""The documentation site, built as CI builds it (``mkdocs build --strict``): no warning, no dead link
or anchor, the repository files the pages link outside docs/ served in the site; and its API
reference shows every parameter with the type and default of the real signature
(``inspect.signature``), in each signature block and in each Parameters and Attributes table.

One build of the site serves the whole module (a few seconds). Building needs the ``docs`` extra
(MkDocs, mkdocstrings-python, Ruff to format the signatures): without it these tests fail, saying
so, rather than skip. tests/test_docs_blocks.py checks, on the Markdown sources, that the relative
links of docs/*.md resolve in the repository; here the built site is checked.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import importlib
import importlib.util
import inspect
import logging
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.doc_blocks import REPO_ROOT

HOOK = REPO_ROOT / "docs" / "hooks" / "repository_files.py"
MISSING = (
    "building the documentation site needs MkDocs, mkdocstrings-python and Ruff (or Black) to format "
    "the signatures: the `docs` extra, `pip install -e \".[docs]\"`"
)


# -- building ------------------------------------------------------------------------------------


@dataclass
class Build:
    site: Path
    config: object
    records: list[logging.LogRecord]
    error: Exception | None


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def build_site(config_file: Path, site_dir: Path) -> Build:
    """Build the site of ``config_file`` into ``site_dir`` strictly, as ``mkdocs build --strict`` does,
    keeping every message MkDocs and its plugins log at INFO or above. (Not DEBUG: MkDocs checks the
    anchors of links only when its log level is above DEBUG.)"""
    try:
        from mkdocs.commands.build import build
        from mkdocs.config import load_config
        from mkdocs.exceptions import MkDocsException
    except ImportError as error:
        pytest.fail(f"{MISSING}: {error}")
    handler = _Records()
    logger = logging.getLogger("mkdocs")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    error = None
    try:
        config = load_config(str(config_file), site_dir=str(site_dir), strict=True)
        try:
            build(config)
        except MkDocsException as raised:  # Abort in strict mode on warnings, BuildError, ...
            error = raised
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return Build(site_dir, config, handler.records, error)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Build:
    try:
        import mkdocstrings_handlers.python  # noqa: F401
    except ImportError as error:
        pytest.fail(f"{MISSING}: {error}")
    if importlib.util.find_spec("ruff") is None and importlib.util.find_spec("black") is None:
        pytest.fail(f"{MISSING}: neither Ruff nor Black is installed to format the signatures")
    return build_site(REPO_ROOT / "mkdocs.yml", tmp_path_factory.mktemp("site"))


def _messages(records, level=logging.DEBUG) -> list[str]:
    return [f"{record.levelname}: {record.getMessage()}" for record in records if record.levelno >= level]


LINK_MESSAGE = re.compile(r"\blinks?\b|\banchor", re.IGNORECASE)


# -- the whole site ------------------------------------------------------------------------------


def test_the_site_builds_strictly_without_a_warning(site):
    assert _messages(site.records, logging.WARNING) == []
    assert site.error is None, f"mkdocs build --strict failed: {site.error}"
    assert (site.site / "api" / "index.html").is_file()


def test_a_dead_link_or_anchor_is_a_warning_so_the_strict_build_fails_on_it(site):
    assert site.config.strict
    validation = site.config.validation.links
    levels = {name: getattr(validation, name) for name in ("not_found", "unrecognized_links", "anchors", "absolute_links")}
    assert levels == dict.fromkeys(levels, logging.WARNING)


def test_no_message_about_a_link_or_an_anchor(site):
    assert [message for message in _messages(site.records) if LINK_MESSAGE.search(message)] == []


def test_the_repository_files_the_pages_link_are_served(site):
    """Every link of a docs page into the site's copy of the repository leads to a copy of the
    repository file (or a page made of it, or a folder's listing)."""
    served = set()
    for page in (site.site).glob("*/index.html"):
        for href in re.findall(r'href="(\.\./repository/[^"#]*)', page.read_text(encoding="utf-8")):
            served.add((page.parent / href).resolve().relative_to(site.site.resolve()).as_posix())
    assert served, "no page links a repository file: is docs/hooks/repository_files.py in mkdocs.yml?"
    for path in sorted(served):
        target = site.site / path
        if target.is_dir():
            assert (target / "index.html").is_file(), path
        else:
            original = REPO_ROOT / path.removeprefix("repository/")
            assert target.read_bytes() == original.read_bytes(), path


# -- the hook, on a small site -------------------------------------------------------------------


def _small_site(root: Path, page: str) -> Path:
    """A repository at ``root`` with docs/index.md (``page``), some files outside docs/ and a
    mkdocs.yml using the hook."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "index.md").write_text(textwrap.dedent(page), encoding="utf-8")
    (root / "docs" / "other.md").write_text("# Other\n\n## Part\n", encoding="utf-8")
    (root / "data" / "runs").mkdir(parents=True)
    (root / "data" / "results.json").write_text('{"score": 1}\n', encoding="utf-8")
    (root / "data" / "runs" / "one.json").write_text("{}\n", encoding="utf-8")
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text(
        "# Notes\n\n## A section\n\n[results](../data/results.json), [back](../docs/other.md#part)\n",
        encoding="utf-8",
    )
    (root / "mkdocs.yml").write_text(
        textwrap.dedent(f"""\
            site_name: Small
            strict: true
            nav:
              - index.md
              - other.md
            validation:
              links:
                not_found: warn
                unrecognized_links: warn
                anchors: warn
                absolute_links: warn
            hooks:
              - {HOOK}
            """),
        encoding="utf-8",
    )
    return root / "mkdocs.yml"


def test_the_hook_serves_linked_repository_files_and_points_the_links_there(tmp_path):
    config = _small_site(tmp_path / "repo", """\
        # Home

        [results](../data/results.json), [notes](../notes/README.md#a-section), [folder](../data/),
        [another page](other.md#part), [through the repository](../docs/other.md),
        [by reference][one], `[in code](../nowhere.json)`

        ```
        [in a block](../nowhere.json)
        ```

        [one]: ../data/runs/one.json
        """)
    built = build_site(config, tmp_path / "site")
    assert _messages(built.records, logging.WARNING) == [] and built.error is None
    site = tmp_path / "site"
    home = (site / "index.html").read_text(encoding="utf-8")
    for href in ('href="repository/data/results.json"', 'href="repository/notes/#a-section"',
                 'href="repository/data/"', 'href="other/#part"', 'href="other/"',
                 'href="repository/data/runs/one.json"'):
        assert href in home
    assert (site / "repository/data/results.json").read_text(encoding="utf-8") == '{"score": 1}\n'
    notes = (site / "repository/notes/index.html").read_text(encoding="utf-8")
    assert 'href="../data/results.json"' in notes and 'href="../../other/#part"' in notes
    listing = (site / "repository/data/index.html").read_text(encoding="utf-8")
    assert 'href="results.json"' in listing and 'href="runs/"' in listing
    assert (site / "repository/data/runs/one.json").is_file()
    assert not (site / "repository/nowhere.json").exists()


@pytest.mark.parametrize("link, message", [
    ("../data/missing.json", "contains a link '../data/missing.json', but the target"),
    ("../notes/README.md#no-such-section", "does not contain an anchor '#no-such-section'"),
    ("../../outside.json", "contains a link '../../outside.json', but the target"),
    ("other.md#no-part", "does not contain an anchor '#no-part'"),
])
def test_a_page_linking_a_missing_file_or_anchor_fails_the_strict_build(tmp_path, link, message):
    (tmp_path / "outside.json").write_text("{}\n", encoding="utf-8")  # outside the repository
    config = _small_site(tmp_path / "repo", f"# Home\n\n[gone]({link})\n")
    built = build_site(config, tmp_path / "site")
    warnings = _messages(built.records, logging.WARNING)
    assert len(warnings) == 1 and message in warnings[0], warnings
    assert built.error is not None and "strict" in str(built.error)


# -- the API reference ---------------------------------------------------------------------------


@dataclass
class Rendered:
    """One object of the rendered API page: its signature block and its tables, as text."""

    id: str
    signature: str | None
    #: section title -> rows, each {column header: cell text}
    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def rendered_objects(page: str) -> list[Rendered]:
    heading = re.compile(r'<h[1-6] id="(parallel_rollouts[\w.]*)" class="doc doc-heading">')
    starts = list(heading.finditer(page))
    objects = []
    for match, after in zip(starts, [*starts[1:], None]):
        body = page[match.end(): after.start() if after else len(page)]
        signature = re.match(
            r'.*?</h[1-6]>\s*<div class="doc-signature highlight"><pre>(?:<span></span>)?<code>(.*?)</code>',
            body, re.DOTALL,
        )
        rendered = Rendered(match.group(1), _text(signature.group(1)) if signature else None)
        for title, table in re.findall(
            r'<span class="doc-section-title">([^<]*):</span></p>\s*<table>(.*?)</table>', body, re.DOTALL
        ):
            headers = [_text(cell) for cell in re.findall(r"<th>(.*?)</th>", table, re.DOTALL)]
            rows = [
                dict(zip(headers, (_text(cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.DOTALL))))
                for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, re.DOTALL)
            ]
            rendered.tables.setdefault(title, []).extend(rows)
        objects.append(rendered)
    return objects


@pytest.fixture(scope="module")
def api(site) -> list[Rendered]:
    return rendered_objects((site.site / "api" / "index.html").read_text(encoding="utf-8"))


def resolve(dotted: str):
    """The object a heading id names: (its owner, the attribute as stored in the owner, the object)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        owner = raw = None
        for name in parts[split:]:
            # A module's lazily imported name (its __getattr__) is found by getattr alone.
            owner, obj = obj, getattr(obj, name)
            raw = inspect.getattr_static(owner, name, obj)
        return owner, raw, obj
    raise LookupError(dotted)


def real_signature(dotted: str) -> tuple[inspect.Signature, object] | None:
    """``inspect.signature`` of the callable a heading id names, as the page shows it (without
    ``self``/``cls``), and the object; None for what has no call signature (a property, an attribute)."""
    owner, raw, obj = resolve(dotted)
    if inspect.isclass(obj):
        if not any("__init__" in vars(klass) for klass in obj.__mro__[:-1] if klass.__module__.startswith("parallel_rollouts")):
            return None  # the builtin's __init__, which the page does not show
        return inspect.signature(obj), obj
    if isinstance(raw, property) or not callable(obj):
        return None
    signature = inspect.signature(obj)
    if inspect.isclass(owner) and not isinstance(raw, (staticmethod, classmethod)):
        # A method, looked up on its class: without self. (A classmethod comes bound, without cls.)
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature, obj


class _Brief(ast.NodeTransformer):
    """Annotations as the page shows them ("brief" paths): ``np.ndarray`` as ``ndarray``, string
    forward references unquoted."""

    def visit_Attribute(self, node):
        return ast.Name(node.attr, ast.Load())

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            try:
                return self.visit(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
        return node


def _annotation(text: str) -> str:
    return ast.dump(_Brief().visit(ast.parse(text.strip(), mode="eval").body))


def _real_annotation(annotation) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _globals(obj) -> dict:
    return vars(sys.modules[obj.__module__]) if getattr(obj, "__module__", None) in sys.modules else {}


def _same_default(parameter: inspect.Parameter, shown: str, obj) -> bool:
    expected = parameter.default
    if expected is dataclasses._HAS_DEFAULT_FACTORY:  # shown as the factory's call, e.g. list()
        expected = {f.name: f for f in dataclasses.fields(obj)}[parameter.name].default_factory()
    try:
        value = ast.literal_eval(shown)
    except (ValueError, SyntaxError):
        try:
            value = eval(shown, _globals(obj))  # noqa: S307 (the page's own default expression)
        except Exception:
            return False
    return value is expected or (type(value) is type(expected) and value == expected)


def compare_parameter(where: str, parameter: inspect.Parameter | None, name: str, annotation: str | None,
                      default: str | None, obj) -> list[str]:
    """What differs between a parameter as shown (``annotation``/``default`` text, None if none shown)
    and the real one."""
    if parameter is None:
        return [f"{where}: {name!r} is not a parameter"]
    problems = []
    real = _real_annotation(parameter.annotation)
    if (real is None) != (annotation is None) or (real is not None and _annotation(real) != _annotation(annotation)):
        problems.append(f"{where}: {name} shown with type {annotation!r}, annotated {real!r}")
    if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        return problems
    if parameter.default is inspect.Parameter.empty:
        if default is not None:
            problems.append(f"{where}: {name} shown with default {default!r}, has none")
    elif default is None or not _same_default(parameter, default, obj):
        problems.append(f"{where}: {name} shown with default {default!r}, has {parameter.default!r}")
    return problems


def check_signature(rendered: Rendered, signature: inspect.Signature, obj) -> list[str]:
    """The signature block against the real signature: the same parameters in the same order and
    kinds, each with its annotation and default."""
    where = f"{rendered.id} signature"
    try:
        shown = ast.parse(f"def {rendered.signature.strip()}: ...").body[0].args
    except SyntaxError as error:
        return [f"{where}: cannot read {rendered.signature!r}: {error}"]
    kind = inspect.Parameter
    positional = [*shown.posonlyargs, *shown.args]
    defaults = [None] * (len(positional) - len(shown.defaults)) + shown.defaults
    entries = [
        (argument, default, kind.POSITIONAL_ONLY if argument in shown.posonlyargs else kind.POSITIONAL_OR_KEYWORD)
        for argument, default in zip(positional, defaults)
    ]
    if shown.vararg:
        entries.append((shown.vararg, None, kind.VAR_POSITIONAL))
    entries += [(argument, default, kind.KEYWORD_ONLY) for argument, default in zip(shown.kwonlyargs, shown.kw_defaults)]
    if shown.kwarg:
        entries.append((shown.kwarg, None, kind.VAR_KEYWORD))
    names = [(argument.arg, argument_kind.description) for argument, _, argument_kind in entries]
    real = [(parameter.name, parameter.kind.description) for parameter in signature.parameters.values()]
    if names != real:
        return [f"{where}: parameters {names}, really {real}"]
    problems = []
    for argument, default, _ in entries:
        problems += compare_parameter(
            where, signature.parameters[argument.arg], argument.arg,
            ast.unparse(argument.annotation) if argument.annotation else None,
            ast.unparse(default) if default is not None else None, obj,
        )
    return problems


def check_parameters_table(rendered: Rendered, signature: inspect.Signature, obj) -> list[str]:
    problems = []
    for row in rendered.tables.get("Parameters", []):
        name = row["Name"].lstrip("*")
        default = row.get("Default", "")
        problems += compare_parameter(
            f"{rendered.id} Parameters table", signature.parameters.get(name), row["Name"],
            row["Type"] or None, None if default in ("required", "") else default, obj,
        )
    return problems


def _attribute_annotation(klass, name: str):
    for base in klass.__mro__:
        if name in inspect.get_annotations(base):
            return inspect.get_annotations(base)[name]
        if isinstance(vars(base).get(name), property):
            return inspect.signature(vars(base)[name].fget).return_annotation
    return None if hasattr(klass, name) else LookupError


def check_attributes_table(rendered: Rendered, klass) -> list[str]:
    problems = []
    for row in rendered.tables.get("Attributes", []):
        name, shown = row["Name"], row["Type"] or None
        real = _attribute_annotation(klass, name)
        if real is LookupError:
            problems.append(f"{rendered.id} Attributes table: {name!r} is not an attribute")
            continue
        real = _real_annotation(inspect.Parameter.empty if real is None else real)
        if (real is None) != (shown is None) or (real is not None and _annotation(real) != _annotation(shown)):
            problems.append(f"{rendered.id} Attributes table: {name} shown with type {shown!r}, annotated {real!r}")
    return problems


def test_every_documented_callable_is_shown_with_its_signature(api):
    missing = [obj.id for obj in api if real_signature(obj.id) is not None and obj.signature is None]
    assert missing == []


def test_every_signature_block_matches_the_real_signature(api):
    checked, problems = 0, []
    for rendered in api:
        real = real_signature(rendered.id)
        if real is not None and rendered.signature is not None:
            checked += 1
            problems += check_signature(rendered, *real)
    assert problems == []
    assert checked >= 40


def test_every_parameters_table_matches_the_real_signature(api):
    rows, problems = 0, []
    for rendered in api:
        if "Parameters" in rendered.tables:
            real = real_signature(rendered.id)
            assert real is not None, f"{rendered.id}: a Parameters table, but no call signature"
            rows += len(rendered.tables["Parameters"])
            problems += check_parameters_table(rendered, *real)
    assert problems == []
    assert rows >= 40


def test_every_attributes_table_row_is_one_attribute_with_its_annotation(api):
    rows, problems = 0, []
    for rendered in api:
        if "Attributes" in rendered.tables:
            _, _, klass = resolve(rendered.id)
            rows += len(rendered.tables["Attributes"])
            problems += check_attributes_table(rendered, klass)
    assert problems == []
    assert rows >= 20


def test_the_front_doors_are_shown_under_the_paths_users_import_without_internal_bases(site, api):
    ids = {rendered.id for rendered in api}
    assert "parallel_rollouts.sb3.ParallelVecEnv" in ids and "parallel_rollouts.ParallelVectorEnv" in ids
    assert not [name for name in ids if ".adapter." in name or ".vector_env." in name]
    page = (site.site / "api" / "index.html").read_text(encoding="utf-8")
    assert "Lifecycle" not in page
    (make_collector,) = [rendered for rendered in api if rendered.id == "parallel_rollouts.make_collector"]
    assert "env_id: str | EnvSpec | ModuleType | Callable[..., Any]" in make_collector.signature


def test_the_check_catches_a_parameter_shown_with_anothers_type_and_default():
    """What griffe renders for an entry documenting several parameters at once (``policy, backend,
    horizon, seed``): the first one's type and default for all of them."""
    from parallel_rollouts import make_collector

    signature = inspect.signature(make_collector)
    rendered = Rendered("parallel_rollouts.make_collector", None, {"Parameters": [
        {"Name": "policy", "Type": "Callable[[Any], Any] | None", "Default": "None"},
        {"Name": "backend", "Type": "Callable[[Any], Any] | None", "Default": "None"},
        {"Name": "horizon", "Type": "int", "Default": "1000"},
        {"Name": "seed", "Type": "int | None", "Default": "None"},
        {"Name": "backend, horizon", "Type": "", "Default": "required"},
    ]})
    assert check_parameters_table(rendered, signature, make_collector) == [
        "parallel_rollouts.make_collector Parameters table: backend shown with type 'Callable[[Any], Any] | None', "
        "annotated 'str'",
        "parallel_rollouts.make_collector Parameters table: backend shown with default 'None', has 'sync'",
        "parallel_rollouts.make_collector Parameters table: horizon shown with default '1000', has 128",
        "parallel_rollouts.make_collector Parameters table: 'backend, horizon' is not a parameter",
    ]
    rendered.signature = "make_collector(env_id: Any, num_envs: int = 1, policy=None, backend: str = 'async')"
    assert check_signature(rendered, signature, make_collector)[0].startswith(
        "parallel_rollouts.make_collector signature: parameters [('env_id', 'positional or keyword'), "
    )


def test_the_signatures_are_formatted_within_the_line_length(site, api):
    """Ruff formats each signature into lines of at most ``line_length`` characters; without a
    formatter a signature is one long line in a scroll box."""
    options = site.config.plugins["mkdocstrings"].config.handlers["python"]["options"]
    assert options["separate_signature"] and options["show_signature_annotations"]
    limit = options["line_length"]
    long = [
        f"{rendered.id}: {line!r}"
        for rendered in api if rendered.signature
        for line in rendered.signature.splitlines() if len(line) > limit
    ]
    assert long == [], f"signature lines over {limit} characters: is Ruff installed (the `docs` extra)?"
