"""retentiond: frees disk on broker stores exactly as the broker's own cleaner would."""

__version__ = "0.1.0"
