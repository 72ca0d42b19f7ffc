"""RocketMQ stores: CommitLog, ConsumeQueue and index files, and the broker's cleaning rules."""
