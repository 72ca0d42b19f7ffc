"""Kafka log directories: Kafka's own retention (``UnifiedLog.deleteOldSegments``), run from
outside a stopped broker. ``shared/spec/kafka.md`` is the specification."""
