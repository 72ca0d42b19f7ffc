"""The long-running side of retentiond: scheduler wiring, signals, reload, control socket,
sd_notify. ``retentiond.daemon.commands`` adds `run`, `status` and `trigger-delete` to the CLI.
"""
