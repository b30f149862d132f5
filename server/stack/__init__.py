"""The operator stack: docker/compose.yaml, and the same services as local processes."""
