"""The report's jinja2 templates (tunebench/results/report/templates/, package data), rendered with autoescape on."""

from __future__ import annotations

import functools

import jinja2
from markupsafe import Markup

# Text that stands for a warning where no HTML can go (chart annotations, legends): the same glyph as the badge
# (macros.html.j2's warn_mark, which reads it as the global `warn_glyph`).
WARN_GLYPH = "!"


@functools.cache
def _environment() -> jinja2.Environment:
    # autoescape: every value is escaped unless it is markup already (a fragment another template rendered, or a
    # chart passed as Markup); undefined names fail rather than print nothing. Built once, for every template.
    environment = jinja2.Environment(loader=jinja2.PackageLoader("tunebench.results.report", "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    environment.globals["warn_glyph"] = WARN_GLYPH
    return environment


def render(name: str, **context) -> Markup:
    """The template `name` filled with `context`, as markup (its one trailing newline dropped: jinja2's default)."""
    return Markup(_environment().get_template(name).render(**context))


def macros(name: str):
    """The macros of the template `name`, to call from Python: each returns Markup, its arguments escaped."""
    return _environment().get_template(name).module


def markup(text: str) -> Markup:
    """Markup the report did not write itself, passed into a template as is: a chart matplotlib drew (an SVG)."""
    return Markup(text)
