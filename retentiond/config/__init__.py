"""Configuration: the key schema, the loaders (broker.yaml, broker.conf), the Settings."""
