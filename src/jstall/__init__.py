"""jstall: find and explain ext4/jbd2 journal checkpoint stalls."""

__version__ = "0.1.0"
