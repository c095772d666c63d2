"""L2 adapter types: the spec an adapter type publishes and the registry that finds them."""
