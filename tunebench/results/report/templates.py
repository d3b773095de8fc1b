"""The report's jinja2 templates (tunebench/results/report/templates/, package data), rendered with autoescape on."""

from __future__ import annotations

import functools

import jinja2
from markupsafe import Markup


@functools.cache
def _environment() -> jinja2.Environment:
    # autoescape: every value is escaped unless it is markup already (html.Html, or a fragment passed as Markup);
    # undefined names fail rather than print nothing.
    return jinja2.Environment(loader=jinja2.PackageLoader("tunebench.results.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def render(name: str, **context) -> str:
    """The template `name` filled with `context`; its one trailing newline is dropped (jinja2's default)."""
    return _environment().get_template(name).render(**context)


def markup(text: str) -> Markup:
    """A fragment built (and escaped) by the report's own code, written into a template as is."""
    return Markup(text)
