"""raftlog package."""
