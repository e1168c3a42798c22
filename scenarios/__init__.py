"""The built-in scenarios: TOML files, their golden summaries and the models they name (package
data, no code).

Imports: nothing.
"""
