"""The admin/metrics HTTP API (`serve --metrics-listen`)."""
