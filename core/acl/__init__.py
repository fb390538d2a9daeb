"""Access control lists: the model (`model`), the authorizer's decisions (`authorizer`), and
client quotas (`quotas`). Stored in the metadata store, changed through the metadata worker."""
