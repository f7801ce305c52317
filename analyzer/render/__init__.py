"""Rendering, apart from computing: console text (text), plotly figures (figures) and the
self-contained HTML pages (report, compare_report, fleet_report)."""
