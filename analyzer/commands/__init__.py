"""The command-line entries: jstall analyze, report, compare and fleet (one *_cmd module each)."""
