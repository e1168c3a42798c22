"""Reports: render `RunResult`s into PNG plots, one self-contained HTML page, CSV and JSON.

`reports.render.write_report` is the entry point; `reports.plots` has one function per plot;
`reports.glossary` documents every metric shown. Reports render data; they never re-simulate.
"""
