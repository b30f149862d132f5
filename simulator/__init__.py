"""unlearnsim's pure core: maths, data, scenarios and the in-process federation.

Nothing in this package imports flwr, kafka or prometheus_client (see
``tests/test_layering.py``); the Flower, Kafka and Prometheus adapters live in
``clients/`` and ``server/``.
"""

__version__ = "0.1.0"
