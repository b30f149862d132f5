"""Flower adapters on the server side.

The fleet of SuperNodes, the transport the runner uses,
and the simulation / Deployment Engine launchers (``docs/flower.md``).
"""
