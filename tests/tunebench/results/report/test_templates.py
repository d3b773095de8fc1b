"""tunebench/results/report/templates.py: the report's pages come from jinja2 templates with autoescape on; markup the
report built itself (a fragment another template rendered, a chart passed through `markup`) is written as is."""

from markupsafe import Markup

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
