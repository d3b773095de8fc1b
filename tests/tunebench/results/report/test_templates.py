"""tunebench/results/report/templates.py: the report's pages come from jinja2 templates with autoescape on; markup the
report built itself (a fragment another template rendered, a chart passed through `markup`) is written as is."""

import ast
import re
from pathlib import Path

from markupsafe import Markup

from tests.fixtures.harness import REPO
from tunebench.results.report.html import table
from tunebench.results.report.templates import markup, render


def test_a_table_escapes_text_and_keeps_markup():
    out = table(["a<b", "n"], [["<i>x</i> & y", 1.5], [Markup("<b>kept</b>"), 2]], numeric={1}, cls="t",
                notes=[None, "note <u>"])
    assert out == ('<table class="t"><thead><tr><th>a&lt;b</th><th>n</th></tr></thead><tbody>'
                   '<tr><td>&lt;i&gt;x&lt;/i&gt; &amp; y</td><td class="num">1.5</td></tr>'
                   '<tr><td><b>kept</b></td><td class="num">2</td></tr>'
                   '<tr class="warning"><td colspan="2">note &lt;u&gt;</td></tr></tbody></table>')


def test_the_history_page_escapes_its_words_and_inlines_its_charts():
    page = render("history.html.j2", metric="m<1>", columns=["c"], runs=[(3, ["v&"])],
                  findings=[{"verdict": "ok", "lines": ["a<", "b"], "chart": markup("<svg></svg>")}])
    assert "<h1>History: m&lt;1&gt;</h1>" in page and "<p>a&lt;<br>b</p><svg></svg>" in page
    assert '<tr id="run-3"><td>v&amp;</td></tr>' in page and page.endswith("</table></body></html>")


# An HTML tag as it opens or closes: what a string of the report's Python code must not hold (its templates do).
TAG = re.compile(r"</?(div|table|thead|tbody|tr|td|th|p|h[1-6]|span|section|ul|ol|li|a|b|i|code|br|img|details"
                 r"|summary|style|script|html|head|body)\b", re.IGNORECASE)
REPORT_CODE = [*sorted((REPO / "tunebench" / "results" / "report").rglob("*.py")),
               REPO / "tunebench" / "history" / "report.py"]


def _tag_literals(path: Path) -> list[str]:
    """`line: text` of each string constant in `path` holding an HTML tag, docstrings left out (they may name one)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [f"{node.lineno}: {node.value[:60]!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and TAG.search(node.value)]


def test_the_tag_check_finds_markup_built_in_python(tmp_path):
    code = tmp_path / "section.py"
    code.write_text('"""A <p> named in a docstring is fine."""\n\n\ndef f(x):\n    """So is <td> here."""\n'
                    '    # and <div> in a comment\n    return f"<h2>{x}</h2>" + "</table>"\n')
    assert sorted(_tag_literals(code)) == ["7: '</h2>'", "7: '</table>'", "7: '<h2>'"]


def test_no_html_is_built_in_the_reports_python():
    """Issue AC: the report's markup lives in templates/ (autoescaped); its modules pass data (a matplotlib chart
    may arrive as markup, never a fragment written in Python)."""
    assert REPORT_CODE[-1].is_file()
    found = {str(path.relative_to(REPO)): hits for path in REPORT_CODE if (hits := _tag_literals(path))}
    assert found == {}, f"HTML written in Python (move it to tunebench/results/report/templates/): {found}"
