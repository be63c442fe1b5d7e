"""Every git operation of the server: typed functions over one runner, and the worktrees in the cache."""
