"""What to change: the recommendation rules (recommend), each returning ranked advice."""
