"""ext4's jbd2 journal: transactions and checkpoints (journals), the journal's fill over time
(fill) and the journal-size model (model)."""
