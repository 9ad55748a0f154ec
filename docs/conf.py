"""Sphinx configuration of the documentation: the user guide (``docs/guide/``, Markdown read
by MyST) and the API reference, built from the package's docstrings.

``bash scripts/docs.sh`` builds it with warnings as errors and with every cross-reference
checked (``-W -n``). The build needs no network: references to other libraries (torch,
BoTorch, GPyTorch, Ax) are checked to exist but stay plain text.
"""

import ast
import functools
import importlib
import inspect
import sys
from pathlib import Path

# Document the checkout these sources belong to, also where another copy of the package is
# installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import botorch_nn_uq  # noqa: E402

project = "botorch-nn-uq"
author = "The botorch-nn-uq authors"
copyright = "the botorch-nn-uq authors (MIT licence)"
release = botorch_nn_uq.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# Links to a heading of another page (``cli.md#ask-and-tell``) resolve like GitHub's.
myst_heading_anchors = 3

templates_path = ["_templates"]
# docs/pypi.md is the package index's description, not a page of this site.
exclude_patterns = ["_build", "pypi.md"]

# One page per module of the package, found by importing it (docs/api.rst and
# _templates/autosummary/module.rst), so a new module needs no edit here.
autosummary_generate = True
# A package's page lists its public names (its __all__) with links to their descriptions.
autosummary_ignore_module_all = False
# Each object is described once, on the page of the module that defines it: a package's
# re-exports are not described again on the package's page, and references to them
# (botorch_nn_uq.models.DeepEnsemble) link to that one description (_resolve_by_import).
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "ignore-module-all": True,
}
autodoc_member_order = "bysource"

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"botorch-nn-uq {release}"

PACKAGE = "botorch_nn_uq"


def _skip_named_tuple_fields(app, what, name, obj, skip, options):
    r"""Leave out a NamedTuple's field accessors ("Alias for field number 0"): the class's
    ``Attributes:`` section documents its fields, and both would describe the same names."""
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith(
        "Alias for field number"
    ):
        return True
    return None


def _untyped_attribute_docstrings(app, what, name, obj, options, lines):
    r"""Keep an attribute's docstring whole. Napoleon reads an attribute docstring's first
    line as ``type: description``, but the package's open with prose ("The model's batch
    shape: empty, ..."), and their types are in the annotations. An empty comment first
    (runs before napoleon) leaves napoleon no type to split off."""
    if what in ("attribute", "data", "property") and lines:
        lines[:0] = ["..", ""]


def _drop_object_base(app, name, obj, options, bases):
    r"""No "Bases: object" line under every plain class (dataclasses, hyperparameters)."""
    bases[:] = [base for base in bases if base is not object]


def _readable_factory_defaults(app, what, name, obj, options, signature, return_annotation):
    r"""Show a dataclass field's ``default_factory`` as ``...``: ``inspect`` renders it as
    ``<factory>``, which is not Python, and the signature would not parse."""
    if signature is not None and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


@functools.cache
def _imported_names(module: str) -> dict[str, str]:
    r"""``{name: "module.name"}`` for every ``from module import name`` in the source of
    the module ``module``, including those under ``if TYPE_CHECKING:`` that annotations
    name."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError):
        return {}
    return {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        for alias in node.names
    }


def _import_path(path: str):
    r"""The object that the dotted ``path`` names, and where it was found: ``(object,
    owner, name)`` with ``owner.name`` the object, or ``None`` if nothing has that path."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module name, or one that fails to import: not found
            continue
        owner, name = None, parts[cut - 1]
        for name in parts[cut:]:
            owner = obj
            try:
                obj = getattr(obj, name)
            except AttributeError:
                return None
        return obj, owner, name
    return None


def _canonical_name(obj, owner, name: str) -> str | None:
    r"""The name under which autodoc documents ``obj`` (where it is defined)."""
    if isinstance(obj, property):
        obj = obj.fget
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    if inspect.ismodule(owner):
        return f"{owner.__name__}.{name}"
    if inspect.isclass(owner):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return None


def _resolve_by_import(app, env, node, contnode):
    r"""Resolve a Python cross-reference that Sphinx's own look-up missed.

    Docstrings name objects as their module sees them: a re-export
    (``botorch_nn_uq.models.DeepEnsemble``), an imported name (``DeepEnsemble`` in a module
    that imports it, also under ``TYPE_CHECKING``), a method of another class
    (``NeuralSurrogateModel.fit``). The name is looked up by importing it from the
    reference's module and class; an object the package documents gets a link to its one
    description, any other existing object (torch, BoTorch, a private helper) plain text.
    Names that import nothing fall back to the one documented object of the package whose
    name ends with them (preferring the reference's module). A name that matches nothing
    is left to Sphinx, which reports it (``-n``): a broken reference fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = node["reftarget"]
    module, klass = node.get("py:module"), node.get("py:class")
    scopes = [f"{module}.{klass}" if module and klass else None, module, None]
    candidates = [f"{scope}.{target}" for scope in scopes if scope] + [target]
    if module:
        head, _, tail = target.partition(".")
        imported = _imported_names(module)
        if head in imported:
            candidates.append(f"{imported[head]}.{tail}" if tail else imported[head])
    for candidate in candidates:
        found = _import_path(candidate)
        if found is None:
            continue
        canonical = _canonical_name(*found) or candidate
        if canonical in domain.objects:
            return domain.resolve_any_xref(
                env, node["refdoc"], app.builder, canonical, node, contnode
            )[0][1]
        return contnode
    suffix = f".{target}"
    matches = [name for name in domain.objects if name.endswith(suffix)]
    local = [name for name in matches if module and name.startswith(f"{module}.")]
    for names in (local, matches):
        if len(names) == 1 and names[0].startswith(f"{PACKAGE}."):
            return domain.resolve_any_xref(
                env, node["refdoc"], app.builder, names[0], node, contnode
            )[0][1]
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_named_tuple_fields)
    # Before napoleon's own handler (priority 500).
    app.connect("autodoc-process-docstring", _untyped_attribute_docstrings, priority=400)
    app.connect("autodoc-process-bases", _drop_object_base)
    app.connect("autodoc-process-signature", _readable_factory_defaults)
    app.connect("missing-reference", _resolve_by_import)
