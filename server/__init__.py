"""Adapters around the core: command line, Flower ServerApp, Kafka and Prometheus."""
