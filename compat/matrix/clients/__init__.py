"""One module per matrix column; each maps row ids to a cell function."""
