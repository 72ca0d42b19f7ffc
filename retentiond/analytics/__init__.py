"""The fleet analysis job: shipped journal records → Parquet tables and a human report.

Optional: it needs the ``spark`` extra (pyspark, duckdb, matplotlib) and Java. The daemon never
imports this package; only ``cli.register`` is imported by ``retentiond --help``, and it
imports nothing beyond the standard library until the ``analyze`` command runs.
"""
