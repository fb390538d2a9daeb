"""The `streamgate` command line (serve, groups, streams, and plugged-in commands)."""
