"""Reports: render `RunResult`s into PNG plots, one self-contained HTML page, CSV and JSON.

`reports.render.write_report` is the entry point; `reports.folders` writes what `pagesim run`,
`sweep` and `capacity` leave in their --out folder; `reports.plots` indexes one function per
plot (some live in `memory_plots`, `timeline` and `curves`); `reports.glossary` documents every
metric shown. Reports render data; they never re-simulate.

Imports: simulator, calibration (measured profiles and the fidelity figures, never its GPU side).
"""
