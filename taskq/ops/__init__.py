"""The operator API: one set of functions used by the CLI and the dashboard alike."""
