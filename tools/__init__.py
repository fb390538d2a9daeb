"""Developer tools that are not part of streamgate: probes for one question at a time."""
